"""Layer 2: packet layouts, the queue protocol, signals, code objects, faults and isolation."""

import shutil
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

from lapis import abi, driver, isa, runtime
from lapis.runtime import CodeObject, CodeObjectError, Condition, Executable, KernelCode, QueueError

FILL = """
    S2R R0, SR_TID.X ;
    S2R R1, SR_CTAID.X ;
    IMAD R0, R1, c[0x0][0x0], R0 ;
    LDC.64 R2, c[0x0][0x160] ;
    IMAD.WIDE R2, R0, 0x4, R2 ;
    MOV R4, c[0x0][0x168] ;
    STG.E [R2.64], R4 ;
    EXIT ;
"""


def code_object(name: str, source: str, kernarg_size: int = 16) -> bytes:
    code = isa.encode_program(isa.assemble(source))
    return CodeObject([KernelCode(name, code, abi.KernelDescriptor(kernarg_size=kernarg_size,
                                                                   compute_pgm_rsrc1=8))]).to_bytes()


@pytest.fixture
def rt():
    r = runtime.Runtime()     # a process of its own
    yield r
    r.shutdown()


def load(rt, agent, name="fill", source=FILL):
    exe = Executable(rt)
    exe.load_code_object(agent, code_object(name, source))
    exe.freeze()
    return exe.get_symbol(name)


def dispatch(rt, queue, symbol, args: bytes, threads: int, block: int = 64, signal=None):
    karg = rt.kernarg_pool(queue.agent).allocate(64)
    karg.host[:len(args)] = np.frombuffer(args, np.uint8)
    signal = signal or rt.create_signal(1)
    queue.submit(abi.KernelDispatchPacket(
        header=abi.make_header(abi.PACKET_TYPE_KERNEL_DISPATCH), setup=1, workgroup_size_x=block,
        grid_size_x=threads, kernel_object=symbol.kernel_object, kernarg_address=karg.va,
        completion_signal=signal.handle))
    return signal


def test_dispatch_packet_fields_sit_at_the_hsa_offsets():
    p = abi.KernelDispatchPacket(header=0x1234, setup=3, workgroup_size_x=5, workgroup_size_y=6, workgroup_size_z=7,
                                 grid_size_x=8, grid_size_y=9, grid_size_z=10, private_segment_size=11,
                                 group_segment_size=12, kernel_object=13, kernarg_address=14, completion_signal=15)
    raw = p.pack()
    assert len(raw) == 64
    assert struct.unpack_from("<HHHHH", raw, 0) == (0x1234, 3, 5, 6, 7)
    assert struct.unpack_from("<IIIII", raw, 12) == (8, 9, 10, 11, 12)
    assert struct.unpack_from("<QQ", raw, 32) == (13, 14) and struct.unpack_from("<Q", raw, 56) == (15,)
    b = abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND), dep_signal0=21, dep_signal4=25,
                          completion_signal=26).pack()
    assert struct.unpack_from("<5Q", b, 8) == (21, 0, 0, 0, 25) and struct.unpack_from("<Q", b, 56) == (26,)
    h = abi.make_header(abi.PACKET_TYPE_KERNEL_DISPATCH, barrier=True, acquire=1, release=2)
    assert h == 2 | 1 << 8 | 1 << 9 | 2 << 11
    assert abi.header_fields(h) == {"type": 2, "barrier": True, "acquire_fence_scope": 1, "release_fence_scope": 2}
    assert abi.KernelDescriptor(kernarg_size=40).pack()[8:12] == struct.pack("<I", 40)


