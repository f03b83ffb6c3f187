"""Fuzzing the stack with what a careless or hostile user could hand it (issue 17): mutated real code objects loaded
and launched, random AQL packet fields, and random framework inputs compared between cpu, cuda and PyTorch. Every
input must end in a result or in one of the layer's own errors: never a raw Python error (KeyError, struct.error,
IndexError...), never a hang, never a GPU reset.

Two more fuzzers live beside their layers: tests/test_isa.py sends random and mutated instruction words through
decode, disassemble and assemble, and tests/test_load_damaged.py sends crafted and truncated files to `lapis.load`.

The simulated GPU is slow, so each test tries a few dozen examples (the file takes about 15 s once its kernels are
compiled; the framework tests, which compile many, are marked slow); `LAPIS_FUZZ_SCALE=N` multiplies every test's
examples by N for a longer run (`make fuzz` runs N=20, a few minutes).
"""

import functools
import json
import math
import os
import struct
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import lapis
from lapis import abi, cuda, driver, runtime
from lapis.driver import sysfs
from lapis.runtime import CodeObject, CodeObjectError, Condition, Executable
from lapis.runtime.code_object import SEGMENT_OFFSET, LoadedImage

SCALE = int(os.environ.get("LAPIS_FUZZ_SCALE", "1"))


