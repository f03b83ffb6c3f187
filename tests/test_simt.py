"""Layer 0: the SIMT core's own machinery: its dispatch table against the ISA, its caches against none."""


import numpy as np
import pytest

from conftest import Bench
from lapis.hardware.simt import BINDERS, KernelFault
from lapis.hardware.simt.binders import binds
from lapis.hardware.simt.simulator_caches import SimulatorCaches
from lapis.isa import OPCODES


def test_every_opcode_has_exactly_one_binder():
    assert sorted(BINDERS) == sorted(OPCODES)

    def again(blocks, inst, pc):
        return None
    fadd = BINDERS["FADD"]
    with pytest.raises(ValueError, match="FADD is bound by both fadd and again"):
        binds("FADD")(again)
    with pytest.raises(ValueError, match="again binds FOO, which the ISA does not define"):
        binds("FOO")(again)
    assert BINDERS["FADD"] is fadd and "FOO" not in BINDERS


@pytest.mark.parametrize("target", ["0x1000", "-0x20", "-0x5", "0x18"])
def test_a_branch_to_no_instruction_of_the_program_faults_only_when_taken(bench, target):
    assert bench.run(f"@P0 BRA {target} ;\nNOP ;\nEXIT ;").steps == 3          # P0 is false: nothing jumps
    with pytest.raises(KernelFault, match=rf"branch target {target} is (outside the program|not at an instruction "
                                          r"boundary) \(instruction /\*0000\*/"):
        bench.run(f"BRA {target} ;\nNOP ;\nEXIT ;")


@pytest.mark.parametrize("instruction", ["LDS R1, [R40]", "ATOMS.ADD.U32 R1, [R40], R2",
                                         "HMMA.16816.F16 R0, R4, R40, R8"])
def test_a_register_past_the_declared_count_faults_when_reached(bench, instruction):
    with pytest.raises(KernelFault, match=r"uses R40 but the kernel declares 32 registers \(instruction /\*0010\*/"):
        bench.run(f"NOP ;\n{instruction} ;\nEXIT ;", registers=32, shared=64)


@pytest.mark.parametrize("instruction, registers", [
    ("IADD.64 R31, R2, R4", 32), ("DADD R31, R2, R4", 32), ("LDC.64 R31, c[0x0][0x160]", 32),
    ("IMAD.WIDE R31, R0, R0, R2", 32), ("LDS.128 R29, [R0]", 32), ("IADD.64 R254, R0, R0", 255)])
def test_a_register_pair_running_past_the_declared_count_faults_when_reached(bench, instruction, registers):
    """The pair's second register is past the count (for R254, it would be RZ): a fault, not a simulator error."""
    with pytest.raises(KernelFault, match=rf"uses R{registers} but the kernel declares {registers} registers "
                                          r"\(instruction /\*0010\*/"):
        bench.run(f"NOP ;\n{instruction} ;\nEXIT ;", registers=registers, shared=64)


@pytest.mark.parametrize("sim", ["translated", "reference"])
def test_a_predicated_barrier_waits_only_for_the_threads_whose_guard_holds(sim, monkeypatch):
    monkeypatch.setenv("LAPIS_SIM", sim)
    bench = Bench()
    # Threads 0-15 jump ahead; the rest reach a barrier whose guard fails for all of them: none arrives, none waits.
    bench.run("""
        S2R R0, SR_TID.X ;
        ISETP.LT.U32.AND P0, R0, 0x10, PT ;
        @P0 BRA done ;
        @P0 BAR.SYNC 0x0 ;
    done:
        EXIT ;
    """)
    # Every thread of block 0 arrives and none of block 1: each block is whole at its barrier.
    bench.run("S2R R1, SR_CTAID.X ;\nISETP.EQ.U32.AND P1, R1, 0x0, PT ;\n@P1 BAR.SYNC 0x0 ;\nEXIT ;", grid=(2, 1, 1))
    # Half of a block arrives: the other half, live and predicated off, never will.
    with pytest.raises(KernelFault, match="barrier reached under divergence") as e:
        bench.run("S2R R0, SR_TID.X ;\nISETP.LT.U32.AND P1, R0, 0x10, PT ;\n@P1 BAR.SYNC 0x0 ;\nEXIT ;")
    assert e.value.pc == 0x20 and "@P1 BAR.SYNC" in e.value.instruction