def test_doorbell_drives_execution_and_the_ring_protocol(rt, monkeypatch):
    gpu = rt.gpu_agents[0]
    sym = load(rt, gpu)
    out = rt.device_pool(gpu).allocate(256 * 4)
    queue = rt.create_queue(gpu, packets=4)
    seen = []
    real_write = queue.doorbell.write

    def spy(value):     # what the ring holds at the moment the doorbell is written
        slot = value & (queue.size - 1)
        seen.append((value, bytes(queue.ring.host[slot * 64:slot * 64 + 64]), queue.read_index))
        real_write(value)
    monkeypatch.setattr(queue.doorbell, "write", spy)
    for i in range(6):    # wraps around the 4-slot ring
        sig = dispatch(rt, queue, sym, struct.pack("<Qf", out.va, float(i)), 256)
        assert sig.wait(Condition.EQ, 0, timeout_s=5) == 0
    assert [v for v, _, _ in seen] == list(range(6))
    value, raw, read_before = seen[5]
    assert raw[0] == abi.PACKET_TYPE_KERNEL_DISPATCH and read_before == 5     # published, not yet consumed
    assert queue.read_index == queue.write_index == 6
    assert queue.ring.host[(5 & 3) * 64] == abi.PACKET_TYPE_INVALID            # consumed: header reset
    got = np.frombuffer(rt.copy_to_host(gpu, out.va, 1024), np.float32)
    assert np.all(got == 5.0)


def test_signals_wait_on_conditions_and_time_out(rt):
    s = rt.create_signal(5)
    assert s.wait(Condition.GTE, 5) == 5 and s.wait(Condition.NE, 0) == 5
    assert s.subtract(2) == 5 and s.load() == 3
    assert s.cas(3, 10) == 3 and s.exchange(1) == 10 and s.load() == 1
    assert s.wait(Condition.EQ, 0, timeout_s=0.05) == 1                        # timed out, value unchanged
    assert s.wait(Condition.LT, 2) == 1
    s.destroy()
    with pytest.raises(runtime.SignalDestroyed):
        s.load()


def test_barrier_and_packet_waits_for_its_dependency(rt):
    gpu = rt.gpu_agents[0]
    queue = rt.create_queue(gpu, packets=8)
    dep, done = rt.create_signal(1), rt.create_signal(1)
    queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND), dep_signal0=dep.handle,
                                   completion_signal=done.handle))
    assert done.load() == 1 and queue.read_index == 0                           # blocked on dep
    dep.store(0)
    queue.doorbell.write(queue.write_index - 1)                                 # the processor re-checks
    assert done.wait(Condition.EQ, 0, timeout_s=5) == 0 and queue.read_index == 1


def test_queue_full_is_reported(rt):
    gpu = rt.gpu_agents[0]
    queue = rt.create_queue(gpu, packets=2)
    dep = rt.create_signal(1)
    for _ in range(2):
        queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND), dep_signal0=dep.handle))
    with pytest.raises(runtime.QueueFull, match="is full"):
        queue.reserve(timeout_s=0.05)


def test_malformed_packet_stops_only_its_queue(rt):
    gpu = rt.gpu_agents[0]
    sym = load(rt, gpu)
    bad_queue, good_queue = rt.create_queue(gpu), rt.create_queue(gpu)
    sig = rt.create_signal(1)
    bad_queue.submit(abi.KernelDispatchPacket(header=abi.make_header(abi.PACKET_TYPE_KERNEL_DISPATCH), setup=0,
                                              kernel_object=sym.kernel_object, completion_signal=sig.handle))
    assert sig.wait(Condition.EQ, 0, timeout_s=5) == -1          # the failed packet's signal
    state, error = bad_queue.status()
    assert state == "error" and "dimensions" in error["reason"]
    with pytest.raises(QueueError, match="error state"):
        bad_queue.check()
    out = rt.device_pool(gpu).allocate(64 * 4)
    ok = dispatch(rt, good_queue, sym, struct.pack("<Qf", out.va, 2.0), 64)
    assert ok.wait(Condition.EQ, 0, timeout_s=5) == 0


