"""Layer 0: the data caches (`caches.DataCaches`): an L1 per unit for loads, emptied at each kernel and sharing its
array with shared memory on Hopper; the L2 in slices (the H200's two partitions, the MI300X's eight XCDs); the far
level behind them (the H200's home partition, the MI300X's Infinity Cache); and the latencies the performance model
takes from what each level served."""

import numpy as np
import pytest

from conftest import Bench, pointers
from lapis.hardware import get_profile, perf
from lapis.hardware.profiles import KiB

TID = "S2R R0, SR_TID.X ;\nS2R R1, SR_CTAID.X ;\nIMAD R0, R1, c[0x0][0x0], R0 ;\n"

# Each thread loads its word twice and stores the sum: the second load finds the sector in the unit's L1.
LOAD_TWICE = TID + """
    LDC.64 R2, c[0x0][0x160] ;
    IMAD.WIDE R2, R0, 0x4, R2 ;
    LDC.64 R4, c[0x0][0x168] ;
    IMAD.WIDE R4, R0, 0x4, R4 ;
    LDG.E R8, [R2.64] ;
    LDG.E R9, [R2.64] ;
    FADD R8, R8, R9 ;
    STG.E [R4.64], R8 ;
    EXIT ;"""

# Every block reads the same 1 KiB (its thread t the word t) and stores it to its own row.
SAME_TILE = """
    S2R R0, SR_TID.X ;
    S2R R1, SR_CTAID.X ;
    LDC.64 R2, c[0x0][0x160] ;
    IMAD.WIDE R2, R0, 0x4, R2 ;
    IMAD R6, R1, c[0x0][0x0], R0 ;
    LDC.64 R4, c[0x0][0x168] ;
    IMAD.WIDE R4, R6, 0x4, R4 ;
    LDG.E R8, [R2.64] ;
    STG.E [R4.64], R8 ;
    EXIT ;"""

# One block of 1,024 threads reads 64 KiB (four 16-byte loads a thread, 16 KiB apart) twice.
SWEEP_TWICE = "S2R R0, SR_TID.X ;\nLDC.64 R2, c[0x0][0x160] ;\nIMAD.WIDE R2, R0, 0x10, R2 ;\n" + "".join(
    f"LDG.E.128 R{8 + 4 * k}, [R2.64+{k * 0x4000:#x}] ;\n" for k in range(4)) * 2 + "EXIT ;"