# Kernels for `Bench.lanes`: each lane's inputs are in R8, R9, ..., its outputs R40, R41, ...
# Each case makes its kernel for a bench (global buffers live at the bench's addresses) and
# returns (body, inputs, number of outputs, keyword arguments, buffers to read back afterwards).

def divergence(bench, rng, n):
    """Per-lane trip counts, an if/else inside the loop, float work on one path, an early exit."""
    body = """
        LOP.AND R61, R8, 0x7 ;
        MOV R40, 0x0 ; MOV R62, 0x0 ; I2F.F32.U32 R41, R8 ;
    top:
        ISETP.GE.S32.AND P0, R62, R61, PT ;
        @P0 BRA done ;
        LOP.AND R63, R62, 0x1 ;
        ISETP.EQ.U32.AND P1, R63, 0x0, PT ;
        @P1 BRA even ;
        IMAD R40, R40, 0x3, R62 ;
        FFMA R41, R41, 0.5, R41 ;
        BRA next ;
    even:
        IADD R40, R40, R8 ;
    next:
        IADD R62, R62, 0x1 ;
        BRA top ;
    done:
        ISETP.EQ.U32.AND P2, R61, 0x5, PT ;
        @P2 EXIT ;
        FMUL R42, -|R41|, 0.25 ;
        MUFU.RSQ R43, R41 ;
    """
    return body, rng.integers(0, 1000, (n, 1)), 4, {}, []


def rotated_loop(bench, rng, n):
    """A loop tested at its bottom, as the compiler lays loops out, with a different trip count per lane:
    lanes that branch back run first, so every lane reaches the barrier after the loop together; then each
    lane reads its neighbour's sum through shared memory."""
    body = """
        S2R R60, SR_TID.X ;
        LOP.AND R61, R8, 0x7 ;
        MOV R40, 0x0 ; MOV R62, 0x0 ;
        ISETP.GE.S32.AND P0, R62, R61, PT ;
        @P0 BRA done ;
    again:
        IADD R40, R40, R62 ;
        IADD R62, R62, 0x1 ;
        ISETP.LT.S32.AND P0, R62, R61, PT ;
        @P0 BRA again ;
    done:
        SHL R63, R60, 0x2 ;
        STS [R63], R40 ;
        BAR.SYNC 0x0 ;
        LOP.XOR R63, R63, 0x4 ;
        LDS R41, [R63] ;
    """
    return body, rng.integers(0, 1000, (n, 1)), 2, {"shared": 256}, []


@pytest.mark.parametrize("sim", ["translated", "reference"])
def test_a_loop_tested_at_its_bottom_reconverges_before_a_barrier(sim, monkeypatch):
    monkeypatch.setenv("LAPIS_SIM", sim)
    bench = Bench()
    body, inputs, n_out, kw, _ = rotated_loop(bench, np.random.default_rng(5), 128)
    out = bench.lanes(body, inputs, n_out, block=64, **kw).astype(np.int64)
    trips = inputs[:, 0] & 7
    sums = trips * (trips - 1) // 2
    assert np.array_equal(out[:, 0], sums)
    assert np.array_equal(out[:, 1], sums[np.arange(128) ^ 1])