def test_fault_in_one_process_leaves_another_running(rt):
    other = runtime.Runtime()
    try:
        gpu_a, gpu_b = rt.gpu_agents[0], other.gpu_agents[0]
        rt.device_pool(gpu_a).allocate(64 << 20)           # puts `secret` above anything process B maps
        secret = rt.device_pool(gpu_a).allocate(64 * 4)
        rt.copy_to_device(gpu_a, secret.va, np.full(64, 42.0, np.float32))
        # Process B writes through A's address: not mapped in B's page tables, so B faults.
        sym_b = load(other, gpu_b)
        qb = other.create_queue(gpu_b)
        fault = dispatch(other, qb, sym_b, struct.pack("<Qf", secret.va, -1.0), 64)
        assert fault.wait(Condition.EQ, 0, timeout_s=5) < 0                      # failure: negative
        state, error = qb.status()
        assert state == "error" and error["address"] == secret.va and "not mapped" in error["fault"]
        assert error["instruction"].startswith("STG.E [R2.64], R4") and error["pc"] == 0x60
        assert np.all(np.frombuffer(rt.copy_to_host(gpu_a, secret.va, 256), np.float32) == 42.0)
        # A keeps working, and so does B on a new queue.
        sym_a = load(rt, gpu_a)
        done = dispatch(rt, rt.create_queue(gpu_a), sym_a, struct.pack("<Qf", secret.va, 7.0), 64)
        assert done.wait(Condition.EQ, 0, timeout_s=5) == 0
        assert np.all(np.frombuffer(rt.copy_to_host(gpu_a, secret.va, 256), np.float32) == 7.0)
        mine = other.device_pool(gpu_b).allocate(64 * 4)
        again = dispatch(other, other.create_queue(gpu_b), sym_b, struct.pack("<Qf", mine.va, 3.0), 64)
        assert again.wait(Condition.EQ, 0, timeout_s=5) == 0
    finally:
        other.shutdown()


def test_a_store_past_a_buffer_faults_instead_of_landing_in_the_runtime_s_memory(rt):
    """Signals, rings, kernel arguments, staging and code lie in the driver's internal window, far above the user's
    buffers: a store a few pages, 128 KiB, 400 KB or 1.5 MiB past a buffer is unmapped and faults its queue. These
    landed in a copy ring, the staging buffer and a signal's mailbox address (after which the host slept forever)."""
    gpu = rt.gpu_agents[0]
    out = rt.device_pool(gpu).allocate(4096)
    rt.copy_to_device(gpu, out.va, bytes(4096))                 # the copy queue and its staging buffer
    fill = load(rt, gpu)
    for distance in (3 * 4096, 128 << 10, 400_000, 1536 << 10):
        queue = rt.create_queue(gpu)
        done = dispatch(rt, queue, fill, struct.pack("<Qf", out.va + distance, 0.0), 1, 1)
        with pytest.raises(QueueError, match="not mapped"):
            queue.wait(done, timeout_s=10)
        assert queue.status()[1]["address"] == out.va + distance
        queue.destroy()


def test_a_wait_returns_when_its_signal_completes_without_an_interrupt(rt):
    """The mailbox address a completion posts its interrupt through is memory a kernel can write: zeroed, the signal
    completes with no interrupt. The waiter reads the value again after a bounded sleep instead of sleeping on."""
    gpu = rt.gpu_agents[0]
    out = rt.device_pool(gpu).allocate(64 * 4)
    queue = rt.create_queue(gpu)
    gate, done = rt.create_signal(1), rt.create_signal(1)
    slot = done.handle - done.pool.buffer.va
    struct.pack_into("<Q", done.pool.buffer.host, slot + abi.SIGNAL_MAILBOX_OFFSET, 0)
    queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND), dep_signal0=gate.handle))
    dispatch(rt, queue, load(rt, gpu), struct.pack("<Qf", out.va, 1.0), 64, signal=done)
    waiter = threading.Thread(target=done.wait, args=(Condition.EQ, 0), daemon=True)
    waiter.start()
    time.sleep(0.3)                                             # asleep on its event by now
    gate.store(0)
    queue.doorbell.write(queue.write_index - 1)                 # the processor re-checks the barrier
    waiter.join(timeout=10)
    assert not waiter.is_alive() and done.load() == 0


