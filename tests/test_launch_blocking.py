"""LAPIS_LAUNCH_BLOCKING=1: the command processor runs packets on the thread that rings the doorbell.

The same program runs in a fresh process in each mode: with launch blocking, the device's work
happens before the launch returns, on the program's own thread, under one stack from the program
down to the executor, and every result (and a fault's report) is what the default, asynchronous
mode gives.
"""

import json
import os
import re
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

import lapis
from conftest import launch_blocking
from lapis import abi, driver, runtime
from test_runtime import dispatch, load

PROGRAM = r'''
import json, threading, traceback
import numpy as np
import lapis
from lapis import cuda, driver

@cuda.jit
def axpb(x, a, b):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = a * x[i] + b

@cuda.jit
def scaled(x, a, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i]

@cuda.jit
def scatter(out, offset):
    i = cuda.grid(1)
    out[i + offset] = 1.0

# A spy on each GPU's SIMT core: the stack of every kernel's execution, innermost call last.
stacks = []
for node in driver.system().nodes:
    def spy(*args, _run=node.gpu.simt.run):
        stacks.append([(frame.filename.replace("\\", "/"), frame.name) for frame in traceback.extract_stack()])
        return _run(*args)
    node.gpu.simt.run = spy

def multiply(a, b):
    return lapis.matmul(a, b)

out = {}
main = threading.get_ident()
with lapis.trace() as t:
    x = np.arange(256, dtype=np.float32)
    d = cuda.to_device(x)                                   # a memcpy
    ran = len(stacks)
    axpb[2, 128](d, np.float32(2), np.float32(1))            # a kernel launch
    out["ran_by_launch"] = len(stacks) - ran
    out["kernel"] = d.copy_to_host().tolist()

    s1, s2 = cuda.stream(), cuda.stream()                   # two streams ordered by events
    d1, d2 = cuda.to_device(x), cuda.device_array(256, np.float32)
    start, mid, end = cuda.event(), cuda.event(), cuda.event()
    start.record(s1)
    axpb[2, 128, s1](d1, np.float32(-1), np.float32(3))
    mid.record(s1)
    mid.wait(s2)
    scaled[2, 128, s2](d1, np.float32(10), d2)
    end.record(s2)
    end.synchronize()
    out["streams"] = d2.copy_to_host().tolist()
    out["events_ordered"] = 0 < start.elapsed_time(mid) < start.elapsed_time(end)

    a = lapis.arange(64 * 48, dtype=lapis.float32, device="cuda").reshape(64, 48) / 100
    b = lapis.arange(48 * 32, dtype=lapis.float32, device="cuda").reshape(48, 32) / 100
    del stacks[:]
    out["matmul"] = multiply(a, b).cpu().numpy().tolist()
    out["matmul_stack"] = stacks[-1]

    bad = cuda.device_array(64, np.float32)
    scatter[1, 64](bad, 1 << 40)                              # far past anything mapped
    try:
        cuda.synchronize()
    except cuda.KernelFault as e:
        out["fault"] = str(e)
        out["fault_address"] = e.address - (bad.ptr + 4 * (1 << 40))
    scatter[1, 64](bad, 0)                                    # the stream runs again
    out["after_fault"] = bad.copy_to_host().tolist()
device_events = [e for e in t.events if e.layer == 0 and e.name in ("kernel", "copy")]
out["device_events"] = len(device_events)
out["device_events_on_caller"] = sum(e.thread == main for e in device_events)
print(json.dumps(out))
'''


def run_program(tmp_path, blocking: bool) -> dict:
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k != "LAPIS_LAUNCH_BLOCKING"}
    if blocking:
        env["LAPIS_LAUNCH_BLOCKING"] = "1"
    ran = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("launch_blocking")
    return {"blocking": run_program(tmp, True), "default": run_program(tmp, False)}


@pytest.mark.slow
def test_the_device_works_on_the_thread_that_rang_the_doorbell(runs):
    blocking, default = runs["blocking"], runs["default"]
    assert blocking["device_events"] >= 8
    assert blocking["device_events_on_caller"] == blocking["device_events"]
    assert blocking["ran_by_launch"] == 1
    assert default["ran_by_launch"] == 0                    # asynchronous: the kernel runs later