def fuzz_settings(examples: int):
    # One runtime (a module fixture) serves every example: its state between examples is what is under test.
    return settings(max_examples=examples * SCALE, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@cuda.jit
def fill(out, value):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = value * i


FILL_THREADS = 64


@functools.cache
def fill_code_object() -> bytes:
    """The compiler's code object for `fill(float32[:], float32)`, compiled by launching it once."""
    out = cuda.device_array(FILL_THREADS, np.float32)
    fill[2, 32](out, np.float32(2.0))
    cuda.synchronize()
    (compiled,) = fill.overloads.values()
    return compiled.code_object


@pytest.fixture(scope="module")
def rt():
    r = runtime.Runtime()
    yield r
    r.shutdown()


def resets(rt) -> int:
    return rt.kfd.ioctl(driver.Ioctl.GET_DEVICE_INFO, driver.GpuArgs(0)).resets


def fill_arguments(rt, gpu):
    """A kernel-argument buffer for `fill` writing its 64 floats to a fresh buffer, and that buffer."""
    out = rt.device_pool(gpu).allocate(FILL_THREADS * 4)
    kernargs = rt.kernarg_pool(gpu).allocate(64)
    # the array's data pointer, size and stride (24 bytes), then the float32 scalar
    kernargs.host[:32] = np.frombuffer(struct.pack("<QqqfI", out.va, FILL_THREADS, 4, 2.0, 0), np.uint8)
    return kernargs, out


def dispatch(rt, queue, kernel_object: int, kernargs) -> runtime.Signal:
    done = rt.create_signal(1)
    queue.submit(abi.KernelDispatchPacket(
        header=abi.make_header(abi.PACKET_TYPE_KERNEL_DISPATCH), setup=1, workgroup_size_x=32, grid_size_x=FILL_THREADS,
        kernel_object=kernel_object, kernarg_address=kernargs.va, completion_signal=done.handle))
    return done


def assert_the_gpu_was_not_reset_and_serves(rt, resets_before: int) -> None:
    """The fuzzed input stayed in its queue: no reset, and a fresh queue runs the real kernel."""
    assert resets(rt) == resets_before, "user input reset the GPU"
    gpu = rt.gpu_agents[0]
    exe = Executable(rt)
    exe.load_code_object(gpu, fill_code_object())
    exe.freeze()
    kernargs, out = fill_arguments(rt, gpu)
    queue = rt.create_queue(gpu)
    done = dispatch(rt, queue, exe.get_symbol("fill").kernel_object, kernargs)
    try:
        assert done.wait(Condition.LT, 1, timeout_s=30) == 0
    finally:
        queue.destroy()
        done.destroy()
    expected = np.arange(FILL_THREADS, dtype=np.float32) * 2
    assert np.array_equal(np.frombuffer(rt.copy_to_host(gpu, out.va, FILL_THREADS * 4), np.float32), expected)
    kernargs.free()
    out.free()
    exe.destroy()


# -- mutated code objects -------------------------------------------------------------------------------------------

# Values a descriptor field is set to: edges of the fields' widths and of the device's limits.
FIELD_VALUES = [0, 1, 4, 16, 255, 256, 4096, 1 << 16, 1 << 20, 1 << 31, 2**32 - 1]
METADATA_NAMES = [b'"kernels"', b'"name"', b'"descriptor_symbol"', b'"fill.kd"', b"fill.kd\0", b"fill\0"]
DESCRIPTOR_FIELDS = ["group_segment_fixed_size", "private_segment_fixed_size", "kernarg_size",
                     "kernel_code_entry_byte_offset", "code_size", "compute_pgm_rsrc1"]


@st.composite
def mutated_code_objects(draw) -> bytes:
    """The real code object with bits flipped (in its headers, its loaded segment or its note and symbols), bytes
    overwritten, a kernel-descriptor field set to an edge value, or the file cut short."""
    data = bytearray(fill_code_object())
    segment_end = SEGMENT_OFFSET + len(LoadedImage.parse(bytes(data)).segment)
    regions = {"headers": (0, 64 + 2 * 56), "segment": (SEGMENT_OFFSET, segment_end),
               "descriptor": (SEGMENT_OFFSET, SEGMENT_OFFSET + abi.KERNEL_DESCRIPTOR_BYTES),
               "tables": (segment_end, len(data))}
    how = draw(st.sampled_from(["flip", "overwrite", "field", "rename", "truncate"]))
    if how == "rename":
        # a name in the metadata or the symbol table changed (its length kept): what names a kernel is not there
        token = draw(st.sampled_from(METADATA_NAMES))
        at = draw(st.integers(1, len(token) - 2))
        renamed = token[:at] + (b"x" if token[at:at + 1] == b"_" else b"_") + token[at + 1:]
        return bytes(data.replace(token, renamed, draw(st.sampled_from([1, -1]))))
    if how == "truncate":
        return bytes(data[:draw(st.integers(0, len(data) - 1))])
    if how == "field":
        kd = abi.KernelDescriptor.unpack(data[SEGMENT_OFFSET:SEGMENT_OFFSET + abi.KERNEL_DESCRIPTOR_BYTES])
        field = draw(st.sampled_from(DESCRIPTOR_FIELDS))
        # the code's offset from its descriptor is signed: negative ones point before the descriptor
        signed = [-value for value in FIELD_VALUES if value] if field == "kernel_code_entry_byte_offset" else []
        kd = abi.KernelDescriptor(**{**kd.__dict__, field: draw(st.sampled_from(FIELD_VALUES + signed))})
        data[SEGMENT_OFFSET:SEGMENT_OFFSET + abi.KERNEL_DESCRIPTOR_BYTES] = kd.pack()
        return bytes(data)
    start, end = regions[draw(st.sampled_from(sorted(regions)))]
    if how == "flip":
        for bit in draw(st.lists(st.integers(start * 8, end * 8 - 1), min_size=1, max_size=4)):
            data[bit // 8] ^= 1 << bit % 8
    else:
        at = draw(st.integers(start, end - 1))
        junk = draw(st.binary(min_size=1, max_size=16))
        data[at:at + len(junk)] = junk
    return bytes(data)


@fuzz_settings(100)
@given(mutated_code_objects())
def test_a_mutated_code_object_is_read_or_refused(blob):
    """CodeObject.from_bytes (what `lapis disasm` reads) gives kernels or a CodeObjectError."""
    try:
        kernels = CodeObject.from_bytes(blob).kernels
    except CodeObjectError as e:
        assert e.status == "HSA_STATUS_ERROR_INVALID_CODE_OBJECT" and str(e)
    else:
        assert all(isinstance(k.code, bytes) for k in kernels)


@fuzz_settings(50)
@given(blob=mutated_code_objects())
def test_a_mutated_code_object_is_refused_runs_or_faults_its_queue(rt, blob):
    """Loading is refused with CodeObjectError, or each kernel the loader accepted runs to a result or to a fault of
    its own queue (its signal -1, the queue's error naming why); the GPU is not reset and goes on serving."""
    gpu = rt.gpu_agents[0]
    resets_before = resets(rt)
    exe = Executable(rt)
    try:
        exe.load_code_object(gpu, blob)
    except CodeObjectError as e:
        assert e.status == "HSA_STATUS_ERROR_INVALID_CODE_OBJECT"
        event("refused by the loader")
    else:
        exe.freeze()
        kernargs, out = fill_arguments(rt, gpu)
        for symbol in exe.symbols.values():
            queue = rt.create_queue(gpu)
            done = dispatch(rt, queue, symbol.kernel_object, kernargs)
            try:
                value = done.wait(Condition.LT, 1, timeout_s=30)
                state, error = queue.status()
                assert (value, state) in ((0, "active"), (-1, "error")), (value, state, error)
                assert value == 0 or error["reason"]
                event("ran" if value == 0 else "faulted its queue")    # --hypothesis-show-statistics counts them
            finally:
                queue.destroy()
                done.destroy()
        kernargs.free()
        out.free()
        exe.destroy()
    assert_the_gpu_was_not_reset_and_serves(rt, resets_before)


# -- random packet fields -------------------------------------------------------------------------------------------

# A valid grid this large runs for minutes (a dispatch has no time limit yet, issue 17's defect 10): left out.
MAX_FUZZ_WORK_ITEMS = 1 << 14
SIZES_16 = [0, 1, 3, 32, 64, 1024, 1025, 0xFFFF]
SIZES_32 = [0, 1, 32, 64, 96, 1 << 16, 2**31, 2**32 - 1]
BYTES_64 = [0, 1, 4, 256, 1 << 20, 1 << 40, 2**63, 2**64 - 1]


@st.composite
def addresses(draw, *valid: int) -> int:
    """One of the given mapped addresses, one of them misaligned or just past a page, or any 64-bit value."""
    return draw(st.one_of(st.sampled_from([*valid, 0, *(v + 4 for v in valid), *(v + 4096 for v in valid)]),
                          st.integers(0, 2**64 - 1)))


def headers(types) -> st.SearchStrategy[int]:
    # any barrier bit and fence scopes (3 is reserved), and junk in the bits above them
    return st.builds(lambda kind, barrier, acquire, release, high: abi.make_header(kind, barrier, acquire, release)
                     | high << 13, types, st.booleans(), st.integers(0, 3), st.integers(0, 3), st.integers(0, 7))


@pytest.fixture(scope="module")
def packet_targets(rt):
    """What a random packet points at: the real kernel, its arguments, device memory and a completed signal."""
    gpu = rt.gpu_agents[0]
    exe = Executable(rt)
    exe.load_code_object(gpu, fill_code_object())
    exe.freeze()
    kernargs, out = fill_arguments(rt, gpu)
    completed = rt.create_signal(0)
    yield {"kernel": exe.get_symbol("fill").kernel_object, "kernargs": kernargs.va, "memory": out.va,
           "completed": completed.handle}
    exe.destroy()


@st.composite
def packets(draw, targets: dict, completion: int):
    # INVALID (type 1) is left out: a slot whose header is INVALID is one not yet written, and the packet
    # processor waits at it, as an HSA packet processor does.
    kind = draw(st.sampled_from([abi.PACKET_TYPE_KERNEL_DISPATCH, abi.PACKET_TYPE_BARRIER_AND,
                                 abi.PACKET_TYPE_BARRIER_OR, abi.PACKET_TYPE_VENDOR_SPECIFIC,
                                 abi.PACKET_TYPE_AGENT_DISPATCH, 6, 255]))
    header = draw(headers(st.just(kind)))
    signal = draw(st.one_of(st.just(completion), addresses(targets["memory"])))
    if kind == abi.PACKET_TYPE_VENDOR_SPECIFIC:
        return abi.CopyPacket(header=header, format=draw(st.sampled_from([0, 1, 2, 0xFFFF])),
                              src=draw(addresses(targets["memory"], targets["kernel"])),
                              dst=draw(addresses(targets["memory"], targets["kernel"])),
                              size=draw(st.sampled_from(BYTES_64)), completion_signal=signal)
    if kind in (abi.PACKET_TYPE_BARRIER_AND, abi.PACKET_TYPE_BARRIER_OR):
        # dependencies that are met, absent or not signals at all; an unmet one would wait, as it should
        deps = draw(st.lists(st.one_of(st.sampled_from([0, targets["completed"]]), st.integers(1 << 48, 2**64 - 1)),
                             min_size=5, max_size=5))
        return abi.BarrierPacket(header, 0, 0, *deps, 0, signal)
    block = [draw(st.sampled_from(SIZES_16)) for _ in range(3)]
    grid = [draw(st.sampled_from(SIZES_32)) for _ in range(3)]
    whole = all(b and g % b == 0 for g, b in zip(grid, block, strict=True))
    assume(not whole or math.prod(grid) <= MAX_FUZZ_WORK_ITEMS)
    return abi.KernelDispatchPacket(
        header=header, setup=draw(st.sampled_from([0, 1, 2, 3, 4, abi.SETUP_COOPERATIVE | 1, 0xFFFF])),
        workgroup_size_x=block[0], workgroup_size_y=block[1], workgroup_size_z=block[2],
        grid_size_x=grid[0], grid_size_y=grid[1], grid_size_z=grid[2],
        private_segment_size=draw(st.sampled_from(SIZES_32)), group_segment_size=draw(st.sampled_from(SIZES_32)),
        kernel_object=draw(addresses(targets["kernel"], targets["kernargs"])),
        kernarg_address=draw(addresses(targets["kernargs"], targets["kernel"])), completion_signal=signal)


@fuzz_settings(50)
@given(data=st.data())
def test_a_packet_with_random_fields_runs_or_stops_only_its_queue(rt, packet_targets, data):
    """A packet of any type and fields runs, or stops its own queue with a reason; a barrier after it completes or
    is failed with the queue, within seconds; the GPU is not reset."""
    gpu = rt.gpu_agents[0]
    resets_before = resets(rt)
    queue = rt.create_queue(gpu)
    done, after = rt.create_signal(1), rt.create_signal(1)
    try:
        queue.submit(data.draw(packets(packet_targets, done.handle)))
        queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND),
                                       completion_signal=after.handle))
        deadline = time.monotonic() + 30
        while after.load() == 1 and queue.status()[0] == "active":
            assert time.monotonic() < deadline, "the queue neither ran on nor stopped"
            time.sleep(0.001)
        state, error = queue.status()
        assert state in ("active", "error")
        assert state == "active" or error["reason"]
        event("ran" if state == "active" else "stopped its queue")
    finally:
        queue.destroy()
        done.destroy()
        after.destroy()
    assert_the_gpu_was_not_reset_and_serves(rt, resets_before)