def test_async_copy_through_the_copy_engine(rt):
    gpu = rt.gpu_agents[0]
    src, dst = rt.device_pool(gpu).allocate(1 << 20), rt.device_pool(gpu).allocate(1 << 20)
    data = np.random.default_rng(1).integers(0, 255, 1 << 20, dtype=np.uint8)
    rt.copy_to_device(gpu, src.va, data)
    done = rt.create_signal(1)
    rt.async_copy(gpu, dst.va, src.va, 1 << 20, done)
    assert done.wait(Condition.EQ, 0, timeout_s=5) == 0
    assert np.array_equal(rt.copy_to_host(gpu, dst.va, 1 << 20), data)


def test_code_object_is_an_elf_readelf_can_read(tmp_path):
    blob = code_object("fill", FILL)
    co = CodeObject.from_bytes(blob)
    assert co.kernels[0].name == "fill" and isa.assemble(FILL) == isa.decode_program(co.kernels[0].code)
    assert co.kernels[0].descriptor.kernarg_size == 16 and co.kernels[0].descriptor.registers == 8
    with pytest.raises(CodeObjectError, match="not an ELF"):
        CodeObject.from_bytes(b"hello")
    with pytest.raises(CodeObjectError, match="malformed"):
        CodeObject.from_bytes(blob[:200])
    if shutil.which("readelf"):
        path = tmp_path / "fill.co"
        path.write_bytes(blob)
        text = subprocess.run(["readelf", "-a", "-W", str(path)], capture_output=True, text=True, check=True).stdout
        assert ".text" in text and ".note.lapis" in text and "fill.kd" in text and "FUNC" in text


def test_executable_symbols(rt):
    exe = Executable(rt)
    exe.load_code_object(rt.gpu_agents[0], code_object("fill", FILL))
    with pytest.raises(CodeObjectError, match="freeze"):
        exe.get_symbol("fill")
    exe.freeze()
    sym = exe.get_symbol("fill")
    assert sym.kernarg_size == 16 and sym.kernel_object % 64 == 0
    with pytest.raises(CodeObjectError, match="no kernel named 'nope'"):
        exe.get_symbol("nope")


def test_the_runtime_reports_its_errors_as_hsa_errors(rt):
    buffer = rt.host_pool(rt.gpu_agents[0]).allocate(64)
    buffer.free()
    with pytest.raises(runtime.HsaError, match="already freed"):
        buffer.free()
    signal = rt.create_signal(1)
    signal.destroy()
    with pytest.raises(runtime.HsaError, match="was destroyed"):
        signal.load()
    for error in (runtime.OutOfMemory, QueueError, runtime.QueueFull, CodeObjectError):
        assert issubclass(error, runtime.HsaError)
    assert issubclass(runtime.HsaError, RuntimeError)          # the builtin: existing except clauses still catch it


def test_constant_bank_words_past_a_kernels_arguments_read_zero_after_a_launch_with_more(rt):
    """Each dispatch's constant bank holds its own arguments and zero past them, never the last one's."""
    gpu = rt.gpu_agents[0]
    exe = Executable(rt)
    exe.load_code_object(gpu, code_object("fill", FILL))
    exe.load_code_object(gpu, code_object("peek", FILL, kernarg_size=8))       # the same code, one argument
    exe.freeze()
    queue, out = rt.create_queue(gpu), rt.device_pool(gpu).allocate(512)
    dispatch(rt, queue, exe.get_symbol("fill"), struct.pack("<Qf", out.va, 5.0), 64)
    done = dispatch(rt, queue, exe.get_symbol("peek"), struct.pack("<Qf", out.va + 256, 7.0), 64)
    assert queue.wait(done, timeout_s=5) == 0
    got = np.frombuffer(rt.copy_to_host(gpu, out.va, 512), np.float32)
    assert np.array_equal(got, np.repeat([5.0, 0.0], 64).astype(np.float32))