def test_one_stack_goes_from_the_program_down_to_the_executor(runs):
    def where(frame):
        path, name = frame
        for layer, part in [("hardware", "/lapis/hardware/"), ("driver", "/lapis/driver/"),
                            ("runtime", "/lapis/runtime/"), ("cuda", "/lapis/cuda/"), ("libs", "/lapis/libs/")]:
            if part in path:
                return layer
        if "/lapis/framework/" in path or re.search(r"/lapis/[^/]+\.py$", path):     # Layer 5, either layout
            return "framework"
        return "program" if name == "multiply" else None

    layers = [w for w in map(where, runs["blocking"]["matmul_stack"]) if w]
    assert list(dict.fromkeys(layers)) == ["program", "framework", "libs", "cuda", "runtime", "driver", "hardware"]
    names = [name for _, name in runs["blocking"]["matmul_stack"]]
    assert names.index("ring_doorbell") < names.index("_dispatch")
    assert "multiply" not in [name for _, name in runs["default"]["matmul_stack"]]


def test_results_are_those_of_the_default_mode(runs):
    blocking, default = runs["blocking"], runs["default"]
    x = np.arange(256, dtype=np.float32)
    assert blocking["kernel"] == default["kernel"] == (x * 2 + 1).tolist()
    assert blocking["streams"] == default["streams"] == ((3 - x) * 10).tolist()
    assert blocking["events_ordered"] and default["events_ordered"]
    a = np.arange(64 * 48, dtype=np.float32).reshape(64, 48) / 100
    b = np.arange(48 * 32, dtype=np.float32).reshape(48, 32) / 100
    np.testing.assert_allclose(blocking["matmul"], a @ b, rtol=1e-5)
    assert blocking["matmul"] == default["matmul"]


def test_a_fault_is_reported_to_its_stream_as_in_the_default_mode(runs):
    blocking, default = runs["blocking"], runs["default"]
    assert re.fullmatch(r"kernel 'scatter' faulted on .*: .* at address 0x[0-9a-f]+ at instruction /\*[0-9a-f]{4}\*/ "
                        r"STG.*", blocking["fault"])
    assert blocking["fault"] == default["fault"] and blocking["fault_address"] == 0
    assert blocking["after_fault"] == default["after_fault"] == [1.0] * 64


@pytest.fixture
def rt():
    """A runtime whose GPUs run packets on the thread that rings the doorbell, as the variable makes them."""
    with launch_blocking():
        r = runtime.Runtime()
        yield r
        r.shutdown()


def test_a_barrier_the_host_has_yet_to_open_is_not_waited_out_by_the_ringing_thread(rt):
    """The choice for an unmet barrier packet: the ringing thread cannot wait it out (it may be the
    thread that would open it), so the doorbell returns; the processor's thread polls it, and so
    does a thread that comes to wait, which runs what follows once it opens."""
    gpu = rt.gpu_agents[0]
    sym, queue = load(rt, gpu), rt.create_queue(gpu)
    out, gate = rt.device_pool(gpu).allocate(512), rt.create_signal(1)
    with lapis.trace() as t:
        first = dispatch(rt, queue, sym, struct.pack("<Qf", out.va, 1.0), 64)
        assert first.load() == 0                      # ran before the doorbell write returned
        queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND), dep_signal0=gate.handle))
        second = dispatch(rt, queue, sym, struct.pack("<Qf", out.va + 256, 2.0), 64)
        assert second.load() == 1                     # behind the closed gate: not run, not waited for
        gate.store(0)
        assert queue.wait(second, timeout_s=5) == 0
    assert [k.thread == threading.get_ident() for k in t.select(0, "kernel")][0]
    got = np.frombuffer(rt.copy_to_host(gpu, out.va, 512), np.float32)
    assert np.array_equal(got, np.repeat([1.0, 2.0], 64).astype(np.float32))


def test_an_interrupt_of_the_thread_running_a_packet_stops_only_its_queue(rt, monkeypatch):
    gpu = rt.gpu_agents[0]
    sym, queue = load(rt, gpu), rt.create_queue(gpu)
    out, done = rt.device_pool(gpu).allocate(256), rt.create_signal(1)

    def interrupted(*args):
        raise KeyboardInterrupt          # Ctrl-C while the kernel runs on the program's thread
    monkeypatch.setattr(driver.system().nodes[gpu.gpu_id].gpu.simt, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dispatch(rt, queue, sym, struct.pack("<Qf", out.va, 1.0), 64, signal=done)
    monkeypatch.undo()
    with pytest.raises(runtime.QueueError, match="interrupted"):
        queue.wait(done, timeout_s=5)        # failed, not left pending forever
    other = rt.create_queue(gpu)
    assert other.wait(dispatch(rt, other, sym, struct.pack("<Qf", out.va, 2.0), 64), timeout_s=5) == 0
