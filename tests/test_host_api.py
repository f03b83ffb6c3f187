"""Layer 3's host API: streams, events, device properties, pinned memory, the CUDA runtime-API
spelling and its HIP twin, and `lapis hipify`, checked against numpy and the trace."""

import dataclasses
import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import lapis
from lapis import abi, cuda, hip, runtime
from lapis.cli import main
from lapis.cuda.context import Stream
from lapis.cuda.hipify import hipify
from lapis.cuda.runtime_api import FUNCTIONS, HIPIFY_TABLE
from lapis.hardware import get_profile

N = 256


@cuda.jit
def axpb(x, a, b):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] * a + b


@cuda.jit
def scaled(x, a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * a


@cuda.jit
def scatter(out, offset):
    i = cuda.grid(1)
    out[i + offset] = 1.0


def f32(v):
    return np.float32(v)


def blocks(n, threads=128):
    return (n + threads - 1) // threads


class Gate:
    """A barrier packet at the head of a stream's queue that holds the stream until `open()`; the
    host opens it by storing 0 into the signal the packet depends on. A watchdog opens it after
    10 s, so a bug shows as a failure rather than a hang."""

    def __init__(self, *streams):
        gc.collect()            # memory is freed only when the GPU is idle, so free what is collectable now
        cuda.synchronize()
        self.signal = runtime.init().create_signal(1)
        for s in streams:
            s.queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND, barrier=True),
                                             dep_signal0=self.signal.handle))
        self.timers = [threading.Timer(10, self.open)]
        self.timers[0].start()

    def open(self):
        self.signal.store(0)

    def open_after(self, seconds):
        self.timers.append(threading.Timer(seconds, self.open))
        self.timers[-1].start()

    def destroy(self):
        for timer in self.timers:
            timer.cancel()
            if timer.is_alive() and timer is not threading.current_thread():
                    self.signal.destroy()


def dispatch_queues(t):
    return [e.args["queue"] for e in t.select(2, "packet") if e.args["fields"]["header"]["type"] == "KERNEL_DISPATCH"]


@pytest.fixture
def stream_launches():
    """Fails at once (instead of waiting at a gate) unless kernel[grid, block, stream] reaches the stream's queue."""
    s = cuda.stream()
    try:
        with lapis.trace() as t:
            axpb[1, 32, s](cuda.device_array(32, np.float32), f32(1), f32(0))
            s.synchronize()
        on_stream = dispatch_queues(t) == [s.queue.queue_id]
    finally:
        cuda.current_context().destroy_stream(s)
        cuda.synchronize()        # its queue goes now, not while a test holds a stream at a gate
    if not on_stream:
        pytest.fail("kernel[grid, block, stream] did not launch on the stream's queue: Dispatcher.launch must pass "
                    "its stream on, as Context.launch(..., stream=stream)")


# -- streams ----------------------------------------------------------------------------------

def test_a_stream_has_its_own_queue_and_runs_its_launches_in_order(stream_launches):
    x = np.linspace(-1, 1, N, dtype=np.float32)
    d = cuda.to_device(x)
    s = cuda.stream()
    assert s.queue is not cuda.default_stream().queue and s != cuda.default_stream()
    assert cuda.default_stream() == Stream(cuda.current_context())           # one default stream per context
    with lapis.trace() as t:
        for a, b in [(2, 1), (-3, 0.5), (0.5, -2)]:
            axpb[blocks(N), 128, s](d, f32(a), f32(b))
        s.synchronize()
    assert dispatch_queues(t) == [s.queue.queue_id] * 3
    assert s.query()
    np.testing.assert_allclose(d.copy_to_host(), ((x * 2 + 1) * -3 + 0.5) * 0.5 - 2, rtol=1e-6)


def test_launches_on_two_streams_interleave_and_each_stays_in_order(stream_launches):
    x1, x2 = np.arange(N, dtype=np.float32), np.ones(N, np.float32)
    d1, d2 = cuda.to_device(x1), cuda.to_device(x2)
    s1, s2 = cuda.stream(), cuda.stream()
    gate = Gate(s1, s2)         # both streams wait at the gate, so their queues fill before either runs
    with lapis.trace() as t:
        for k in range(3):      # the grid tells the launches apart in the trace: 2, 3, 4 blocks on s1; 5, 6, 7 on s2
            axpb[2 + k, 128, s1](d1, f32(2), f32(k))
            axpb[5 + k, 128, s2](d2, f32(3), f32(-k))
        gate.open()
        cuda.synchronize()
    grids = [e.args["grid"][0] for e in t.select(0, "kernel")]
    assert [g for g in grids if g < 5] == [2, 3, 4] and [g for g in grids if g >= 5] == [5, 6, 7]
    assert all((a < 5) != (b < 5) for a, b in zip(grids, grids[1:], strict=False))   # alternating streams
    np.testing.assert_allclose(d1.copy_to_host(), ((x1 * 2) * 2 + 1) * 2 + 2)
    np.testing.assert_allclose(d2.copy_to_host(), ((x2 * 3) * 3 - 1) * 3 - 2)
    gate.destroy()


@pytest.mark.parametrize("one_each", [False, True])
def test_a_lone_queue_runs_its_packets_in_one_turn_and_writes_its_read_index_once(one_each, monkeypatch):
    from lapis.hardware.command_processor import CommandProcessor
    default = CommandProcessor.PACKETS_ALONE
    alone = 1 if one_each else default
    monkeypatch.setattr(CommandProcessor, "PACKETS_ALONE", alone)
    monkeypatch.setattr(CommandProcessor, "DEFER_S", 10.0)      # the processor's thread leaves the queue alone
    x = np.arange(N, dtype=np.float32)
    d = cuda.to_device(x)
    s = cuda.stream()
    axpb[blocks(N), 128, s](d, f32(1), f32(0))      # compiled, and the stream's queue made, before the trace
    s.synchronize()
    with lapis.trace() as t:
        for _ in range(10):
            axpb[blocks(N), 128, s](d, f32(1), f32(1))
        s.synchronize()                 # this thread runs the ten packets: in one turn, or one a turn
    updates = [e for e in t.select(0, "pcie") if e.args["what"] == "read index update"]
    assert len(dispatch_queues(t)) == 10 and len(updates) == (1 if alone >= 10 else 10)
    np.testing.assert_allclose(d.copy_to_host(), x + 10)
    cuda.current_context().destroy_stream(s)
    docs = (Path(__file__).resolve().parent.parent / "docs")
    assert f"`PACKETS_ALONE` ({default})" in (docs / "layer0-hardware.md").read_text().replace("\n", " ")
    assert f"(a queue alone runs up to {default})" in \
        (docs / "layer3-programming-interface.md").read_text().replace("\n", " ")


