"""Bad input to a launch or an allocation is a clear error that changes nothing: no packet slot is reserved that
will not be written (the packet processor would stop at it, and every later wait on the queue would sleep), no
work is left pending that will never complete, and the next launch runs."""

import time

import numpy as np
import pytest

from lapis import abi, cuda, driver, runtime
from lapis.cuda import LaunchError
from test_runtime import dispatch, load


@cuda.jit
def mark(a):
    a[cuda.grid(1)] = 1


def still_runs():
    a = cuda.to_device(np.zeros(64, np.int32))
    mark[1, 64](a)
    cuda.synchronize()
    return a.copy_to_host().tolist() == [1] * 64


@pytest.mark.parametrize("config, what", [
    ((1, 64, 0, -8), "dynamic shared memory of -8 bytes"),
    ((2**31, 64), "the grid"),
    (((1, 70000), 64), "the grid"),
    (((1, 1, 1), (1, 1, 65)), "the block"),
    ((0, 64), "the grid"),
    ((2**23, 1024), "exceed the 2\\^32 - 1 threads"),
])
def test_an_impossible_launch_shape_is_refused_and_the_stream_goes_on(config, what):
    a = cuda.to_device(np.zeros(64, np.int32))
    with pytest.raises(LaunchError, match=what):
        mark[config](a)
    assert still_runs()


def test_a_launch_whose_packet_cannot_be_queued_leaves_nothing_pending(monkeypatch):
    """Whatever fails at the queue, the context forgets the work it was about to wait for."""
    a = cuda.to_device(np.zeros(64, np.int32))
    mark[1, 64](a)
    cuda.synchronize()
    context = cuda.current_context()
    slots, queue = len(context.free_slots), context.default_state.queue

    def refuse(packet, index=None):
        raise runtime.QueueError("refused")
    monkeypatch.setattr(queue, "submit", refuse)
    with pytest.raises(runtime.QueueError):
        mark[1, 64](a)
    monkeypatch.undo()
    assert not context.default_state.pending and len(context.free_slots) == slots
    assert still_runs()


def test_a_packet_that_cannot_be_packed_reserves_no_slot():
    rt = runtime.Runtime()
    try:
        gpu = rt.gpu_agents[0]
        queue = rt.create_queue(gpu, packets=4)
        before = queue.write_index
        bad = abi.KernelDispatchPacket(header=abi.make_header(abi.PACKET_TYPE_KERNEL_DISPATCH), group_segment_size=-1)
        with pytest.raises(Exception, match="out of range|format requires"):
            queue.submit(bad)
        assert queue.write_index == before
        symbol = load(rt, gpu)                          # the queue still runs the next packet
        out = rt.device_pool(gpu).allocate(64 * 4)
        signal = dispatch(rt, queue, symbol, np.array([out.va, 7], np.uint64).tobytes(), 64)
        assert signal.wait(runtime.Condition.LT, 1, 10.0) == 0
    finally:
        rt.shutdown()


@pytest.mark.parametrize("shape, error", [(-5, ValueError), ((3, -1), ValueError), ((2.5,), TypeError)])
def test_a_device_array_of_a_negative_or_fractional_size_is_refused(shape, error):
    with pytest.raises(error):
        cuda.device_array(shape, np.float32)


@cuda.jit
def write_far_past(a):
    a[cuda.grid(1) + 2**34] = 1            # 64 GiB past the array: unmapped


def test_a_fault_is_reported_to_its_own_stream_not_to_another_stream_s_launch():
    """Stream A's kernel faults; launches and queries on stream B go on (a thread working on B never sees A's
    error), and A's next call, or a synchronize that covers A, reports it."""
    from lapis.cuda import KernelFault
    a_stream, b_stream = cuda.stream(), cuda.stream()
    a = cuda.to_device(np.zeros(64, np.int32))
    b = cuda.to_device(np.zeros(64, np.int32))
    write_far_past[1, 32, a_stream](a)
    mark[1, 64, b_stream](b)
    b_stream.synchronize()                          # the device runs both queues: A's kernel faults meanwhile
    assert cuda.current_context().default_state.pending == [] and a_stream.state.pending[0].signal.load() < 0
    mark[1, 64, b_stream](b)                        # B's launches and queries do not see A's fault
    assert b_stream.query() in (True, False)
    b_stream.synchronize()
    assert b.copy_to_host(stream=b_stream).tolist() == [1] * 64
    with pytest.raises(KernelFault, match="write_far_past"):
        a_stream.synchronize()
    assert still_runs()


@cuda.jit
def spin_forever(a):
    i = 0
    while True:
        i += 1
        if i < 0:                      # never: keeps the loop from being dropped
            a[0] = i


@cuda.jit
def mark_in_bounds(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = 1


@pytest.mark.parametrize("kernel, config", [(spin_forever, (1, 32)), (mark_in_bounds, (2**31 - 1, 1))])
def test_a_kernel_past_the_time_limit_times_out_on_its_own_stream(monkeypatch, kernel, config):
    """An endless kernel, or one with two billion blocks, is stopped at the device's time limit (as a driver's timeout
    detection stops it): its stream reports cudaErrorLaunchTimeout's message, and another stream's kernels run."""
    from lapis.cuda import KernelFault
    for node in driver.system().nodes:
        monkeypatch.setattr(node.gpu, "watchdog_steps", 10**15)
        monkeypatch.setattr(node.gpu, "kernel_timeout_s", 0.5)
    slow, other = cuda.stream(), cuda.stream()
    a, b = cuda.to_device(np.zeros(64, np.int32)), cuda.to_device(np.zeros(64, np.int32))
    start = time.monotonic()
    kernel[(*config, slow)](a)
    mark[1, 64, other](b)
    other.synchronize()
    assert b.copy_to_host(stream=other).tolist() == [1] * 64
    with pytest.raises(KernelFault, match=f"kernel {kernel.__name__!r} faulted on .*: the launch timed out and was "
                                          "terminated: it ran longer than the device's 0.5 s limit for one kernel"):
        slow.synchronize()
    assert time.monotonic() - start < 5
    kernel[(*config, slow)](a)                                 # through the runtime API: cudaErrorLaunchTimeout
    assert cuda.cudaStreamSynchronize(slow) == (cuda.cudaErrorLaunchTimeout,)
    assert still_runs()