# -- state files `lapis smi` reads -----------------------------------------------------------------------------------

JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=3), max_leaves=8)


@fuzz_settings(50)
@given(st.one_of(JSON_VALUES, st.fixed_dictionaries({"pid": JSON_VALUES, "time": JSON_VALUES, "gpus": JSON_VALUES})))
def test_a_sysfs_directory_holding_any_json_is_read_without_a_traceback(tmp_path, monkeypatch, state):
    """`lapis smi` reads every process's state file: a file holding other JSON (not an object, or a pid, time or
    GPU list of the wrong type) is skipped, not a traceback."""
    monkeypatch.setenv("LAPIS_SYSFS_DIR", str(tmp_path))
    (tmp_path / f"{os.getpid()}.json").write_text(json.dumps(state))
    assert sysfs.read_all() == []           # this process publishes nothing there: the one file is not a state


@fuzz_settings(50)
@given(st.sampled_from(sorted(sysfs.GPU_FIELDS)), st.one_of(st.none(), JSON_VALUES))
def test_a_state_file_whose_gpu_entry_is_damaged_is_skipped(tmp_path, monkeypatch, field, value):
    """A live process's state file that `snapshot` wrote is read; the same with one GPU field removed or of another
    type is skipped (`lapis smi` indexes and formats every field)."""
    from lapis import driver
    monkeypatch.setenv("LAPIS_SYSFS_DIR", str(tmp_path))
    state = json.loads(json.dumps(sysfs.snapshot(driver.system())))
    state["pid"] = os.getppid()                                 # a live process other than this one (which
    (tmp_path / "state.json").write_text(json.dumps(state))     # publishes its own file there too)
    assert [s["pid"] for s in sysfs.read_all(exclude_pid=os.getpid())] == [os.getppid()]
    expected = sysfs.GPU_FIELDS[field]
    if value is not None and isinstance(value, expected):
        return                                                  # a value of the right type (a bool is an int)
    state["gpus"][0].pop(field) if value is None else state["gpus"][0].update({field: value})
    (tmp_path / "state.json").write_text(json.dumps(state))
    assert sysfs.read_all(exclude_pid=os.getpid()) == []