def test_a_stream_callback_runs_after_the_stream_s_work_and_async_done_awaits_it():
    import asyncio
    x = cuda.mapped_array(N, np.float32)     # host memory the kernel writes in place: the callback reads it
    x[:] = 1
    s = cuda.stream()
    axpb[blocks(N), 128, s](x, f32(3), f32(1))                      # compiled before the timed part
    s.synchronize()
    done, seen = threading.Event(), []

    def callback(stream, status, arg):
        seen.append((stream, status, arg, float(x[0])))
        done.set()

    axpb[blocks(N), 128, s](x, f32(2), f32(0))
    s.add_callback(callback, "tag")
    assert done.wait(30)                     # nothing else waits: the processor's thread runs the kernel
    assert seen == [(s, 0, "tag", 8.0)]      # after the second launch: (1 * 3 + 1) * 2

    async def awaited():
        axpb[blocks(N), 128, s](x, f32(1), f32(1))
        return await s.async_done()
    assert asyncio.run(awaited()) is s and x[0] == 9.0

    late = []                                # a synchronize returns once the callbacks before it have returned
    s.add_callback(lambda stream, status, arg: time.sleep(0.3) or late.append(arg), "slow")
    s.synchronize()
    assert late == ["slow"]
    s.add_callback(lambda stream, status, arg: time.sleep(0.3) or late.append(arg), "slower")
    cuda.synchronize()
    assert late == ["slow", "slower"]

    @cuda.jit
    def scatter(out, offset):
        out[cuda.grid(1) + offset] = 1.0
    scatter[1, 32, s](cuda.device_array(32, np.float32), 1 << 40)   # far past anything mapped: the queue stops
    failed = []
    done.clear()                             # first: the queue has stopped, so the callback may run at once
    s.add_callback(lambda stream, status, arg: failed.append(status) or done.set())
    assert done.wait(30) and failed == [719]                      # cudaErrorLaunchFailure
    with pytest.raises(cuda.KernelFault):
        s.synchronize()
    cuda.current_context().destroy_stream(s)


def test_stream_synchronize_waits_for_that_stream_only(stream_launches):
    x = np.arange(N, dtype=np.float32)
    d1, d2 = cuda.to_device(x), cuda.to_device(x)
    s1, s2 = cuda.stream(), cuda.stream()
    gate = Gate(s1)
    axpb[blocks(N), 128, s1](d1, f32(2), f32(0))
    done1 = cuda.event()
    done1.record(s1)
    axpb[blocks(N), 128, s2](d2, f32(3), f32(0))
    s2.synchronize()                            # returns although s1 cannot have run
    assert s2.query() and not s1.query() and not done1.query()
    gate.open()
    s1.synchronize()
    assert done1.query()
    np.testing.assert_array_equal(d1.copy_to_host(), x * 2)
    np.testing.assert_array_equal(d2.copy_to_host(), x * 3)
    gate.destroy()


def test_copies_on_a_stream_follow_its_earlier_launches(stream_launches):
    x = np.arange(N, dtype=np.float32)
    d_in, d_out = cuda.to_device(x), cuda.device_array(N, np.float32)
    s = cuda.stream()
    gate = Gate(s)
    scaled[blocks(N), 128, s](d_in, f32(2), d_out)
    gate.open_after(0.05)
    d_in.copy_to_device(np.zeros(N, np.float32), stream=s)     # waits for the launch that reads d_in
    np.testing.assert_array_equal(d_out.copy_to_host(stream=s), x * 2)
    d_new = cuda.to_device(x + 1, stream=s)
    scaled[blocks(N), 128, s](d_new, f32(-1), d_out)
    host = np.empty(N, np.float32)
    assert d_out.copy_to_host(host, stream=s) is host
    np.testing.assert_array_equal(host, -(x + 1))
    gate.destroy()


def test_the_default_stream_waits_for_other_streams_and_they_for_it(stream_launches):
    x = np.arange(N, dtype=np.float32)
    d, d_out = cuda.to_device(x), cuda.device_array(N, np.float32)
    s = cuda.stream()
    gate = Gate(s)
    axpb[blocks(N), 128, s](d, f32(2), f32(1))
    gate.open_after(0.05)
    scaled[blocks(N), 128](d, f32(10), d_out)          # default stream: runs after s's launch (legacy stream)
    axpb[blocks(N), 128, s](d_out, f32(1), f32(1))     # and s's next launch after the default stream's
    cuda.synchronize()
    np.testing.assert_array_equal(d_out.copy_to_host(), (x * 2 + 1) * 10 + 1)
    gate.destroy()


def test_a_kernel_fault_on_a_stream_is_reported_and_the_stream_runs_again(stream_launches):
    out = cuda.device_array(64, np.float32)
    s = cuda.stream()
    gate = Gate(s)                                    # so the fault cannot surface before the record
    after = cuda.event()
    scatter[1, 64, s](out, 1_000_000_000)             # 4 GB away: past every allocation, cached ones too
    after.record(s)                                   # queued behind the fault: it never completes
    gate.open()
    with pytest.raises(cuda.KernelFault) as e:
        s.synchronize()
    assert e.value.kernel == "scatter" and "STG" in e.value.instruction
    assert e.value.address == out.ptr + 4 * 1_000_000_000 and f"{e.value.address:#x}" in str(e.value)
    with pytest.raises(cuda.CudaError, match="never completed"):
        after.synchronize()
    scatter[1, 64, s](out, 0)
    s.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), np.ones(64, np.float32))
    gate.destroy()