def shared_memory(bench, rng, n):
    """A pointer stepping through shared memory, a register with a 4-way bank conflict and then none,
    diverged and sub-word accesses."""
    body = """
        S2R R60, SR_TID.X ;
        SHL R61, R60, 0x2 ;
        STS [R61], R8 ;
        STS [R61+0x100], R9 ;
        BAR.SYNC 0x0 ;
        MOV R40, 0x0 ; MOV R62, R61 ; MOV R63, 0x0 ;
    loop:
        LDS R64, [R62] ;
        IADD R40, R40, R64 ;
        IADD R62, R62, 0x8 ;
        IADD R63, R63, 0x1 ;
        ISETP.LT.U32.AND P0, R63, 0x10, PT ;
        @P0 BRA loop ;
        LOP.AND R65, R60, 0xf ;
        SHL R65, R65, 0x5 ;
        LDS R41, [R65] ;
        SHL R65, R60, 0x2 ;
        LDS R45, [R65] ;
        MOV R42, 0x0 ; MOV R43, 0x0 ;
        LOP.AND R66, R60, 0x1 ;
        ISETP.EQ.U32.AND P1, R66, 0x0, PT ;
        @P1 BRA skip ;
        STS.U8 [R60+0x200], R8 ;
        SHL R67, R60, 0x3 ;
        LDS.64 R42, [R67+0x8] ;
    skip:
        BAR.SYNC 0x0 ;
        SHL R68, R60, 0x1 ;
        LDS.S16 R44, [R68+0x200] ;
    """
    return body, rng.integers(0, 2**32, (n, 2)), 6, {"shared": 0x300}, []


def atomics(bench, rng, n):
    """Global atomics of every kind on a few addresses, shared atomics on sixteen bins."""
    target = bench.buffer(np.zeros(8, np.uint32))
    body = f"""
        MOV R60, {target & 0xFFFFFFFF:#x} ; MOV R61, {target >> 32:#x} ;
        MOV R62, 0x1 ;
        ATOMG.ADD.U32 R40, [R60.64], R62 ;
        ATOMG.MAX.S32 R41, [R60.64+0x4], R9 ;
        ATOMG.ADD.F32 RZ, [R60.64+0x8], R8 ;
        MOV R64, 0xffffffff ; MOV R65, 0x1 ;
        ATOMG.ADD.U64 R42, [R60.64+0x10], R64 ;
        MOV R66, 0x0 ; IADD R67, R9, 0x1 ;
        ATOMG.CAS.U32 R44, [R60.64+0x18], R66 ;
        LOP.AND R68, R9, 0xf ; SHL R68, R68, 0x2 ;
        ATOMS.ADD.U32 R45, [R68], R62 ;
        ATOMS.MAX.S32 RZ, [R68+0x40], R9 ;
        BAR.SYNC 0x0 ;
        LDS R46, [R68] ;
        LDS R47, [R68+0x40] ;
    """
    x = rng.standard_normal(n).astype(np.float32).view(np.uint32)
    inputs = np.stack([x, rng.integers(0, 2**31, n).astype(np.uint32)], axis=1)
    return body, inputs, 8, {"shared": 128}, [(target, np.zeros(8, np.uint32))]


def warp_operations(bench, rng, n):
    """Shuffles by immediate and by register, votes of the lanes a guard leaves (a pair on 64-wide warps)."""
    body = """
        SHFL.DOWN R40, R8, 0x3 ;
        SHFL.BFLY R41, R8, 0x5 ;
        LOP.AND R60, R8, 0x1f ;
        SHFL.IDX R42, R8, R60 ;
        MOV R43, 0x0 ; MOV R44, 0x0 ; MOV R45, 0x0 ;
        LOP.AND R61, R8, 0x2 ;
        ISETP.NE.U32.AND P1, R61, 0x0, PT ;
        ISETP.GE.U32.AND P0, R60, 0xa, PT ;
        @P0 VOTE.ANY R43, P2, P1 ;
        @P0 VOTE.ALL R62, P3, P1 ;
        @P0 SEL R45, R62, RZ, P3 ;
    """
    return body, rng.integers(0, 2**32, (n, 1)), 6, {}, []


