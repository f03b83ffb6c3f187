"""Layer 0: counters, the L2 and bank models, and the performance model's calibration.

Calibration targets (the issue's): a streaming copy at 80-95% of HBM bandwidth, an FMA-bound
kernel at 85-100% of the FP32 peak, an MMA-bound kernel near the matrix peak, and a 32-way
bank conflict or a fully uncoalesced access several times slower than its clean twin.
"""

import numpy as np
import pytest

from conftest import pointers
from lapis.hardware import perf
from lapis.isa import OPCODES, assemble

TID = "S2R R0, SR_TID.X ;\nS2R R1, SR_CTAID.X ;\nIMAD R0, R1, c[0x0][0x0], R0 ;\n"


def copy_kernel(width: str, nbytes: int) -> str:
    return TID + f"""
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R0, {nbytes:#x}, R2 ;
        LDC.64 R4, c[0x0][0x168] ;
        IMAD.WIDE R4, R0, {nbytes:#x}, R4 ;
        LDG.E{width} R8, [R2.64] ;
        STG.E{width} [R4.64], R8 ;
        EXIT ;"""


def test_streaming_copy_reaches_80_to_95_percent_of_hbm_bandwidth(bench):
    nbytes = 32 << 20
    src, dst = bench.reserve(nbytes), bench.reserve(nbytes)
    threads = nbytes // 16
    c = bench.run(copy_kernel(".128", 16), grid=(threads // 256, 1, 1), block=(256, 1, 1), args=pointers(src, dst))
    assert c.global_bytes == 2 * nbytes
    assert c.global_sectors == 2 * nbytes // 32              # perfectly coalesced
    assert c.dram_bytes == 2 * nbytes                         # nothing was in the L2 before
    t = bench.timing(c)
    bandwidth = t.fraction_of(bench.gpu.profile.memory_bandwidth, c.dram_bytes)
    assert t.limiter == "dram"
    assert 0.80 <= bandwidth <= 0.95


def test_a_second_read_of_a_small_buffer_hits_in_l2(bench):
    n = 64 * 1024
    src = bench.buffer(np.arange(n, dtype=np.float32))
    dst = bench.reserve(4 * n)
    first = bench.run(copy_kernel("", 4), grid=(n // 256, 1, 1), block=(256, 1, 1), args=pointers(src, dst))
    second = bench.run(copy_kernel("", 4), grid=(n // 256, 1, 1), block=(256, 1, 1), args=pointers(src, dst))
    assert first.l2_misses == 2 * n * 4 // 32
    assert second.l2_misses == 0 and second.l2_hits == second.global_sectors
    bench.gpu.simt.data_caches.flush()
    third = bench.run(copy_kernel("", 4), grid=(n // 256, 1, 1), block=(256, 1, 1), args=pointers(src, dst))
    assert third.l2_misses == first.l2_misses


def fma_kernel(iterations: int) -> str:
    body = "".join(f"FFMA R{4 + i % 8}, R{4 + i % 8}, R12, R13 ;\n" for i in range(64))
    return TID + f"""
        I2F.F32.U32 R4, R0 ; MOV R5, R4 ; MOV R6, R4 ; MOV R7, R4 ;
        MOV R8, R4 ; MOV R9, R4 ; MOV R10, R4 ; MOV R11, R4 ;
        MOV R12, 0x3f7fbe77 ; MOV R13, 0x3a83126f ; MOV R20, 0x0 ;   // R12 = 0.999, R13 = 0.001
    loop:
        {body}
        IADD R20, R20, 0x1 ;
        ISETP.LT.S32.AND P0, R20, {iterations:#x}, PT ;
        @P0 BRA loop ;
        FADD R4, R4, R11 ;
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R0, 0x4, R2 ;
        STG.E [R2.64], R4 ;
        EXIT ;""".replace(" ; ", " ;\n")


def test_fma_bound_kernel_reaches_85_to_100_percent_of_fp32_peak(bench):
    p = bench.gpu.profile
    blocks = p.compute_units * 8                            # one full wave of 256-thread blocks
    out = bench.reserve(blocks * 256 * 4)
    c = bench.run(fma_kernel(8), grid=(blocks, 1, 1), block=(256, 1, 1), args=pointers(out), registers=24)
    assert c.flops_by_precision["fp32"] == blocks * 256 * (8 * 64 * 2 + 1)
    t = bench.timing(c)
    assert t.limiter in ("issue", "fma")
    assert 0.85 <= t.fraction_of(p.fp32_tflops * 1e12, c.flops) <= 1.0


def mma_kernel(iterations: int) -> str:
    body = "".join(f"HMMA.16816.F16 R{16 + 4 * i}, R4, R8, R{16 + 4 * i} ;\n" for i in range(4))
    return f"""
        MOV R4, 0x3c003c00 ; MOV R5, 0x3c003c00 ; MOV R6, 0x3c003c00 ; MOV R7, 0x3c003c00 ;
        MOV R8, 0x3c003c00 ; MOV R9, 0x3c003c00 ; MOV R40, 0x0 ;
    loop:
        {body}{body}
        IADD R40, R40, 0x1 ;
        ISETP.LT.S32.AND P0, R40, {iterations:#x}, PT ;
        @P0 BRA loop ;
        EXIT ;""".replace(" ; ", " ;\n")


def test_mma_bound_kernel_approaches_the_matrix_peak(bench):
    p = bench.gpu.profile
    blocks = p.compute_units * 4
    c = bench.run(mma_kernel(4), grid=(blocks, 1, 1), block=(256, 1, 1), registers=48)
    assert c.flops_by_precision["matrix"] == blocks * 8 * 4 * 8 * 4096
    t = bench.timing(c)
    assert t.limiter == "matrix"
    assert t.fraction_of(p.matrix_tflops * 1e12, c.flops) >= 0.9


def shared_kernel(stride_words: int) -> str:
    return f"""
        S2R R0, SR_TID.X ;
        IMAD R1, R0, {4 * stride_words:#x}, RZ ;
        LOP.AND R1, R1, 0x3fff ;
        MOV R2, 0x0 ;
    loop:
        LDS R3, [R1] ; LDS R4, [R1+0x4] ; LDS R5, [R1+0x8] ; LDS R6, [R1+0xc] ;
        IADD R2, R2, 0x1 ;
        ISETP.LT.S32.AND P0, R2, 0x10, PT ;
        @P0 BRA loop ;
        EXIT ;""".replace(" ; ", " ;\n")


def test_bank_conflicts_are_counted_and_slow_the_kernel(bench):
    p = bench.gpu.profile
    grid, block = (p.compute_units * 8, 1, 1), (256, 1, 1)
    clean = bench.run(shared_kernel(1), grid=grid, block=block, shared=0x4010)
    clean_t = bench.timing(clean)
    conflicted = bench.run(shared_kernel(32), grid=grid, block=block, shared=0x4010)
    conflicted_t = bench.timing(conflicted)
    accesses = grid[0] * 8 * 16 * 4                        # warp-level LDS instructions
    assert clean.bank_conflicts == 0 and clean.shared_wavefronts == accesses
    assert conflicted.shared_wavefronts == 32 * accesses   # every lane of a warp in one bank
    assert conflicted_t.limiter == "shared"
    assert conflicted_t.duration_ns >= 4 * clean_t.duration_ns


def test_broadcast_and_two_way_patterns(bench):
    src = """
        S2R R0, SR_TID.X ;
        LDS R3, [RZ] ;
        SHL R1, R0, 0x3 ;
        LDS R4, [R1] ;
        EXIT ;"""
    c = bench.run(src, block=(32, 1, 1), shared=256)
    assert (c.shared_wavefronts, c.shared_ideal_wavefronts) == (1 + 2, 2)    # broadcast, then 2-way


def strided_load_kernel(stride_bytes: int) -> str:
    return TID + f"""
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R0, {stride_bytes:#x}, R2 ;
        LDG.E R8, [R2.64] ;
        EXIT ;"""


def test_uncoalesced_access_moves_8x_the_bytes_and_runs_several_times_slower(bench):
    threads = 1 << 21
    grid, block = (threads // 256, 1, 1), (256, 1, 1)
    src = bench.reserve(threads * 128)
    clean = bench.run(strided_load_kernel(4), grid=grid, block=block, args=pointers(src))
    clean_t = bench.timing(clean)
    bench.gpu.simt.data_caches.flush()
    strided = bench.run(strided_load_kernel(128), grid=grid, block=block, args=pointers(src))
    strided_t = bench.timing(strided)
    assert clean.global_bytes == strided.global_bytes == threads * 4
    assert strided.global_sectors == 8 * clean.global_sectors
    assert strided.dram_bytes == 8 * clean.dram_bytes
    assert strided_t.duration_ns >= 4 * clean_t.duration_ns


def test_a_warp_is_charged_its_distinct_sectors_whatever_the_lane_order(bench):
    # lane l of a warp reads word (l % 4) * 8 + l // 4: the warp's 32 words in four sectors, but
    # neighbouring lanes in different ones (as a warp storing a column-major tile by rows does)
    shuffled = TID + """
        LOP.AND R6, R0, 0x3 ;
        SHR.S32 R7, R0, 0x2 ;
        IMAD R8, R6, 0x8, R7 ;
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R8, 0x4, R2 ;
        LDG.E R9, [R2.64] ;
        EXIT ;"""
    threads = 1 << 14
    src = bench.reserve(threads * 4 + 128)
    in_order = bench.run(strided_load_kernel(4), grid=(threads // 256, 1, 1), block=(256, 1, 1), args=pointers(src))
    mixed = bench.run(shuffled, grid=(threads // 256, 1, 1), block=(256, 1, 1), args=pointers(src))
    assert in_order.global_sectors == mixed.global_sectors == threads // 8


def test_divergence_occupancy_and_pipe_counters(bench):
    src = """
        S2R R0, SR_TID.X ;
        ISETP.LT.U32.AND P0, R0, 0x8, PT ;
        @!P0 BRA done ;
        FADD R1, R1, 1.0 ;
        MUFU.RCP R2, R1 ;
    done:
        EXIT ;"""
    c = bench.run(src, grid=(264, 1, 1), block=(64, 1, 1))
    warps = 264 * 2
    assert c.warp_instructions_by_pipe["SFU"] == 264              # only the first warp of a block has tid < 8
    assert c.warp_instructions_by_pipe["CBU"] == 2 * warps
    # 4 instructions on all 64 lanes, 2 on 8 lanes of one warp of each block's two.
    assert c.average_active_lanes == pytest.approx((4 * 64 + 2 * 8) / (4 * 2 + 2))
    t = bench.timing(c)
    occ = bench.last[1]
    assert occ.blocks_per_unit == 32 and occ.theoretical == pytest.approx(64 / 64)
    assert t.achieved_occupancy == pytest.approx(264 / (132 * 32))   # one partly filled wave


def test_latency_term_shrinks_as_occupancy_grows(bench):
    """A dependent chain of loads: with few warps per unit latency dominates the kernel."""
    chain = TID + """
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R0, 0x4, R2 ;
        LDG.E R8, [R2.64] ;
        IMAD.WIDE R2, R8, 0x4, R2 ;
        LDG.E R9, [R2.64] ;
        EXIT ;"""
    buf = bench.buffer(np.zeros(1 << 16, np.uint32))
    p = bench.gpu.profile
    c = bench.run(chain, grid=(p.compute_units, 1, 1), block=(32, 1, 1), args=pointers(buf))
    t = bench.timing(c)
    assert t.limiter == "latency"
    assert t.chain_cycles >= 2 * p.l2_latency_cycles


def test_the_scoreboard_walk_waits_on_the_latest_writer_of_each_source():
    """A load's consumer waits the load latency (long scoreboard); an instruction reading two results
    waits for the later one; the tail is the last result's latency."""
    program = assemble("LDG.E R4, [R2.64] ;\nFADD R5, R4, R4 ;\nMOV R6, R7 ;\nFADD R8, R5, R6 ;\nEXIT ;")
    load = 400.0
    fadd, mov = OPCODES["FADD"].latency, OPCODES["MOV"].latency
    stalls, tail, cycles = perf._walk_program(perf._dataflow(program), {"global": load, "shared": 30})
    issue1 = 1.0 + load                                   # the LDG issues at cycle 1
    issue3 = max(issue1 + 2.0, issue1 + fadd, issue1 + 1.0 + mov)
    assert stalls[:2] == [(0.0, ""), (load - 1.0, "long scoreboard")]
    assert stalls[2] == (0.0, "")
    assert stalls[3] == (issue3 - (issue1 + 1.0) - 1.0, "wait" if issue3 > issue1 + 2.0 else "")
    assert tail == max(0.0, issue3 + fadd - (issue3 + 1.0)) and np.array_equal(cycles, [1 + s for s, _ in stalls])


def test_a_loop_trip_takes_at_least_its_recurrence():
    """A pointer chase's address comes from the last trip's load: the walk in layout order sees only the first
    trip's writer (before the loop), so each trip must wait for the load through the recurrence bound, which
    an accumulator's add (4 cycles) does not raise past the trip's issue."""
    chase = assemble("""
        MOV R4, 0x0 ;
        MOV R5, 0x0 ;
        IMAD.64 R6, R4, 0x8, R2 ;
        LDG.E.64 R4, [R6.64] ;
        IADD.64 R8, R8, 0x1 ;
        ISETP.LT.S64.AND P0, R8, R10, PT ;
        @P0 BRA 0x20 ;
        EXIT ;""")
    levels = {"global": 300.0, "shared": 30}
    flow = perf._dataflow(chase)
    stalls, _, cycles = perf._walk_program(flow, levels)
    trip = cycles[2:7].sum()
    assert trip == pytest.approx(300 + OPCODES["IMAD"].latency)            # the load's latency and the address's
    assert stalls[2][1] == "long scoreboard"                                   # the address waits on the load
    without_loop = perf._walk_program(perf._dataflow(chase[:6] + chase[7:]), levels)[2]
    assert without_loop[2:6].sum() < 20                                        # straight-line: no wait at all
    adds = assemble("""
        FADD R4, R4, R6 ;
        IADD.64 R8, R8, 0x1 ;
        ISETP.LT.S64.AND P0, R8, R10, PT ;
        @P0 BRA 0x0 ;
        EXIT ;""")
    plain = perf._walk_program(perf._dataflow(adds), levels)[2]
    assert plain[:4].sum() >= OPCODES["FADD"].latency and np.array_equal(
        plain, [1.0 + wait for wait, _ in perf._walk_program(perf._dataflow(adds), levels)[0]])


def test_a_kept_timing_answers_only_for_the_same_counts():
    """model_time keeps what it modelled (a framework launches the same kernels over and over); any count
    that differs is another key, and so another time."""
    from lapis.hardware import get_profile
    from lapis.hardware.simt import Counters
    profile = get_profile("h200")
    program = assemble("LDG.E R4, [R2.64] ;\nFADD R5, R4, R4 ;\nSTG.E [R2.64], R5 ;\nEXIT ;")
    occ = perf.occupancy(profile, 256, 8, 0)

    def counters(**change) -> Counters:
        c = Counters(np.full(4, 8, np.int64), np.full(4, 256, np.int64), {"fp32": 256}, {"ALU": 8, "LSU": 16},
                     global_bytes=2048, global_sectors=64, l2_misses=32, dram_read_bytes=1024, blocks=1, waves=1,
                     warps_per_block=8)
        for name, value in change.items():
            setattr(c, name, value)
        return c
    first = perf.model_time(profile, counters(), occ, program)
    assert perf.model_time(profile, counters(), occ, program) is first
    assert first == perf._model_time(profile, counters(), occ, program, 1.0)
    bigger = perf.model_time(profile, counters(dram_read_bytes=1 << 30), occ, program)
    assert bigger.total_ns > first.total_ns
    assert perf.model_time(profile, counters(), occ, program, 0.5).total_ns > first.total_ns
    assert perf.model_time(profile, counters(), occ, program, per_pc=counters().per_pc()) is first
    other = counters(warp_instructions=np.full(4, 9, np.int64))      # the per-pc bytes given are the key's
    assert perf.model_time(profile, counters(), occ, program, per_pc=other.per_pc()) is not first
    base = counters().key()
    hash(base)
    for name, value in counters().__dict__.items():            # every count is in the key
        changed = value + 1 if not isinstance(value, dict) else {**value, "fp64": 1}
        assert counters(**{name: changed}).key() != base, name