def test_destroyed_streams_give_back_their_queues(stream_launches):
    ctx = cuda.current_context()
    d = cuda.to_device(np.ones(N, np.float32))
    s = cuda.stream()
    axpb[blocks(N), 128, s](d, f32(2), f32(0))
    state = s.state
    del s
    gc.collect()
    cuda.synchronize()                                # its work still ran; then its queue went
    assert state not in ctx.streams and state.queue.destroyed
    np.testing.assert_array_equal(d.copy_to_host(), np.full(N, 2, np.float32))
    s2 = cuda.stream()
    ctx.destroy_stream(s2)
    with pytest.raises(cuda.InvalidHandleError, match="destroyed"):
        axpb[1, 32, s2](d, f32(1), f32(0))
    with pytest.raises(cuda.InvalidHandleError, match="default stream"):
        ctx.destroy_stream(cuda.default_stream())
    with pytest.raises(cuda.InvalidHandleError, match="belongs to"):
        hip.to_device(np.ones(4, np.float32)).copy_to_host(stream=cuda.default_stream())


# -- events -----------------------------------------------------------------------------------

def test_event_elapsed_time_is_the_device_time_between_the_events(stream_launches):
    d = cuda.to_device(np.ones(4096, np.float32))
    s = cuda.stream()
    start, end = cuda.event(), cuda.event()
    with lapis.trace() as t:
        start.record(s)
        for _ in range(3):
            axpb[blocks(4096), 128, s](d, f32(1.5), f32(1))
        end.record(s)
        end.synchronize()
    ms = start.elapsed_time(end)
    assert ms > 0 and cuda.event_elapsed_time(start, end) == ms and start.query() and end.query()
    t0, t1 = start._work.end_ns, end._work.end_ns
    device = str(cuda.get_current_device().agent.name)
    kernels = [e for e in t.select(0, "kernel") if e.args["device"] == device]
    assert len(kernels) == 3 and all(t0 <= e.sim_start_ns and e.sim_end_ns <= t1 + 1 for e in kernels)
    # The device clock advances by kernels and PCIe transactions only: the window holds exactly those.
    inside = [e for e in t.select(0) if e.name in ("kernel", "pcie") and e.args["device"] == device
              and t0 - 1 <= e.sim_start_ns and e.sim_end_ns <= t1 + 1]
    kernel_ns = sum(e.args["time_ns"] for e in kernels)
    assert ms * 1e6 >= kernel_ns
    assert ms * 1e6 == pytest.approx(sum(e.sim_end_ns - e.sim_start_ns for e in inside), abs=2)


def test_a_context_reuses_its_completion_signals(stream_launches):
    """Launches and event records take spare completion signals, re-armed, instead of a new one (and
    a new driver event) each; the results and the events' device times are those of fresh ones."""
    d = cuda.to_device(np.zeros(N, np.float32))
    start, end = cuda.event(), cuda.event()
    for _ in range(2):                                         # the second round reuses the first's
        with lapis.trace() as t:
            start.record()
            for k in range(5):
                axpb[blocks(N), 128](d, f32(1), f32(k))
            end.record()
            end.synchronize()
    assert [e for e in t.select(1) if e.name in ("CREATE_EVENT", "DESTROY_EVENT")] == []
    np.testing.assert_array_equal(d.copy_to_host(), np.full(N, 20, np.float32))
    kernels = t.select(0, "kernel")
    assert len(kernels) == 5 and start._work.end_ns <= kernels[0].sim_start_ns
    assert kernels[-1].sim_end_ns <= end._work.end_ns + 1 and start.elapsed_time(end) > 0


def test_event_states_and_misuse():
    e = cuda.event()
    assert e.query()                                  # never recorded: nothing to wait for
    e.synchronize()
    other = cuda.event()
    with pytest.raises(cuda.InvalidHandleError, match="not been recorded"):
        e.elapsed_time(other)
    untimed = cuda.event(timing=False)
    untimed.record()
    e.record()
    with pytest.raises(cuda.CudaError, match="timing=False"):
        e.elapsed_time(untimed)
    s = cuda.stream()
    gate = Gate(s)
    held = cuda.event()
    held.record(s)
    assert not held.query()
    gate.open_after(0.05)
    held.wait(cuda.default_stream())                  # later default-stream work follows the event
    assert held.query()
    gh = hip.event()
    gh.record()
    with pytest.raises(cuda.InvalidHandleError, match="different devices"):
        e.elapsed_time(gh)
    e.destroy()
    with pytest.raises(cuda.InvalidHandleError, match="destroyed"):
        e.record()
    gate.destroy()


def test_signals_carry_the_device_timestamps_of_their_packet():
    rt = runtime.init()
    gpu = cuda.get_current_device().agent
    queue = rt.create_queue(gpu, 64)
    done = rt.create_signal(1)
    before = rt.clock_ns(gpu)
    queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND),
                                   completion_signal=done.handle))
    queue.wait(done)
    start_ts, end_ts = done.timestamps()
    assert before <= start_ts <= end_ts <= rt.clock_ns(gpu)
    done.destroy()
    queue.destroy()


# -- devices and memory -----------------------------------------------------------------------

def test_device_properties_come_from_the_profile():
    dev = cuda.get_current_device()
    p = dev.agent.properties
    assert dev.name == "NVIDIA H200 SXM (simulated)" and dev.compute_capability == (9, 0)
    assert (dev.MULTIPROCESSOR_COUNT, dev.WARP_SIZE, dev.MAX_THREADS_PER_BLOCK, dev.MAX_SHARED_MEMORY_PER_BLOCK,
            dev.total_memory) == (p.compute_units, 32, p.max_threads_per_block, p.shared_per_block, p.memory_bytes)
    amd = hip.get_current_device()
    assert amd.WARP_SIZE == 64 and amd.compute_capability == (9, 4) and "MI300X" in amd.name
    free, total = cuda.current_context().get_memory_info()
    assert total == dev.total_memory and 0 < free <= total
    big = cuda.device_array(64 << 20, np.uint8)
    assert cuda.current_context().get_memory_info().free <= free - (64 << 20)
    del big


def test_device_properties_are_a_typed_frozen_record_of_the_profile():
    props = cuda.get_device_properties(0)
    profile = get_profile(props.profile)
    assert (props.name, props.major, props.minor, props.total_memory, props.multi_processor_count,
            props.warp_size, props.shared_memory_per_block, props.L2_cache_size) == (
        profile.marketing_name, *profile.compute_capability, profile.memory_bytes, profile.compute_units,
        profile.warp_size, profile.shared_per_block, profile.l2_bytes)
    assert props.peak_fp32_flops == profile.fp32_tflops * 1e12 and props.gcnArchName == ""
    amd = hip.get_device_properties(0)
    assert amd.L2_cache_size == 4 * 2**20 and amd.gcnArchName == "gfx942"     # one XCD's L2, as ROCm reports it
    fields = {f.name: f.type for f in dataclasses.fields(props)}
    assert fields["multi_processor_count"] is int and fields["name"] is str and fields["memory_bandwidth"] is float
    with pytest.raises(dataclasses.FrozenInstanceError):
        props.warp_size = 64
    assert props == cuda.get_device_properties("cuda:0") and "multi_processor_count=132" in repr(props)
    amd = hip.get_device_properties(0)
    assert amd.warp_size == 64 and amd.gcnArchName == "gfx942" and amd.multi_processor_count == 304