def matrix_unit(bench, rng, n):
    """HMMAs in both half formats that share their A and B fragments, then one after a register of A was written;
    halves and addends among them infinities, NaN and subnormals; RZ fragments and destination; one under a
    predicate each 32-lane group shares; one whose result overwrites its own A; one whose products' sum
    depends on the order it is taken in."""
    body = """
        HMMA.16816.F16 R40, R8, R12, R14 ;
        HMMA.16816.F16 R44, R8, R12, R40 ;
        IADD R9, R9, 0x1 ;
        HMMA.16816.F16 R48, R8, R12, R44 ;
        HMMA.16816.BF16 R52, R8, R12, R14 ;
        HMMA.16816.BF16 R56, RZ, R12, R14 ; HMMA.16816.F16 R60, R8, RZ, RZ ; HMMA.16816.F16 RZ, R8, R12, R14 ;
        S2R R64, SR_TID.X ; LOP.AND R64, R64, 0x20 ; ISETP.EQ.U32.AND P0, R64, RZ, PT ;
        @P0 HMMA.16816.BF16 R44, R8, R12, R44 ;
        MOV R68, R8 ; MOV R69, R9 ; MOV R70, R10 ; MOV R71, R11 ;
        HMMA.16816.F16 R68, R68, R12, R14 ;
        HMMA.16816.BF16 R72, R18, R22, R14 ;
    """
    halves = rng.standard_normal((n, 12)).astype(np.float16).view(np.uint16)
    special = rng.random((n, 12)) < 0.02
    halves[special] = rng.choice(np.array([0x7C00, 0xFC00, 0x7E01, 0x0001, 0x83FF, 0x8000, 0x7F80], np.uint16),
                                 int(special.sum()))
    addends = rng.standard_normal((n, 4)).astype(np.float32)
    addends[rng.random((n, 4)) < 0.02] = np.float32(np.inf)
    addends[rng.random((n, 4)) < 0.02] = np.float32(1e-40)
    # bfloat16s of +-2^40, +-1 and +-2^-40: products so far apart, some cancelling, that their float64 sum depends
    # on the order it is taken in (for about one result in thirty)
    wide = rng.integers(0, 2, (n, 12)) << 15 | rng.choice([127 + 40, 127, 127 - 40], (n, 12)) << 7
    inputs = np.concatenate([halves.view(np.uint32), addends.view(np.uint32), wide.astype(np.uint16).view(np.uint32)],
                            axis=1)
    return body, inputs, 36, {}, []


def local_memory(bench, rng, n):
    """A per-thread array indexed at run time, and sub-word and wide accesses."""
    body = """
        STL [0x0], R8 ; IADD R60, R8, 0x7 ; STL [0x4], R60 ; SHL R61, R8, 0x1 ; STL [0x8], R61 ; STL [0xc], RZ ;
        LOP.AND R62, R8, 0x3 ; SHL R62, R62, 0x2 ;
        LDL R40, [R62] ;
        STL.U16 [0x12], R8 ;
        LDL.S16 R41, [0x12] ;
        LDL.64 R42, [0x8] ;
    """
    return body, rng.integers(0, 2**32, (n, 1)), 4, {"local": 32}, []


def _run_twice(case, profile: str) -> tuple[bool, list]:
    """Whether the bench's caches were on, and the outputs, buffers, counters and modelled times of two
    launches of a case."""
    bench = Bench(profile)
    block = 64
    n = 20 * block                      # on the teaching profile: batches of 8, 8 and 4 blocks
    body, inputs, outputs, kw, buffers = case(bench, np.random.default_rng(13), n)
    results = []
    for _ in range(2):                  # the second launch reuses the first's arrays
        out = bench.lanes(body, inputs, outputs, block=block, **kw)
        counters = bench.gpu.simt.counters
        results.append((out, [bench.read(va, like) for va, like in buffers], counters,
                        bench.timing(counters).total_ns))
    return bench.gpu.simt.caches.enabled, results