def raw_kernel(rt, agent, source: str, registers: int = 8, local_bytes: int = 0, code_size: int | None = None) -> int:
    """A kernel written straight into executable device memory, where no loader checked it: its kernel_object.
    `code_size`: what its descriptor claims, if not the code's length."""
    code = isa.encode_program(isa.assemble(source))
    kd = abi.KernelDescriptor(private_segment_fixed_size=local_bytes, compute_pgm_rsrc1=registers,
                              kernel_code_entry_byte_offset=abi.KERNEL_DESCRIPTOR_BYTES,
                              code_size=len(code) if code_size is None else code_size)
    buffer = rt.device_pool(agent).allocate(abi.KERNEL_DESCRIPTOR_BYTES + len(code), executable=True)
    rt.copy_to_device(agent, buffer.va, kd.pack() + code)
    return buffer.va


def dispatch_raw(rt, queue, kernel_object: int, local_bytes: int = 0):
    """A 32-thread dispatch of `kernel_object`; returns its completion signal."""
    done = rt.create_signal(1)
    queue.submit(abi.KernelDispatchPacket(
        header=abi.make_header(abi.PACKET_TYPE_KERNEL_DISPATCH), setup=1, workgroup_size_x=32, grid_size_x=32,
        private_segment_size=local_bytes, kernel_object=kernel_object, completion_signal=done.handle))
    return done


def assert_the_device_still_serves(rt, bystander):
    """No reset: another process's queue stays active, and a new queue of this process runs a kernel."""
    assert bystander.status() == ("active", None)
    gpu = rt.gpu_agents[0]
    out = rt.device_pool(gpu).allocate(64 * 4)
    done = dispatch(rt, rt.create_queue(gpu), load(rt, gpu), struct.pack("<Qf", out.va, 3.0), 64)
    assert done.wait(Condition.EQ, 0, timeout_s=5) == 0
    assert np.all(np.frombuffer(rt.copy_to_host(gpu, out.va, 256), np.float32) == 3.0)


@pytest.fixture
def bystander():
    """A queue of another process on the same GPU."""
    other = runtime.Runtime()
    yield other.create_queue(other.gpu_agents[0])
    other.shutdown()


@pytest.mark.parametrize("source, registers, fault", [
    ("IADD.64 R6, R6, R6 ;\nEXIT ;", 7, "uses R7 but the kernel declares 7 registers"),
    ("BRA -0x5 ;\nEXIT ;", 8, "branch target -0x5 is not at an instruction boundary"),
    ("BRA 0x18 ;\nNOP ;\nEXIT ;", 8, "branch target 0x18 is not at an instruction boundary"),
    ("@P0 BRA -0x30 ;\nEXIT ;", 8, "branch target -0x30 is outside the program"),     # refused even if not taken
])
def test_an_invalid_program_in_a_raw_packet_faults_only_its_queue(rt, bystander, source, registers, fault):
    gpu = rt.gpu_agents[0]
    queue = rt.create_queue(gpu)
    done = dispatch_raw(rt, queue, raw_kernel(rt, gpu, source, registers))
    assert done.wait(Condition.LT, 1, timeout_s=5) == -1
    state, error = queue.status()
    assert state == "error" and "is not a valid program" in error["reason"] and error["fault"] == fault
    assert error["pc"] == 0 and error["instruction"] == source.split("\n")[0]
    assert_the_device_still_serves(rt, bystander)