def test_pinned_arrays_copy_without_staging_and_live_as_long_as_a_view():
    x = np.arange(1000, dtype=np.float32)
    pinned = cuda.pinned_array(1000, np.float32)
    assert isinstance(pinned, np.ndarray) and pinned.shape == (1000,) and pinned.dtype == np.float32
    pinned[:] = x
    owner = pinned.base
    while isinstance(owner, np.ndarray):
        owner = owner.base
    with lapis.trace() as t:
        d = cuda.to_device(pinned)
        back = cuda.pinned_array(1000, np.float32)
        d.copy_to_host(back)
    copies = t.select(2, "memory_copy")
    assert [c.args["kind"] for c in copies] == ["host_to_device", "device_to_host"]
    assert owner.va <= copies[0].args["src"] < owner.va + owner.buffer.size      # the engine read the pinned page
    np.testing.assert_array_equal(back, x)
    tail = pinned[500:]
    del pinned, owner
    gc.collect()
    np.testing.assert_array_equal(tail, x[500:])
    grid2 = cuda.pinned_array((3, 4), np.float64, order="F")
    assert grid2.flags.f_contiguous and grid2.shape == (3, 4)


@pytest.mark.parametrize("api", [cuda, hip], ids=["h200", "mi300x"])
def test_pinned_and_mapped_arrays_like_another_keep_its_shape_dtype_and_order(api):
    for like in (np.zeros((3, 4), np.float32, order="F"), api.to_device(np.zeros((2, 5), np.int16))):
        for made in (api.pinned_array_like(like), api.mapped_array_like(like)):
            assert isinstance(made, np.ndarray) and made.shape == like.shape and made.dtype == like.dtype
            assert made.flags.f_contiguous == (like.flags["F_CONTIGUOUS"] and not like.flags["C_CONTIGUOUS"])
    assert type(api.mapped_array_like(np.zeros(3))).__name__ == "MappedNDArray"


@pytest.mark.parametrize("api", [cuda, hip], ids=["h200", "mi300x"])
def test_a_mapped_array_is_used_in_place_by_kernels_with_no_copy(api, recwarn):
    @api.jit
    def twice(x):
        i = api.grid(1)
        if i < x.size:
            x[i] = x[i] * 2

    a = api.mapped_array(10, np.float32)
    assert isinstance(a, np.ndarray)
    a[:] = np.arange(10) / 4
    twice[1, 32](a)                             # both layouts compiled and loaded before the trace
    twice[1, 32](a[::2])
    api.synchronize()
    with lapis.trace() as t:
        twice[1, 32](a)
        twice[1, 32](a[2:8:2])                  # a strided view of it, in place too
        api.synchronize()
    assert not t.select(2, "memory_copy") and not recwarn.list        # no copy either way, no implicit-copy warning
    expected = np.arange(10, dtype=np.float32) / 4 * 2                  # the four launches, on the host
    expected[::2] *= 2
    expected *= 2
    expected[2:8:2] *= 2
    np.testing.assert_array_equal(a, expected)                        # the kernels wrote the host's memory
    with pytest.raises(ValueError, match="mapped memory"):
        np.zeros(3).view(type(a)).device_view()


# -- the runtime API --------------------------------------------------------------------------

def test_malloc_memcpy_memset_free_round_trip():
    x = np.arange(N, dtype=np.float32)
    err, p = cuda.cudaMalloc(x.nbytes)
    assert err == cuda.cudaSuccess and int(p) > 0 and isinstance(p, int)
    assert cuda.cudaMemcpy(p, x, x.nbytes, cuda.cudaMemcpyHostToDevice) == (cuda.cudaSuccess,)
    err, q = cuda.cudaMalloc(x.nbytes)
    assert cuda.cudaMemcpy(q, p, x.nbytes, cuda.cudaMemcpyDeviceToDevice) == (cuda.cudaSuccess,)
    assert cuda.cudaMemset(q + 4 * 10, 0, 4 * 6) == (cuda.cudaSuccess,)                   # pointer arithmetic
    y = np.empty_like(x)
    assert cuda.cudaMemcpy(y, q, x.nbytes, cuda.cudaMemcpyDeviceToHost) == (cuda.cudaSuccess,)
    expect = x.copy()
    expect[10:16] = 0
    np.testing.assert_array_equal(y, expect)
    z = np.empty_like(x)
    assert cuda.cudaMemcpy(z, p, x.nbytes, cuda.cudaMemcpyDefault) == (cuda.cudaSuccess,)   # inferred: D to H
    np.testing.assert_array_equal(z, x)
    err, free, total = cuda.cudaMemGetInfo()
    assert err == cuda.cudaSuccess and 0 < free <= total
    assert cuda.cudaFree(p) == (cuda.cudaSuccess,) and cuda.cudaFree(q) == (cuda.cudaSuccess,)
    assert cuda.cudaFree(0) == (cuda.cudaSuccess,)                      # freeing NULL is allowed
    assert cuda.cudaMalloc(0) == (cuda.cudaSuccess, 0)