# -- framework inputs: cpu, cuda and PyTorch ------------------------------------------------------------------------

SPECIAL = [0.0, -0.0, 1.0, -1.5, 1e-39, 3e38, np.inf, -np.inf, np.nan]


@st.composite
def float_arrays(draw, max_dims: int = 2, shape=None) -> np.ndarray:
    """A small float32 array, possibly empty, with NaN, infinities, denormals and signed zeros among its values."""
    shape = shape or tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=max_dims)))
    values = st.one_of(st.sampled_from(SPECIAL), st.floats(-100, 100, width=32))
    return np.array(draw(st.lists(values, min_size=math.prod(shape), max_size=math.prod(shape))),
                    np.float32).reshape(shape)


def outcomes(op, *arrays):
    """What `op` gives on PyTorch, lapis's cpu device and its cuda device: an array, or the error type raised."""
    results = []
    for module, device in ((torch, "cpu"), (lapis, "cpu"), (lapis, "cuda")):
        try:
            out = op(module, *(module.tensor(a, device=device) for a in arrays))
            results.append(np.asarray(out.cpu().numpy()))
        except (IndexError, RuntimeError, ValueError) as e:        # the error types torch's ops raise
            results.append(type(e))
    # a kernel's fault surfaces at the op's own synchronisation (.cpu()), not in whatever op comes next
    lapis.cuda.synchronize()
    return results