def test_code_rewritten_in_place_runs_as_it_now_is(rt):
    """The command processor keeps the program a kernel object last gave, only while the code it fetches is the
    same: code rewritten at the same address (a JIT reusing its buffer) runs, or is refused, as it now is."""
    gpu = rt.gpu_agents[0]
    queue = rt.create_queue(gpu)
    kernel = raw_kernel(rt, gpu, "MOV R1, 0x1 ;\nEXIT ;")
    assert dispatch_raw(rt, queue, kernel).wait(Condition.LT, 1, timeout_s=5) == 0
    rt.copy_to_device(gpu, kernel + abi.KERNEL_DESCRIPTOR_BYTES,
                      isa.encode_program(isa.assemble("MOV R9, 0x1 ;\nEXIT ;")))
    assert dispatch_raw(rt, queue, kernel).wait(Condition.LT, 1, timeout_s=5) == -1
    state, error = queue.status()
    assert state == "error" and error["fault"] == "uses R9 but the kernel declares 8 registers"


@pytest.mark.parametrize("in_descriptor", [True, False])
def test_a_dispatch_asking_more_local_memory_than_a_thread_may_have_is_refused(rt, bystander, in_descriptor):
    gpu = rt.gpu_agents[0]
    too_much = gpu.properties.max_local_per_thread + 4
    queue = rt.create_queue(gpu)
    kernel = raw_kernel(rt, gpu, "EXIT ;", local_bytes=too_much if in_descriptor else 0)
    done = dispatch_raw(rt, queue, kernel, local_bytes=0 if in_descriptor else too_much)
    assert done.wait(Condition.LT, 1, timeout_s=5) == -1
    state, error = queue.status()
    assert state == "error" and f"private segment of {too_much} bytes per work-item exceeds" in error["reason"]
    assert_the_device_still_serves(rt, bystander)


def test_a_descriptor_claiming_gigabytes_of_code_is_refused_before_it_is_read(rt, bystander):
    """The front end decodes a kernel's whole program at once, so a descriptor's code_size is refused past
    abi.MAX_CODE_BYTES before any code is read (behind a 4 GiB claim, mapped memory was read into the host)."""
    gpu = rt.gpu_agents[0]
    queue = rt.create_queue(gpu)
    claimed = 2**32 - isa.INSTRUCTION_BYTES                        # the largest a descriptor can hold
    done = dispatch_raw(rt, queue, raw_kernel(rt, gpu, "EXIT ;", code_size=claimed))
    assert done.wait(Condition.LT, 1, timeout_s=5) == -1
    state, error = queue.status()
    assert state == "error" and f"code of {claimed} bytes exceeds the {abi.MAX_CODE_BYTES}" in error["reason"]
    assert_the_device_still_serves(rt, bystander)


@pytest.mark.parametrize("kind", ["compute", "copy"])
def test_a_copy_packet_runs_only_on_a_copy_queue(rt, bystander, kind):
    """A linear copy is the copy engine's (SDMA) packet, as a kernel dispatch is the compute queue's: on a
    compute queue it is refused, as a dispatch is on a copy queue."""
    gpu = rt.gpu_agents[0]
    pool = rt.host_pool(gpu)
    src, dst = pool.allocate(64), pool.allocate(64)
    src.host[:64] = np.arange(64, dtype=np.uint8)
    dst.host[:64] = 0
    queue, done = rt.create_queue(gpu, 64, kind), rt.create_signal(1)
    queue.submit(abi.CopyPacket(header=abi.make_header(abi.PACKET_TYPE_VENDOR_SPECIFIC), src=src.va, dst=dst.va,
                                size=64, completion_signal=done.handle))
    if kind == "copy":
        assert done.wait(Condition.LT, 1, timeout_s=5) == 0
        assert dst.host[:64].tolist() == list(range(64))
    else:
        assert done.wait(Condition.LT, 1, timeout_s=5) == -1
        state, error = queue.status()
        assert state == "error" and "VENDOR_SPECIFIC is not supported on a compute queue" in error["reason"]
        assert not dst.host[:64].any()
    assert_the_device_still_serves(rt, bystander)