def test_error_codes_and_the_last_error():
    cuda.cudaGetLastError()                           # whatever an earlier test left
    err, p = cuda.cudaMalloc(1 << 60)
    assert (err, p) == (cuda.cudaErrorMemoryAllocation, None) and int(err) == 2
    assert cuda.cudaPeekAtLastError() == (cuda.cudaErrorMemoryAllocation,)
    assert cuda.cudaGetLastError() == (cuda.cudaErrorMemoryAllocation,)
    assert cuda.cudaGetLastError() == (cuda.cudaSuccess,)
    assert cuda.cudaGetErrorString(err) == (cuda.cudaSuccess, "out of memory")
    assert cuda.cudaGetErrorName(cuda.cudaErrorIllegalAddress) == (cuda.cudaSuccess, "cudaErrorIllegalAddress")
    assert cuda.cudaGetErrorString(12345)[1] == "unrecognized error code"
    assert [int(c) for c in (cuda.cudaErrorInvalidValue, cuda.cudaErrorInvalidDevice, cuda.cudaErrorIllegalAddress,
                             cuda.cudaErrorLaunchFailure, cuda.cudaErrorInvalidResourceHandle,
                             cuda.cudaErrorNotReady)] == [1, 101, 700, 719, 400, 600]

    err, p = cuda.cudaMalloc(64)
    host = np.zeros(16, np.float32)
    assert cuda.cudaMemcpy(p, host, 64, 7) == (cuda.cudaErrorInvalidMemcpyDirection,)
    assert cuda.cudaMemcpy(p, np.zeros(32, np.float32), 128, cuda.cudaMemcpyHostToDevice) == \
        (cuda.cudaErrorInvalidValue,)                                   # overruns the allocation
    assert cuda.cudaMemcpy(host, 0xdead0000, 64, cuda.cudaMemcpyDeviceToHost) == (cuda.cudaErrorInvalidValue,)
    assert cuda.cudaMalloc(-1) == (cuda.cudaErrorInvalidValue, None)
    assert cuda.cudaFree(p) == (cuda.cudaSuccess,)
    assert cuda.cudaFree(p) == (cuda.cudaErrorInvalidValue,)           # twice
    assert cuda.cudaGetLastError() == (cuda.cudaErrorInvalidValue,)


def test_device_management():
    err, count = cuda.cudaGetDeviceCount()
    assert err == cuda.cudaSuccess and count == cuda.device_count() == 1
    assert cuda.cudaSetDevice(0) == (cuda.cudaSuccess,) and cuda.cudaGetDevice() == (cuda.cudaSuccess, 0)
    assert cuda.cudaSetDevice(5) == (cuda.cudaErrorInvalidDevice,)
    assert cuda.cudaGetDeviceProperties(3) == (cuda.cudaErrorInvalidDevice, None)
    err, prop = cuda.cudaGetDeviceProperties(0)
    dev = cuda.get_current_device()
    assert isinstance(prop, cuda.cudaDeviceProp)
    assert (prop.name, prop.totalGlobalMem, prop.multiProcessorCount, prop.warpSize, prop.maxThreadsPerBlock,
            prop.sharedMemPerBlock, (prop.major, prop.minor), prop.clockRate) == \
        (dev.name, dev.total_memory, dev.MULTIPROCESSOR_COUNT, 32, dev.MAX_THREADS_PER_BLOCK,
         dev.MAX_SHARED_MEMORY_PER_BLOCK, dev.compute_capability, 1_980_000)
    assert cuda.cudaDeviceSynchronize() == (cuda.cudaSuccess,)
    cuda.cudaGetLastError()


def test_streams_events_and_launches_through_the_runtime_api(stream_launches):
    x = np.linspace(0, 1, N, dtype=np.float32)
    err, p = cuda.cudaMalloc(x.nbytes)
    err, stream = cuda.cudaStreamCreate()
    assert err == cuda.cudaSuccess and isinstance(stream, cuda.cudaStream_t)
    err, start = cuda.cudaEventCreate()
    err, stop = cuda.cudaEventCreate()
    assert cuda.cudaMemcpyAsync(p, x, x.nbytes, cuda.cudaMemcpyHostToDevice, stream) == (cuda.cudaSuccess,)
    assert cuda.cudaEventRecord(start, stream) == (cuda.cudaSuccess,)
    arr = p.as_array(np.float32, N)
    assert cuda.cudaLaunchKernel(axpb, blocks(N), 128, (arr, f32(4), f32(-1)), 0, stream) == (cuda.cudaSuccess,)
    assert cuda.cudaEventRecord(stop, stream) == (cuda.cudaSuccess,)
    assert cuda.cudaEventSynchronize(stop) == (cuda.cudaSuccess,)
    assert cuda.cudaEventQuery(stop) == (cuda.cudaSuccess,) and cuda.cudaStreamQuery(stream) == (cuda.cudaSuccess,)
    err, ms = cuda.cudaEventElapsedTime(start, stop)
    assert err == cuda.cudaSuccess and ms > 0
    y = np.empty_like(x)
    assert cuda.cudaMemcpyAsync(y, p, x.nbytes, cuda.cudaMemcpyDeviceToHost, stream) == (cuda.cudaSuccess,)
    np.testing.assert_allclose(y, x * 4 - 1, rtol=1e-6)

    gate = Gate(stream)
    assert cuda.cudaLaunchKernel(axpb, blocks(N), 128, (arr, f32(1), f32(1)), 0, stream) == (cuda.cudaSuccess,)
    assert cuda.cudaEventRecord(stop, stream) == (cuda.cudaSuccess,)
    assert cuda.cudaStreamQuery(stream) == (cuda.cudaErrorNotReady,)
    assert cuda.cudaEventQuery(stop) == (cuda.cudaErrorNotReady,)
    assert cuda.cudaEventElapsedTime(start, stop) == (cuda.cudaErrorNotReady, None)
    assert cuda.cudaGetLastError() == (cuda.cudaSuccess,)               # "not ready" is an answer, not an error
    gate.open()
    assert cuda.cudaStreamSynchronize(stream) == (cuda.cudaSuccess,)
    assert cuda.cudaStreamWaitEvent(0, stop) == (cuda.cudaSuccess,)
    assert cuda.cudaStreamDestroy(stream) == (cuda.cudaSuccess,)
    assert cuda.cudaStreamSynchronize(stream) == (cuda.cudaErrorInvalidResourceHandle,)
    assert cuda.cudaStreamSynchronize("stream") == (cuda.cudaErrorInvalidResourceHandle,)
    assert cuda.cudaEventDestroy(start) == (cuda.cudaSuccess,)
    assert cuda.cudaEventRecord(start, 0) == (cuda.cudaErrorInvalidResourceHandle,)
    assert cuda.cudaLaunchKernel(axpb, 1, 128, (p, f32(1), f32(1))) == (cuda.cudaErrorInvalidValue,)
    assert cuda.cudaLaunchKernel(axpb, 1, 4096, (arr, f32(1), f32(1))) == (cuda.cudaErrorInvalidConfiguration,)
    assert cuda.cudaLaunchKernel(axpb, 1, 128, (arr,)) == (cuda.cudaErrorInvalidValue,)
    assert cuda.cudaGetLastError() == (cuda.cudaErrorInvalidValue,)
    gate.destroy()
    cuda.cudaFree(p)