def assert_agree(results) -> None:
    reference, *lapis_results = results
    for got in lapis_results:
        if isinstance(reference, type):
            # torch itself raises IndexError or RuntimeError for a bad index depending on the op and the device (its
            # cuda reports a device-side assert): either is the clear error asked for
            assert isinstance(got, type) and issubclass(got, (IndexError, RuntimeError)), (reference, got)
        else:
            assert not isinstance(got, type), f"raised {got.__name__} where torch gave {reference}"
            assert got.shape == reference.shape
            np.testing.assert_allclose(got, reference, rtol=2e-6, atol=1e-37, equal_nan=True)


ELEMENTWISE = {
    "add": lambda m, a, b: a + b, "sub": lambda m, a, b: a - b, "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b, "maximum": lambda m, a, b: m.maximum(a, b), "relu": lambda m, a, b: m.relu(a),
    "sigmoid": lambda m, a, b: m.sigmoid(a), "neg_abs": lambda m, a, b: -a.abs(),
    "where": lambda m, a, b: m.where(a > b, a, b),
}


@pytest.mark.slow
@fuzz_settings(25)
@given(st.sampled_from(sorted(ELEMENTWISE)), st.data())
def test_elementwise_ops_agree_with_torch_on_special_values_and_empty_shapes(name, data):
    a = data.draw(float_arrays())
    b = data.draw(float_arrays(shape=a.shape))
    assert_agree(outcomes(ELEMENTWISE[name], a, b))