def test_a_ring_the_device_cannot_write_is_its_queue_s_error(rt, bystander):
    """The packet processor resets each header it consumed: in a read-only ring it cannot, and the queue stops."""
    gpu, kfd = rt.gpu_agents[0], rt.kfd
    ring = kfd.ioctl(driver.Ioctl.ALLOC_MEMORY_OF_GPU, driver.AllocMemoryArgs(
        gpu.gpu_id, 64 * abi.PACKET_BYTES, driver.MemFlags.GTT | driver.MemFlags.COHERENT))    # not WRITABLE
    kfd.ioctl(driver.Ioctl.MAP_MEMORY_TO_GPU, driver.MapMemoryArgs(ring.handle))
    slots = kfd.mmap(ring.handle).reshape(64, abi.PACKET_BYTES)          # the CPU's view writes
    slots[:, :2] = np.frombuffer(struct.pack("<H", abi.make_header(abi.PACKET_TYPE_INVALID)), np.uint8)
    done = rt.create_signal(1)
    barrier = abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND), completion_signal=done.handle)
    slots[0] = np.frombuffer(barrier.pack(), np.uint8)
    read_index = rt.host_pool(gpu).allocate(8)
    queue = kfd.ioctl(driver.Ioctl.CREATE_QUEUE, driver.CreateQueueArgs(
        gpu.gpu_id, "compute", ring.va_addr, 64 * abi.PACKET_BYTES, read_index.va, None))
    kfd.mmap_doorbell(queue.queue_id).write(0)
    assert done.wait(Condition.EQ, 0, timeout_s=5) == 0                  # the packet itself ran
    status = kfd.ioctl(driver.Ioctl.QUEUE_STATUS, driver.QueueArgs(queue.queue_id))
    assert status.state == "error" and "cannot reset the packet header" in status.error["reason"]
    assert "read-only" in status.error["reason"]
    assert_the_device_still_serves(rt, bystander)


@pytest.mark.parametrize("source, descriptor, refusal", [
    ("IADD.64 R6, R6, R6 ;\nEXIT ;", {"compute_pgm_rsrc1": 7},
     r"kernel 'bad' is not a valid program: uses R7 but the kernel declares 7 registers "
     r"\(instruction /\*0000\*/ IADD.64 R6, R6, R6 ;\)"),
    ("BRA -0x5 ;\nEXIT ;", {}, "branch target -0x5 is not at an instruction boundary"),
    ("@P0 BRA 0x20 ;\nEXIT ;", {}, "branch target 0x20 is outside the program"),
    ("EXIT ;", {"compute_pgm_rsrc1": 0}, "declares 0 registers per thread"),
    ("EXIT ;", {"private_segment_fixed_size": 1 << 31}, "2147483648 bytes of local memory per thread exceed"),
    ("EXIT ;", {"group_segment_fixed_size": 1 << 20}, "1048576 bytes of shared memory exceed"),
    ("EXIT ;", {"kernarg_size": abi.MAX_KERNARG_BYTES + 4}, "kernel arguments of 4100 bytes exceed"),
])
def test_the_loader_refuses_a_kernel_the_device_could_not_run(rt, source, descriptor, refusal):
    gpu = rt.gpu_agents[0]
    kd = abi.KernelDescriptor(**{"compute_pgm_rsrc1": 8, **descriptor})
    blob = CodeObject([KernelCode("bad", isa.encode_program(isa.assemble(source)), kd)]).to_bytes()
    free = rt.memory_info(gpu)[0]
    with pytest.raises(CodeObjectError, match=refusal) as e:
        Executable(rt).load_code_object(gpu, blob)
    assert e.value.status == "HSA_STATUS_ERROR_INVALID_CODE_OBJECT"
    assert rt.memory_info(gpu)[0] == free                 # refused before anything was allocated