def test_a_faulting_launch_is_reported_at_the_next_synchronization():
    err, p = cuda.cudaMalloc(256)
    out = p.as_array(np.float32)
    assert out.shape == (64,)
    # far past anything mapped, even with other tests' memory pools holding gigabytes (launches are async)
    assert cuda.cudaLaunchKernel(scatter, 1, 64, (out, 1 << 40)) == (cuda.cudaSuccess,)
    assert cuda.cudaDeviceSynchronize() == (cuda.cudaErrorIllegalAddress,)
    assert cuda.cudaGetLastError() == (cuda.cudaErrorIllegalAddress,)
    assert cuda.cudaLaunchKernel(scatter, 1, 64, (out, 0)) == (cuda.cudaSuccess,)           # the next one runs
    ones = np.empty(64, np.float32)
    assert cuda.cudaMemcpy(ones, p, 256, cuda.cudaMemcpyDeviceToHost) == (cuda.cudaSuccess,)
    assert np.all(ones == 1)
    cuda.cudaFree(p)
    with pytest.raises(cuda.CudaError, match="no live allocation"):
        p.as_array(np.float32)


# -- HIP --------------------------------------------------------------------------------------

def test_hip_names_are_the_cuda_ones_through_one_table():
    for names in FUNCTIONS.values():
        for name in names:
            assert callable(getattr(hip, HIPIFY_TABLE[name][0])) and callable(getattr(cuda, name))
    assert HIPIFY_TABLE["cudaMalloc"] == ("hipMalloc", "memory")
    assert HIPIFY_TABLE["cudaErrorMemoryAllocation"][0] == "hipErrorOutOfMemory"
    assert HIPIFY_TABLE["cudaDeviceProp"][0] == "hipDeviceProp_t"
    for cuda_code in cuda.cudaError_t:
        assert int(getattr(hip, HIPIFY_TABLE[cuda_code.name][0])) == int(cuda_code)
    assert (hip.hipSuccess, hip.hipErrorInvalidValue, hip.hipErrorOutOfMemory, hip.hipErrorInvalidDevice,
            hip.hipErrorIllegalAddress, hip.hipErrorLaunchFailure) == (0, 1, 2, 101, 700, 719)
    assert hip.hipMemcpyHostToDevice == cuda.cudaMemcpyHostToDevice == 1


def test_the_hip_runtime_api_runs_on_the_amd_gpu(stream_launches):
    x = np.arange(N, dtype=np.float32)
    err, p = hip.hipMalloc(x.nbytes)
    assert err == hip.hipSuccess and isinstance(err, hip.hipError_t)
    assert p.context.device.agent.properties.profile == "mi300x"
    assert hip.hipMemcpy(p, x, x.nbytes, hip.hipMemcpyHostToDevice) == (hip.hipSuccess,)
    err, stream = hip.hipStreamCreate()
    kernel = hip.jit(axpb.py_func)
    assert hip.hipLaunchKernelGGL(kernel, blocks(N), 128, 0, stream, p.as_array(np.float32, N), f32(2), f32(3)) is None
    assert hip.hipGetLastError() == (hip.hipSuccess,)
    assert hip.hipStreamSynchronize(stream) == (hip.hipSuccess,)
    y = np.empty_like(x)
    assert hip.hipMemcpy(y, p, x.nbytes, hip.hipMemcpyDeviceToHost) == (hip.hipSuccess,)
    np.testing.assert_array_equal(y, x * 2 + 3)
    hip.hipLaunchKernelGGL(kernel, 1, 4096, 0, 0, p.as_array(np.float32), f32(1), f32(1))
    assert hip.hipGetLastError() == (hip.hipErrorInvalidConfiguration,)
    assert hip.hipMalloc(1 << 60) == (hip.hipErrorOutOfMemory, None)
    assert hip.hipGetErrorString(hip.hipErrorNoDevice) == (hip.hipSuccess, "no ROCm-capable device is detected")
    err, prop = hip.hipGetDeviceProperties(0)
    assert isinstance(prop, hip.hipDeviceProp_t) and prop.warpSize == 64 and prop.multiProcessorCount == 304
    assert hip.hipFree(p) == (hip.hipSuccess,)
    hip.hipGetLastError()


# -- hipify -----------------------------------------------------------------------------------

CUDA_PROGRAM = '''\
import numpy as np

from lapis import cuda


@cuda.jit
def scale_add(x, a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * a + b


n = 300
x = np.arange(n, dtype=np.float32)
d_out = cuda.device_array_like(x)
scale_add[(n + 127) // 128, 128](cuda.to_device(x), np.float32(2.0), np.float32(1.0), d_out)
print(d_out.copy_to_host()[:6].tolist())

err, d_x = cuda.cudaMalloc(n * 4)   # cudaMalloc in a comment stays
assert err == cuda.cudaSuccess
err, d_y = cuda.cudaMalloc(n * 4)
(err,) = cuda.cudaMemcpy(d_x, x, n * 4, cuda.cudaMemcpyHostToDevice)
err, stream = cuda.cudaStreamCreate()
err, start = cuda.cudaEventCreate()
err, stop = cuda.cudaEventCreate()
cuda.cudaEventRecord(start, stream)
args = (d_x.as_array(np.float32, n), np.float32(3.0), np.float32(-1.0), d_y.as_array(np.float32, n))
(err,) = cuda.cudaLaunchKernel(scale_add, (n + 127) // 128, 128, args, 0, stream)
cuda.cudaEventRecord(stop, stream)
cuda.cudaStreamSynchronize(stream)
y = np.empty(n, np.float32)
(err,) = cuda.cudaMemcpy(y, d_y, n * 4, cuda.cudaMemcpyDeviceToHost)
err, ms = cuda.cudaEventElapsedTime(start, stop)
print(int(err), ms > 0, y[:6].tolist(), float(y.sum()))
err, _ = cuda.cudaMalloc(1 << 60)
print(int(err), int(cuda.cudaGetLastError()[0]), int(cuda.cudaGetLastError()[0]), err == cuda.cudaErrorMemoryAllocation)
print(cuda.cudaGetErrorString(err)[1], "cudaMalloc", cuda.get_current_device().WARP_SIZE)
cuda.cudaFree(d_x)
cuda.cudaFree(d_y)
'''