def test_a_second_load_in_one_kernel_hits_the_l1_and_the_next_kernel_starts_with_it_empty(bench):
    n = 64 * 1024
    src, dst = bench.buffer(np.arange(n, dtype=np.float32)), bench.reserve(4 * n)
    sectors = n * 4 // 32
    first = bench.run(LOAD_TWICE, grid=(n // 256, 1, 1), block=(256, 1, 1), args=pointers(src, dst))
    assert bench.read(dst, np.zeros(n, np.float32)).tolist() == (2 * np.arange(n, dtype=np.float32)).tolist()
    assert (first.global_sectors, first.l1_hits) == (3 * sectors, sectors)
    assert first.l2_misses == 2 * sectors and first.dram_read_bytes == n * 4       # the first load's, and the store's
    second = bench.run(LOAD_TWICE, grid=(n // 256, 1, 1), block=(256, 1, 1), args=pointers(src, dst))
    assert second.l1_hits == sectors                       # only its own second load: the L1 began empty
    assert second.l2_misses == 0 and second.l2_hits == 2 * sectors


@pytest.mark.parametrize("profile, slices", [("h200", 2), ("mi300x", 8), ("teaching", 1)])
def test_each_l2_slice_misses_once_and_the_far_level_holds_what_one_fetched(profile, slices):
    """Blocks on every unit read one tile: no unit's L1 has it; each slice fetches it once, from the far level where
    the profile has one (the H200's other partition, the MI300X's Infinity Cache), which fetched it once from DRAM."""
    bench = Bench(profile)
    units = bench.gpu.profile.compute_units
    tile, threads = np.arange(256, dtype=np.float32), 256
    src, dst = bench.buffer(tile), bench.reserve(4 * threads * units)
    c = bench.run(SAME_TILE, grid=(units, 1, 1), block=(threads, 1, 1), args=pointers(src, dst))
    assert bench.read(dst, np.zeros((units, threads), np.float32)).tolist() == [tile.tolist()] * units
    tile_sectors, stored = 256 * 4 // 32, units * threads * 4 // 32
    assert c.l1_hits == 0
    assert c.l2_misses == slices * tile_sectors + stored
    assert c.far_misses == tile_sectors + stored
    assert c.far_hits == (slices - 1) * tile_sectors
    assert c.dram_read_bytes == tile_sectors * 32 and c.dram_write_bytes == stored * 32


def test_shared_memory_takes_its_carve_out_from_the_h200s_l1():
    h200, mi300x = get_profile("h200"), get_profile("mi300x")
    assert h200.l1_bytes_for(0) == 256 * KiB
    assert h200.l1_bytes_for(48 * KiB) == 256 * KiB - 64 * KiB          # the smallest carve-out that holds it
    assert h200.l1_bytes_for(200 * KiB) == 256 * KiB - 228 * KiB
    assert mi300x.l1_bytes_for(0) == mi300x.l1_bytes_for(64 * KiB) == 32 * KiB     # CDNA's LDS is its own array


def test_a_kernel_with_much_shared_memory_has_a_small_l1(bench):
    src = bench.buffer(np.zeros(16 * 1024, np.float32))                 # 64 KiB: 2,048 sectors
    roomy = bench.run(SWEEP_TWICE, block=(1024, 1, 1), args=pointers(src), registers=24)
    assert roomy.l1_hits == 2048                                        # 256 KiB of L1: the second sweep hits
    cramped = bench.run(SWEEP_TWICE, block=(1024, 1, 1), args=pointers(src), registers=24, shared=200 * KiB)
    assert cramped.l1_hits <= 2048 * 28 // 64                           # 28 KiB of L1 holds less than half of it


def test_stores_and_atomics_go_past_the_l1(bench):
    n = 8 * 1024
    src = bench.buffer(np.ones(n, np.float32))
    store_then_load = TID + """
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R0, 0x4, R2 ;
        STG.E [R2.64], R0 ;
        LDG.E R8, [R2.64] ;
        STG.E [R2.64], R8 ;
        EXIT ;"""
    c = bench.run(store_then_load, grid=(n // 256, 1, 1), block=(256, 1, 1), args=pointers(src))
    sectors = n * 4 // 32
    assert c.l1_hits == 0                                  # the store did not fill the L1: the load missed it
    assert c.l2_hits == 2 * sectors and c.l2_misses == sectors
    assert c.dram_write_bytes == n * 4 and c.dram_read_bytes == 0


@pytest.mark.parametrize("profile", ["h200", "mi300x"])
def test_the_walk_charges_each_load_the_latency_of_the_level_that_served_it(profile):
    bench = Bench(profile)
    p = bench.gpu.profile
    n = 64 * 1024
    src, dst = bench.buffer(np.arange(n, dtype=np.float32)), bench.reserve(4 * n)
    c = bench.run(LOAD_TWICE, grid=(n // 256, 1, 1), block=(256, 1, 1), args=pointers(src, dst))
    cycles = perf.global_load_cycles(p, c)
    # a third of the sectors (the second load) from the L1, a third (the first) from DRAM, the stores missed the
    # L2 and the far level
    assert cycles == pytest.approx((p.l1_latency_cycles + 2 * p.dram_latency_cycles) / 3)
    assert bench.timing(c).terms["far"] == pytest.approx(c.l2_misses * 32 / p.far_cache_bandwidth * 1e9)


@pytest.mark.parametrize("profile", ["h200", "mi300x", "teaching"])
def test_both_executors_see_the_same_caches(profile):
    """A gather of random words, loaded twice, and a scatter, run with the reference executor and translated code
    from the same state (`compare.py` fails on any counter or cache tag that differs)."""
    bench = Bench(profile)
    bench.gpu.simt.compare = True
    n = 32 * 1024
    rng = np.random.default_rng(7)
    index = bench.buffer(rng.integers(0, n, n).astype(np.int32))
    data, dst = bench.buffer(rng.random(n).astype(np.float32)), bench.reserve(4 * n)
    gather = TID + """
        LDC.64 R2, c[0x0][0x160] ;
        IMAD.WIDE R2, R0, 0x4, R2 ;
        LDG.E R6, [R2.64] ;
        LDC.64 R4, c[0x0][0x168] ;
        IMAD.WIDE R4, R6, 0x4, R4 ;
        LDG.E R8, [R4.64] ;
        LDG.E R9, [R4.64] ;
        FADD R8, R8, R9 ;
        LDC.64 R10, c[0x0][0x170] ;
        IMAD.WIDE R10, R6, 0x4, R10 ;
        STG.E [R10.64], R8 ;
        EXIT ;"""
    for _ in range(2):
        c = bench.run(gather, grid=(n // 128, 1, 1), block=(128, 1, 1), args=pointers(index, data, dst))
    assert c.l1_hits >= n * 4 // 32 // 8 and c.l2_hits > 0