REDUCTIONS = {
    "sum": lambda m, a, dim: a.sum(dim), "mean": lambda m, a, dim: a.mean(dim),
    "max": lambda m, a, dim: a.max(dim).values, "argmin": lambda m, a, dim: a.argmin(dim),
    "prod": lambda m, a, dim: a.prod(dim), "logsumexp": lambda m, a, dim: a.logsumexp(dim),
}


@pytest.mark.slow
@fuzz_settings(25)
@given(st.sampled_from(sorted(REDUCTIONS)), st.data())
def test_reductions_agree_with_torch_including_empty_dimensions(name, data):
    """Over a dimension that may be empty: sum and prod give their identities, mean NaN, and max and argmin raise
    (torch refuses an empty reduction with no identity) on every device."""
    a = data.draw(float_arrays())
    dim = data.draw(st.integers(-a.ndim, a.ndim - 1))
    assert_agree(outcomes(lambda m, t: REDUCTIONS[name](m, t, dim), a))


INDEXING = {
    "getitem": lambda m, a, i: a[i], "index_select": lambda m, a, i: a.index_select(0, i),
    "gather": lambda m, a, i: a.gather(0, i),
    "embedding": lambda m, a, i: m.nn.functional.embedding(i, a.reshape(-1, 1)),
    "scatter_add": lambda m, a, i: m.zeros_like(a).scatter_add(0, i, a[:len(i)]),
}


@pytest.mark.slow
@fuzz_settings(25)
@given(st.sampled_from(sorted(INDEXING)), st.data())
def test_indexing_with_out_of_range_indices_raises_on_every_device(name, data):
    """An index past either end raises on both lapis devices as on torch (an IndexError on cpu, a device-side
    assert on cuda); indices in range give torch's values."""
    a = data.draw(float_arrays(max_dims=1))
    size = a.shape[0]
    indices = np.array(data.draw(st.lists(st.integers(-size - 3, size + 3), max_size=5)), np.int64)
    assert_agree(outcomes(INDEXING[name], a, indices))


PTX_SOURCE = r"""
extern "C" __global__ void mixed(const float* x, float* y, int* h, int n) {
    __shared__ float s[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    float v = s[threadIdx.x ^ 1] * 2.0f + __shfl_down_sync(0xffffffff, s[threadIdx.x], 1);
    if (i < n) { y[i] = v / (1.0f + fabsf(v)); atomicAdd(&h[i & 7], (int)v); }
}
"""


@functools.cache
def real_ptx() -> list[str]:
    return cuda.RawModule(PTX_SOURCE).ptx.splitlines()


@st.composite
def mutated_ptx(draw) -> str:
    """NVRTC's PTX of a real kernel, with lines dropped, doubled or swapped, or tokens replaced."""
    lines = list(real_ptx())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["drop", "double", "swap", "token"]))
        if kind == "drop":
            del lines[at]
        elif kind == "double":
            lines.insert(at, lines[at])
        elif kind == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
        else:
            words = lines[at].split() or [""]
            k = draw(st.integers(0, len(words) - 1))
            words[k] = draw(st.sampled_from(["%r999", "0f7FC00000", "-1", "[%rd1+8]", "{%f1, %f2}", "$L__BB0_9",
                                             ".u16", "bra", "add.s32", ";", "@%p1", "]"]))
            lines[at] = " ".join(words)
    return "\n".join(lines)


@fuzz_settings(60)
@given(ptx=mutated_ptx())
def test_mutated_ptx_is_assembled_or_refused_with_a_compile_error(ptx):
    """lapis's PTX assembler (what RawModule(ptx=...) and cuModuleLoadData run) gives code or a CompileError
    naming what it cannot read: never a raw Python error."""
    try:
        module = cuda.RawModule(ptx=ptx, name="mutated.ptx")
        for name in module.module.entries:
            assert module.get_function(name).compiled.instructions
    except cuda.CompileError as e:
        assert str(e)