def test_hipify_rewrites_identifiers_and_leaves_strings_and_comments():
    source = '''\
import lapis
import lapis.cuda
from lapis import cuda as gpu, trace
from lapis.cuda import cudaMalloc, cudaSuccess, jit, CudaError
t = lapis.randn(2, 2, device=lapis.device("cuda"))   # cuda stays in strings: cuda.jit
err, p = cudaMalloc(16); ok = err == cudaSuccess
lapis.cuda.cudaFree(p); gpu.cudaDeviceSynchronize()
x = t.cuda
e: lapis.cuda.cudaError_t = gpu.cudaGetLastError()[0]
'''
    result = hipify(source, "prog.py")
    assert result.source == '''\
import lapis
import lapis.hip
from lapis import hip as gpu, trace
from lapis.hip import hipMalloc, hipSuccess, jit, HipError
t = lapis.randn(2, 2, device=lapis.device("cuda"))   # cuda stays in strings: cuda.jit
err, p = hipMalloc(16); ok = err == hipSuccess
lapis.hip.hipFree(p); gpu.hipDeviceSynchronize()
x = t.cuda
e: lapis.hip.hipError_t = gpu.hipGetLastError()[0]
'''
    assert result.counts == {"import": 3, "module": 2, "memory": 3, "error": 1, "numeric_literal": 2, "type": 2,
                             "device": 1}
    assert not result.warnings
    assert "converted 14 CUDA->HIP refs ( import:3 module:2 device:1 memory:3" in result.statistics("prog.py")
    warned = hipify("from lapis import cuda\ncuda.no_such_thing()\n", "w.py")
    assert warned.warnings == ["w.py:2: lapis.hip has no 'no_such_thing'; the converted program will not find it"]


def test_lapis_hipify_converts_a_program_that_then_runs_on_the_amd_gpu(tmp_path, capsys):
    src = tmp_path / "vadd_cuda.py"
    src.write_text(CUDA_PROGRAM)
    assert main(["hipify", str(src)]) == 0
    captured = capsys.readouterr()
    converted = captured.out
    assert "from lapis import hip" in converted and "hip.hipLaunchKernel(scale_add" in converted
    assert "hip.hipErrorOutOfMemory" in converted and "# cudaMalloc in a comment stays" in converted
    assert "cuda" not in converted.replace("# cudaMalloc", "").replace('"cudaMalloc"', "")
    assert "info: converted" in captured.err and "warn:0" in captured.err
    out = tmp_path / "vadd_hip.py"
    assert main(["hipify", str(src), "-o", str(out)]) == 0 and out.read_text() == converted
    env = {**os.environ, "LAPIS_GPUS": "h200,mi300x"}
    ran = [subprocess.run([sys.executable, str(p)], capture_output=True, text=True, env=env, timeout=120)
           for p in (src, out)]
    assert [r.returncode for r in ran] == [0, 0], [r.stderr for r in ran]
    cuda_lines, hip_lines = (r.stdout.splitlines() for r in ran)
    assert cuda_lines[:-1] == hip_lines[:-1]           # the same numbers on both GPUs
    assert cuda_lines[1].startswith("0 True [-1.0, 2.0, 5.0")
    assert cuda_lines[-1] == "out of memory cudaMalloc 32" and hip_lines[-1] == "out of memory cudaMalloc 64"
    inplace = tmp_path / "inplace.py"
    inplace.write_text(CUDA_PROGRAM)
    assert main(["hipify", "--inplace", str(inplace)]) == 0 and inplace.read_text() == converted
    assert main(["hipify", str(tmp_path / "missing.py")]) == 1
    with pytest.raises(SystemExit):
        main(["hipify", "--help"])
    assert "usage: lapis hipify" in capsys.readouterr().out


def test_the_memory_pool_caches_blocks_by_size_class():
    import gc
    cuda.synchronize()
    cuda.empty_cache()
    base_alloc, base_reserved = cuda.memory_allocated(), cuda.memory_reserved()
    a = cuda.device_array(1000, np.float32)                    # 4000 bytes -> the 4096-byte class
    assert cuda.memory_allocated() - base_alloc == 4096
    assert cuda.memory_reserved() - base_reserved == 4096
    hits = cuda.memory_stats()["cache_hits"]
    del a
    gc.collect()
    assert cuda.memory_allocated() == base_alloc                 # back in the cache, still reserved
    assert cuda.memory_reserved() - base_reserved == 4096
    b = cuda.device_array(900, np.float32)                       # 3600 bytes: the same class, reused
    assert cuda.memory_stats()["cache_hits"] == hits + 1 and cuda.memory_reserved() - base_reserved == 4096
    b.copy_to_device(np.arange(900, dtype=np.float32))
    assert np.array_equal(b.copy_to_host(), np.arange(900, dtype=np.float32))
    del b
    gc.collect()
    cuda.empty_cache()
    assert cuda.memory_reserved() == base_reserved               # the cached block went back to the driver
    assert "memory pool of cuda:0" in cuda.memory_summary()


def test_detect_lists_the_devices_as_numba_does(capsys):
    assert cuda.detect() is True
    out = capsys.readouterr().out
    assert f"Found {cuda.device_count()} CUDA devices" in out and "[SUPPORTED]" in out
    assert f"{cuda.device_count()}/{cuda.device_count()} devices are supported" in out


def test_gpus_list_devices_and_managed_arrays_as_numba_has_them():
    assert len(cuda.gpus) == cuda.device_count() == len(cuda.list_devices())
    assert cuda.gpus[0].name == cuda.list_devices()[0].name == cuda.get_current_device().name
    with cuda.gpus[-1] as device:
        assert cuda.get_current_device() is device
    assert cuda.current_device() == 0

    @cuda.jit
    def bump(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] += cuda.selp(i % 2 == 0, np.float32(1), np.float32(2))
    managed = cuda.managed_array(6, dtype=np.float32)
    managed[:] = 1
    bump[1, 8](managed)
    cuda.synchronize()
    assert managed.tolist() == [2, 3, 2, 3, 2, 3]