@pytest.mark.parametrize("profile", ["teaching", "mi300x"])
@pytest.mark.parametrize("case", [divergence, rotated_loop, shared_memory, atomics, warp_operations, matrix_unit,
                                  local_memory])
def test_the_simulator_caches_change_no_result_and_no_counter(case, profile, monkeypatch):
    monkeypatch.delenv("LAPIS_SIM_CACHES", raising=False)
    on, cached = _run_twice(case, profile)
    monkeypatch.setenv("LAPIS_SIM_CACHES", "0")
    off, uncached = _run_twice(case, profile)
    assert on and not off
    for (out, buffers, counters, ns), (out0, buffers0, counters0, ns0) in zip(cached, uncached, strict=True):
        assert np.array_equal(out, out0)
        assert all(np.array_equal(a, b) for a, b in zip(buffers, buffers0, strict=True))
        assert counters == counters0 and ns == ns0


def test_kept_batches_stay_within_their_lane_budget():
    """Batches are kept across launches, the most recently used first, within KEPT_LANES lanes in all;
    a program whose code changed gets a fresh batch."""
    caches = SimulatorCaches()
    caches.KEPT_LANES = 3 * 65536
    made = []

    def make(name):
        return lambda: made.append(name) or name

    programs = {name: [] for name in "abcd"}
    for name in "abc":
        assert caches.batch(name, programs[name], 65536, make(name)) == name
    assert caches.batch("a", programs["a"], 65536, make("a again")) == "a"     # kept, even at 64K lanes
    caches.batch("d", programs["d"], 65536, make("d"))                            # evicts b, the oldest
    assert caches.batch("b", programs["b"], 65536, make("b again")) == "b again"
    assert caches.batch("a", [], 65536, make("a changed")) == "a changed"
    assert made == ["a", "b", "c", "d", "b again", "a changed"]


def test_programs_of_one_shape_share_a_lane_layout():
    """Two kernels launched with the same block shape and grid read their lanes' indices from one
    layout, and a launch over a different grid sets the block rows again."""
    bench = Bench("teaching")
    a = bench.lanes("IADD R40, R0, 0x1 ;", np.zeros((256, 1), np.uint32), 1, block=64)
    b = bench.lanes("IADD R40, R0, 0x2 ;", np.zeros((256, 1), np.uint32), 1, block=64)
    c = bench.lanes("IADD R40, R0, 0x2 ;", np.zeros((128, 1), np.uint32), 1, block=64)
    assert np.array_equal(a[:, 0], np.arange(256) + 1) and np.array_equal(b[:, 0], np.arange(256) + 2)
    assert np.array_equal(c[:, 0], np.arange(128) + 2)
    batches = [blocks for _, blocks, _ in bench.gpu.simt.caches._batches.values()]
    four = [blocks for blocks in batches if blocks.nblocks == 4]
    assert len(four) >= 2 and all(blocks.layout is four[0].layout for blocks in four)


@pytest.mark.parametrize("translated", [True, False], ids=["translated", "reference"])
def test_a_register_read_before_any_write_reads_zero_after_another_kernel(bench, translated):
    # a launch zeroes only the registers a thread may read before writing them (`isa.dataflow`), so the
    # first kernel's R5 must not show through where the second's guarded write skips a lane
    bench.gpu.simt.translated = translated
    bench.run("MOV R5, 0x7 ;\nMOV R6, 0x7 ;\nEXIT ;", registers=16)
    out = bench.reserve(32 * 4)
    bench.run("""
        S2R R0, SR_TID.X ;
        ISETP.LT.S32.AND P0, R0, 0x10, PT ;
        @P0 MOV R5, 0x3 ;
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R0, 0x4, R2 ;
        STG.E [R2.64], R5 ;
        EXIT ;""", args=out.to_bytes(8, "little"), registers=16)
    expected = np.array([3] * 16 + [0] * 16, np.uint32)
    np.testing.assert_array_equal(bench.read(out, expected), expected)