@pytest.mark.parametrize("make", [cuda.pinned_array, cuda.mapped_array, cuda.managed_array])
def test_a_pinned_array_of_a_negative_or_overflowing_shape_is_refused(make):
    """np.prod's int64 wrapped (2^32, 2^32) to 0 bytes and a negative size was taken for "the rest": numpy's error
    for a negative size, the host pool's out-of-memory error for one that does not fit."""
    with pytest.raises(ValueError, match="negative dimensions"):
        make((4, -1), np.float32)
    with pytest.raises(cuda.OutOfMemoryError):
        make((1 << 32, 1 << 32), np.float32)
    assert make((2, 3), np.float32).shape == (2, 3)


def test_a_memset_of_many_megabytes_uploads_a_bounded_buffer_a_piece_at_a_time():
    import tracemalloc
    count = 160 << 20                                   # two and a half of the 64 MiB pieces
    err, p = cuda.cudaMalloc(count)
    assert err == cuda.cudaSuccess
    try:
        tracemalloc.start()
        try:
            assert cuda.cudaMemset(p, 0xA5, count) == (cuda.cudaSuccess,)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 80 << 20, f"{peak} bytes of host memory"        # one piece, not the whole
        for at in (0, (64 << 20) - 2, count - 8):
            out = np.zeros(8, np.uint8)
            assert cuda.cudaMemcpy(out, p + at, 8, cuda.cudaMemcpyDeviceToHost) == (cuda.cudaSuccess,)
            assert (out == 0xA5).all()
    finally:
        cuda.cudaFree(p)


def test_a_view_of_memory_after_cuda_free_reaches_what_takes_its_addresses_and_faults_while_none_does():
    """What the docs promise, as CUDA does it: cudaFree gives the addresses back at once and the next allocation
    that fits takes them first, so a stale view then reaches that new memory with no fault; while no allocation
    holds them they are unmapped, and a kernel using the stale view faults."""
    a = cuda.to_device(np.zeros(N, np.float32))
    axpb[1, N](a, 1.0, 1.0)                           # loaded before: its code takes no freed addresses
    cuda.current_context().pool.empty_cache()         # no cached block answers the next allocations
    err, p = cuda.cudaMalloc(4 * N)
    stale = p.as_array(np.float32, N)
    assert cuda.cudaFree(p) == (cuda.cudaSuccess,)
    err, q = cuda.cudaMalloc(4 * N)
    assert err == cuda.cudaSuccess and int(q) == int(p)
    cuda.cudaMemset(q, 0, 4 * N)
    axpb[1, N](stale, 1.0, 2.0)
    cuda.synchronize()
    assert (q.as_array(np.float32, N).copy_to_host() == 2.0).all()
    assert cuda.cudaFree(q) == (cuda.cudaSuccess,)
    with pytest.raises(cuda.KernelFault, match="not mapped"):
        axpb[1, N](stale, 1.0, 1.0)
        cuda.synchronize()


@cuda.jit
def store_at(a, i, v):
    if cuda.grid(1) == 0:
        a[i] = v


def test_a_store_past_an_array_never_reaches_the_runtime_s_memory():
    """The context's kernel arguments and the runtime's signals, rings and staging buffer lie gigabytes from any
    array (the driver's internal window), farther than an int32 index reaches: a store a few pages or 400 KB past an
    array faults, or lands in another of the process's arrays, as on CUDA, and synchronize returns. Such stores once
    landed in the staging buffer, or zeroed a signal's mailbox address and synchronize slept forever."""
    a = cuda.to_device(np.zeros(16, np.int64))
    context = cuda.current_context()
    context.copy_to_device(a.ptr, np.zeros(16, np.int64))            # the copy queue and its staging buffer
    store_at[1, 1](a, 0, 1)
    cuda.synchronize()
    copy_queue, staging = context.rt._copy[context.agent.gpu_id]
    signal = context.rt.create_signal(1)
    owned = [context.kernargs, signal.pool.buffer, staging]
    owned += [buffer for queue in (context.default_state.queue, copy_queue) for buffer in (queue.ring, queue.indices)]
    signal.destroy()
    reach = 2**31 * a.dtype.itemsize
    assert all(abs(buffer.va - a.ptr) > reach for buffer in owned)
    for distance in (3 * 4096, 400_000):
        try:
            store_at[1, 1](a, distance // 8, 0)
            cuda.synchronize()
        except cuda.KernelFault as e:
            assert "not mapped" in str(e)
    assert (a.copy_to_host() == [1] + [0] * 15).all()


def test_a_kernel_whose_local_memory_the_device_cannot_hold_is_refused_with_out_of_memory(monkeypatch):
    """CUDA sets local memory aside for every thread the device holds at once when it loads a kernel, and a launch
    whose share does not fit fails with cudaErrorMemoryAllocation: here 256 KiB x 2048 threads x 132 SMs (71 GB),
    on a device with nothing free (but for what the pool keeps cached, which it could give back)."""
    @cuda.jit
    def scratch(out, n):
        buf = cuda.local.array(65536, np.int32)
        i = cuda.grid(1)
        for j in range(n):
            buf[(i + j) % 65536] = j
        out[i] = buf[i % 65536]

    context = cuda.current_context()
    monkeypatch.setattr(context, "get_memory_info", lambda: (0, context.device.total_memory))
    out = cuda.to_device(np.full(64, -1, np.int32))
    with pytest.raises(cuda.OutOfMemoryError, match="262144 bytes of local memory per thread"):
        scratch[1, 64](out, 1)
    assert (out.copy_to_host() == -1).all()
    monkeypatch.undo()
    scratch[1, 64](out, 1)
    assert (out.copy_to_host() == 0).all()


def test_a_kernel_asking_more_local_memory_than_a_thread_may_have_is_out_of_resources():
    """Past the device's 512 KiB of local memory per thread the loader refuses the kernel: the launch fails with
    cudaErrorLaunchOutOfResources ("too many resources requested for launch"), not a runtime error of Layer 2."""
    @cuda.jit
    def huge(out):
        buf = cuda.local.array(200000, np.float32)         # 800,000 bytes a thread
        i = cuda.grid(1)
        buf[i] = i
        out[i] = buf[(i * 7) % 200000]

    out = cuda.to_device(np.full(32, -1, np.float32))
    with pytest.raises(cuda.LaunchOutOfResources, match="too many resources requested for launch of kernel 'huge'"
                                                          ".*800000 bytes of local memory per thread exceed"):
        huge[1, 32](out)
    assert cuda.cudaLaunchKernel(huge, 1, 32, (out,)) == (cuda.cudaErrorLaunchOutOfResources,)
    assert (out.copy_to_host() == -1).all()
