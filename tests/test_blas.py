"""Layer 4: sgemm with cuBLAS conventions against numpy, and its argument checks."""

import numpy as np
import pytest

from lapis import cuda, hip, trace
from lapis.libs import blas, kernels

rng = np.random.default_rng(3)


def col_major(a: np.ndarray, ld: int | None = None) -> np.ndarray:
    """Column-major storage of a, with leading dimension ld (padding rows if ld > rows)."""
    rows, cols = a.shape
    ld = ld or rows
    buf = np.zeros((cols, ld), np.float32)
    buf[:, :rows] = a.T
    return buf.ravel()


def from_col_major(buf: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    return buf.reshape(cols, ld)[:, :rows].T


@pytest.fixture(scope="module")
def handle():
    return blas.create(cuda)


@pytest.mark.parametrize("transa,transb", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
@pytest.mark.parametrize("m,n,k", [(64, 64, 16), (70, 33, 45), (1, 130, 7), (129, 65, 1), (17, 1000, 3)])
def test_sgemm_matches_numpy(handle, transa, transb, m, n, k):
    a = rng.standard_normal((k, m) if transa == "T" else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transb == "T" else (k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    lda, ldb, ldc = a.shape[0] + 3, b.shape[0], m + 1           # padded leading dimensions too
    dA, dB = cuda.to_device(col_major(a, lda)), cuda.to_device(col_major(b, ldb))
    dC = cuda.to_device(col_major(c, ldc))
    blas.sgemm(handle, transa, transb, m, n, k, 1.5, dA, lda, dB, ldb, -0.5, dC, ldc)
    op_a = a.T if transa == "T" else a
    op_b = b.T if transb == "T" else b
    got = from_col_major(dC.copy_to_host(), m, n, ldc)
    np.testing.assert_allclose(got, 1.5 * op_a @ op_b - 0.5 * c, rtol=1e-5, atol=1e-5)
    padding = dC.copy_to_host().reshape(n, ldc)[:, m:]
    assert np.all(padding == 0)                                   # rows between m and ldc untouched


@pytest.mark.parametrize("tiles", blas.TILE_CANDIDATES + blas.NARROW_TILES, ids=str)
def test_every_tiling_computes_inner_and_edge_tiles(handle, tiles):
    # 300 x 140 holds whole tiles (staged without bounds tests) and partial ones; k = 37 ends mid-slice
    m, n, k = 300, 140, 37
    a = rng.standard_normal((k, m)).astype(np.float32)              # transa = "T"
    b = rng.standard_normal((k, n)).astype(np.float32)
    dC = cuda.device_array(m * n, np.float32)
    blas._launch_gemm(handle, tiles, True, False, m, n, k, 1.0, cuda.to_device(col_major(a)), k, 0,
                      cuda.to_device(col_major(b)), k, 0, 0.0, dC, m, 0, 1)
    np.testing.assert_allclose(from_col_major(dC.copy_to_host(), m, n, m), a.T @ b, rtol=1e-4, atol=1e-4)


# Slices 16 and 8 deep, blocks 64, 128 and 32 rows high, 4 and 8 rows per thread: each of the staging's mappings.
@pytest.mark.parametrize("tiles", [blas.TILE_CANDIDATES[0], blas.TILE_CANDIDATES[2], blas.NARROW_TILES[0]], ids=str)
def test_every_layout_is_staged_along_its_contiguous_direction(handle, tiles):
    """A transposed operand (op(A) = A^T, k-contiguous; op(B) = B^T, n-contiguous) is staged with a warp's lanes along
    its contiguous direction, as the untransposed one is: a gemm reads as few 32-byte sectors in every layout (staged
    one way for all, each lane of a warp read its own sector of a transposed operand: 5.5x the sectors at 1024^3)."""
    m, n, k = 256, 256, 64                                          # whole tiles: every staging load unguarded
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    sectors = {}
    for ta in (False, True):
        for tb in (False, True):
            dA = cuda.to_device(col_major(a.T) if ta else col_major(a))
            dB = cuda.to_device(col_major(b.T) if tb else col_major(b))
            dC = cuda.device_array(m * n, np.float32)
            with trace() as t:
                blas._launch_gemm(handle, tiles, ta, tb, m, n, k, 1.0, dA, k if ta else m, 0, dB, n if tb else k, 0,
                                  0.0, dC, m, 0, 1)
                cuda.synchronize()
            np.testing.assert_allclose(from_col_major(dC.copy_to_host(), m, n, m), a @ b, rtol=1e-4, atol=1e-4)
            kernel = t.select(0, "kernel")[-1].args
            sectors[ta, tb] = kernel["global_sectors"]
            assert kernel["bank_conflicts"] == 0
    assert len(set(sectors.values())) == 1, sectors


@pytest.mark.parametrize("tiles", blas.TILE_CANDIDATES + blas.NARROW_TILES, ids=str)
def test_aligned_columns_are_staged_four_words_at_a_time(handle, tiles):
    """Column-major A and B whose columns start on 16 bytes take the kernel that stages them with 128-bit loads
    (where the slice has a vector for every thread), and such a C gets its runs of four rows in 128-bit stores;
    the same operands one element off take word loads and stores. Both compute inner and edge tiles, and a k
    that ends mid-slice."""
    m, n, k = 300, 140, 44
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    for shift in (0, 1):
        dA = cuda.to_device(np.concatenate([np.zeros(shift, np.float32), col_major(a)]))[shift:]
        dB = cuda.to_device(np.concatenate([np.zeros(shift, np.float32), col_major(b)]))[shift:]
        dC = cuda.device_array(m * n + shift, np.float32)[shift:]
        launched = set(handle.tiled_kernels)
        blas._launch_gemm(handle, tiles, False, False, m, n, k, 1.0, dA, m, 0, dB, k, 0, 0.0, dC, m, 0, 1)
        np.testing.assert_allclose(from_col_major(dC.copy_to_host(), m, n, m), a @ b, rtol=1e-4, atol=1e-4)
        assert (tiles, shift == 0, shift == 0, False, shift == 0, False, False) in launched | set(handle.tiled_kernels)
    # every candidate has a vector per thread in one slice at least, and in none more than one; B's only in
    # slices 8 deep (its transposing stores would clash in banks in deeper ones)
    whole = [tiles.bm * tiles.bk == 4 * tiles.threads, tiles.bk * tiles.bn == 4 * tiles.threads and tiles.bk == 8]
    asm = handle.gemm_kernel(tiles, True, True, False, True).inspect_asm()
    assert asm.count("LDG.E.128") == sum(whole) >= 1 and asm.count("STS.128") == whole[0]
    assert "STG.E.128" in asm and "STG.E.128" not in handle.gemm_kernel(tiles).inspect_asm()


@pytest.mark.parametrize("transa,transb", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
@pytest.mark.parametrize("m,n,k", [(64, 64, 512), (40, 9, 777)])        # 777 = 6 chunks of 129 and a tail of 3
def test_split_k_for_few_tiles_and_a_long_k(handle, transa, transb, m, n, k):
    assert blas._split_k(blas.DEFAULT_TILES, m, n, k, 1, np.dtype(np.float32)) > 1
    a = rng.standard_normal((k, m) if transa == "T" else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transb == "T" else (k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    lda, ldb, ldc = a.shape[0] + 1, b.shape[0] + 2, m + 3
    dA, dB, dC = (cuda.to_device(col_major(x, ld)) for x, ld in ((a, lda), (b, ldb), (c, ldc)))
    with trace() as t:
        blas.sgemm(handle, transa, transb, m, n, k, 0.5, dA, lda, dB, ldb, 2.0, dC, ldc)
        handle.context.synchronize()
    launched = [e.args["grid"] for e in t.select(0, "kernel")]
    assert launched[0][2] > 1                                       # the chunks are one batched launch
    op_a, op_b = (a.T if transa == "T" else a), (b.T if transb == "T" else b)
    got = from_col_major(dC.copy_to_host(), m, n, ldc)
    np.testing.assert_allclose(got, 0.5 * (op_a.astype(np.float64) @ op_b) + 2.0 * c, rtol=1e-4, atol=1e-4)
    assert np.all(dC.copy_to_host().reshape(n, ldc)[:, m:] == 0)  # the padding rows untouched


@pytest.mark.parametrize("beta", [0.5, 0.0])
@pytest.mark.parametrize("m,n,k", [(70, 33, 45), (64, 64, 512)])       # the tiled kernel, and split-K
def test_the_bias_epilogue_adds_a_bias_down_the_rows(handle, m, n, k, beta):
    """sgemm(..., bias=) adds bias[i] to row i of C in the kernel that writes C (cuBLASLt's bias epilogue), on the
    tiled and the split-K paths, with beta's C as well, and (beta 0) in the 128-bit stores, 70 rows ending in a
    partial run of four."""
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (m, n)))
    bias = rng.standard_normal(m).astype(np.float32)
    dC = cuda.to_device(col_major(c))
    blas.sgemm(handle, "N", "N", m, n, k, 1.0, cuda.to_device(col_major(a)), m, cuda.to_device(col_major(b)), k,
               beta, dC, m, bias=cuda.to_device(bias))
    np.testing.assert_allclose(from_col_major(dC.copy_to_host(), m, n, m), a @ b + beta * c + bias[:, None],
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(blas.BlasError, match=f"bias of m = {m} elements"):
        blas.sgemm(handle, "N", "N", m, n, k, 1.0, cuda.to_device(col_major(a)), m, cuda.to_device(col_major(b)), k,
                   0.0, dC, m, bias=cuda.device_array(3, np.float32))


def test_beta_zero_ignores_nan_in_c(handle):
    a = rng.standard_normal((16, 16)).astype(np.float32)
    dA = cuda.to_device(col_major(a))
    dC = cuda.to_device(np.full(256, np.nan, np.float32))
    blas.sgemm(handle, "N", "N", 16, 16, 16, 1.0, dA, 16, dA, 16, 0.0, dC, 16)
    np.testing.assert_allclose(from_col_major(dC.copy_to_host(), 16, 16, 16), a @ a, rtol=1e-5, atol=1e-5)


def test_row_major_callers_swap_operands(handle):
    A, B = rng.random((40, 24), dtype=np.float32), rng.random((24, 56), dtype=np.float32)
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((40, 56), np.float32)
    blas.sgemm(handle, "N", "N", 56, 40, 24, 1.0, dB, 56, dA, 24, 0.0, dC, 56)
    np.testing.assert_allclose(dC.copy_to_host(), A @ B, rtol=1e-5)


def test_sgemm_on_the_mi300x_profile():
    h = blas.create(hip)
    A = rng.random((65, 65), dtype=np.float32)
    dA, dC = hip.to_device(A), hip.device_array((65, 65), np.float32)
    blas.sgemm(h, "N", "N", 65, 65, 65, 1.0, dA, 65, dA, 65, 0.0, dC, 65)
    np.testing.assert_allclose(dC.copy_to_host(), A @ A, rtol=1e-5)


def test_invalid_arguments(handle):
    d = cuda.device_array(64, np.float32)
    with pytest.raises(blas.BlasError, match="lda=4 must be at least 8"):
        blas.sgemm(handle, "N", "N", 8, 8, 8, 1.0, d, 4, d, 8, 0.0, d, 8)
    with pytest.raises(blas.BlasError, match="trans must be"):
        blas.sgemm(handle, "X", "N", 8, 8, 8, 1.0, d, 8, d, 8, 0.0, d, 8)
    with pytest.raises(blas.BlasError, match="needs 100"):
        blas.sgemm(handle, "N", "N", 10, 10, 10, 1.0, d, 10, d, 10, 0.0, d, 10)
    with pytest.raises(blas.BlasError, match="float32"):
        blas.sgemm(handle, "N", "N", 2, 2, 2, 1.0, cuda.device_array(4, np.float64), 2, d, 2, 0.0, d, 2)
    with pytest.raises(blas.BlasError, match="device array"):
        blas.sgemm(handle, "N", "N", 2, 2, 2, 1.0, np.zeros(4, np.float32), 2, d, 2, 0.0, d, 2)


def test_fill_kernel():
    d = cuda.device_array((5, 7), np.float32)
    kernels.fill(cuda, d, 2.5)
    assert np.all(d.copy_to_host() == 2.5)
    i = cuda.device_array(300, np.int64)
    kernels.fill(cuda, i, -3)
    assert np.all(i.copy_to_host() == -3)


def test_the_autotuner_ranks_tilings_by_predicted_time_and_remembers(handle):
    m = n = 512
    k = 1024                                            # above TUNE_ABOVE multiply-adds
    with trace() as t:
        chosen = blas.choose_tiles(handle, m, n, k, np.float32)
    event = t.first(4, "gemm_autotune").args
    assert len(event["ranking"]) == len(blas.TILE_CANDIDATES) and event["chosen"] == str(chosen)
    times = [ns for _, ns in event["ranking"]]
    assert times == sorted(times) and chosen in blas.TILE_CANDIDATES
    fresh = blas.create(cuda)                           # a new handle (a new process) reads the stored choice
    with trace() as t:
        assert blas.choose_tiles(fresh, m, n, k, np.float32) == chosen
    assert not t.select(4, "gemm_autotune")
    assert blas.choose_tiles(handle, 64, 64, 64, np.float32) == blas.DEFAULT_TILES      # small: no tuning


@pytest.mark.parametrize("m,n,tiles", [(32, 128, blas.NARROW_TILES[0]), (96, 128, blas.NARROW_TILES[0]),
                                       (128, 32, blas.NARROW_TILES[1]), (51, 128, blas.DEFAULT_TILES),
                                       (64, 64, blas.DEFAULT_TILES)])
def test_a_small_gemm_takes_the_tiling_with_the_least_padding(handle, m, n, tiles):
    assert blas.choose_tiles(handle, m, n, 32, np.float32) == tiles


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
@pytest.mark.parametrize("m,n,k", [(70, 150, 64), (1, 9, 32), (130, 260, 64)])
def test_half_gemm_on_the_matrix_unit(handle, dtype, m, n, k):
    import ml_dtypes

    from lapis import trace
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    a = rng.standard_normal((m, k)).astype(dt)              # op(A) = A^T: A is k x m column-major, k-contiguous
    b = rng.standard_normal((k, n)).astype(dt)              # op(B) = B: k x n column-major, k-contiguous
    c = rng.standard_normal((m, n)).astype(np.float32)
    dC = cuda.to_device(col_major(c))
    with trace() as t:
        blas.gemm(handle, "T", "N", m, n, k, 2.0, cuda.to_device(a.ravel()), k, cuda.to_device(b.T.copy().ravel()), k,
                  0.5, dC, m)
        got = from_col_major(dC.copy_to_host(), m, n, m)
    assert t.first(4, "gemm").args["kernel"] == "mma_gemm_kernel"
    assert any("HMMA" in e.args["disassembly"] or e.args["flops_by_precision"].get("matrix")
               for e in t.select(0, "kernel"))
    expected = 2.0 * (a.astype(np.float32) @ b.astype(np.float32)) + 0.5 * c
    assert np.allclose(got, expected, rtol=1e-3, atol=1e-3)


def test_the_staging_copy_makes_any_operand_k_contiguous(handle):
    """`_k_contiguous` (the transpose kernel, two halves of k to a word) for an odd row count, an odd leading
    dimension past the rows, a batch stride past the matrix, and a k that is not a whole number of its tiles."""
    rows, k, ld, stride, batch = 37, 96, 41, 41 * 96 + 5, 2
    src = rng.integers(0, 2**16, batch * stride, dtype=np.uint16)
    staged = blas._k_contiguous(handle, cuda.to_device(src).view(np.float16), rows, k, ld, stride, batch)
    expected = np.stack([src[z * stride:z * stride + k * ld].reshape(k, ld)[:, :rows].T for z in range(batch)])
    assert np.array_equal(staged.copy_to_host().view(np.uint16).reshape(batch, rows, k), expected)


@pytest.mark.slow
def test_a_half_gemm_in_another_layout_is_staged_for_the_matrix_unit(handle):
    """op(A) = A and op(B) = B^T (neither k-contiguous, as lapis.matmul(A, B) of row-major matrices has B): a gemm
    large enough is copied k-contiguous by the transpose kernel, then runs on the matrix unit, batched, as cuBLAS
    takes any layout to its tensor cores; a small one stays on the tiled kernel."""
    import ml_dtypes
    m, n, k, batch = 160, 544, 1568, 2                     # m n k >= TUNE_ABOVE; no dimension a tile's multiple
    assert m * n * k >= blas.TUNE_ABOVE
    a = rng.standard_normal((batch, k, m)).astype(ml_dtypes.bfloat16)     # column-major m x k: m-contiguous
    b = rng.standard_normal((batch, k, n)).astype(ml_dtypes.bfloat16)     # column-major n x k, op(B) its transpose
    dC = cuda.device_array(batch * m * n, np.float32)
    with trace() as t:
        blas.gemm_strided_batched(handle, "N", "T", m, n, k, 1.0, cuda.to_device(a.ravel()), m, k * m,
                                  cuda.to_device(b.ravel()), n, k * n, 0.0, dC, m, m * n, batch)
        got = dC.copy_to_host().reshape(batch, n, m).transpose(0, 2, 1)
    launched = [e.args["kernel"] for e in t.select(3, "launch")]
    probes = 2 * len(blas.mma_candidates(m, n, batch, 132)) if t.select(4, "gemm_autotune") else 0  # each twice
    assert launched == ["transpose_kernel"] * 2 + ["mma_gemm_kernel"] * (probes + 1)
    expected = np.einsum("zkm,zkn->zmn", a.astype(np.float32), b.astype(np.float32))
    assert np.allclose(got, expected, rtol=2e-3, atol=2e-2 * np.abs(expected).max())
    with trace() as t:
        blas.gemm(handle, "N", "T", 8, 8, 32, 1.0, cuda.to_device(a.ravel()), 8, cuda.to_device(b.ravel()), 8, 0.0,
                  dC, 8)
    assert [e.args["kernel"] for e in t.select(3, "launch")] == ["gemm_kernel"]
    assert blas.TUNE_ABOVE == 512**3                       # docs/layer4-libraries.md quotes it
    half = cuda.to_device(a.ravel())
    assert blas._worth_staging(handle, False, False, 512, 512, 512, half)
    assert blas._worth_staging(handle, False, False, 8192, 8192, 8192, half)
    assert not blas._worth_staging(handle, False, False, 256, 512, 512, half)


@pytest.mark.slow
@pytest.mark.parametrize("tiles", blas.MMA_TILES_CANDIDATES)
def test_every_block_of_the_matrix_unit_kernel(handle, tiles):
    """Blocks of 128, 64 and 32 rows by 256 and 128 columns, on a C no block divides."""
    import ml_dtypes
    m, n, k = 70, 260, 64
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    dC = cuda.device_array(m * n, np.float32)
    blas._launch_mma(handle, tiles, m, n, k, 1.0, cuda.to_device(a.ravel()), k, 0, cuda.to_device(b.T.copy().ravel()),
                     k, 0, 0.0, dC, m, 0, 1)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    assert np.allclose(from_col_major(dC.copy_to_host(), m, n, m), expected, atol=1e-3)


def test_the_matrix_unit_kernel_s_block_fills_the_units(handle):
    """Below TUNE_ABOVE the largest block whose grid has a block for every unit (of the h200's 132), else the
    smallest; above, the block the model predicts fastest, probed once per shape and kept, among the 256-column
    ones, and the narrower too where none of those fills the units."""
    import ml_dtypes

    from lapis import trace
    bf16 = ml_dtypes.bfloat16                  # the blocks test_every_block_of_the_matrix_unit_kernel compiled
    assert blas.choose_mma_tiles(handle, 256, 256, 64, 1, bf16) == (1, 4)          # 16 blocks of 32 x 128
    assert blas.choose_mma_tiles(handle, 2048, 2048, 32, 1, bf16) == (2, 8)        # 128 of 128 x 256: 256 of 64
    assert blas.choose_mma_tiles(handle, 256, 256, 64, 66, bf16) == (4, 8)         # 132 batched blocks
    assert all(n_tiles == 8 for _, n_tiles in blas.mma_candidates(2048, 2048, 1, 132))    # 64 x 256: 256 blocks
    assert blas.mma_candidates(1024, 1024, 1, 132) == blas.MMA_TILES_CANDIDATES          # 32 x 256: 128 blocks
    with trace() as t:
        chosen = blas.choose_mma_tiles(handle, 512, 512, 544, 1, bf16)
    ranking = t.first(4, "gemm_autotune").args["ranking"]
    assert len(ranking) == len(blas.MMA_TILES_CANDIDATES) and ranking[0][0] == blas._mma_name(chosen)
    with trace() as t:
        assert blas.choose_mma_tiles(handle, 512, 512, 544, 1, bf16) == chosen
    assert not t.select(4, "gemm_autotune")


@pytest.mark.slow
def test_a_1024_half_gemm_takes_a_narrower_block_that_fills_the_units(handle):
    """At 1024^3 every 256-column block leaves some of the h200's 132 units idle (at most 128 blocks, of 32 x 256):
    the autotuner ranks the 128-column blocks too, and the block it picks (64 x 128) is predicted well ahead of the
    best 256-column one (32 x 256) at the full depth."""
    import ml_dtypes
    n = 1024
    chosen = blas.choose_mma_tiles(handle, n, n, n, 1, ml_dtypes.bfloat16)
    assert chosen[1] == 4
    a, b = (cuda.device_array(n * n, ml_dtypes.bfloat16) for _ in range(2))
    c = cuda.device_array(n * n, np.float32)
    ms = {tiles: handle.device_time_ms(lambda tiles=tiles: blas._launch_mma(handle, tiles, n, n, n, 1.0, a, n, 0, b, n,
                                                                               0, 0.0, c, n, 0, 1))
          for tiles in (chosen, (1, 8))}
    # docs/layer4-libraries.md quotes them
    assert chosen == (2, 4) and (round(ms[chosen] * 1e3, 1), round(ms[1, 8] * 1e3, 1)) == (8.0, 10.2)


@pytest.mark.slow
def test_the_matrix_unit_kernel_with_spilled_fragments(handle):
    """Six 16-row tiles per warp need more than 255 registers: fragment quads spill to local memory."""
    import ml_dtypes
    kernel = cuda.jit(blas.make_mma_gemm_kernel(cuda.bfloat16, 6))
    m, n, k = 130, 20, 32
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    words = [cuda.to_device(x.view(np.uint32).ravel()) for x in (a, b.T.copy())]
    dC = cuda.to_device(np.zeros(m * n, np.float32))
    kernel[(-(-m // 192), 1, 1), 256](np.int32(m), np.int32(n), np.int32(k), np.float32(1.0), words[0],
                                       np.int32(k // 2), np.int32(0), words[1], np.int32(k // 2), np.int32(0),
                                       np.float32(0.0), dC, np.int32(m), np.int32(0))
    assert np.allclose(from_col_major(dC.copy_to_host(), m, n, m), a.astype(np.float32) @ b.astype(np.float32),
                       atol=1e-3)
    assert "bytes of spill slots" in kernel.resources() and " 0 bytes of spill" not in kernel.resources()


def test_a_handle_launches_on_the_stream_it_is_given():
    handle = blas.create(cuda)
    x, y = cuda.to_device(np.ones(1000, np.float32)), cuda.to_device(np.zeros(1000, np.float32))
    blas.scal(handle, 1000, 1.0, x, 1)                 # loads the code objects first (a copy of its own)
    blas.axpy(handle, 1000, 0.0, x, 1, y, 1)
    stream = cuda.stream()
    handle.set_stream(stream)
    assert handle.get_stream() is stream
    with trace() as t:
        blas.axpy(handle, 1000, 3.0, x, 1, y, 1)
        stream.synchronize()
    assert {e.args["queue"] for e in t.select(2, "packet")} == {stream.queue.queue_id}
    assert np.all(y.copy_to_host() == 3)
    handle.set_stream(None)
    with trace() as t:
        blas.scal(handle, 1000, 2.0, y, 1)
        cuda.synchronize()
    assert stream.queue.queue_id not in {e.args["queue"] for e in t.select(2, "packet")}
    with pytest.raises(TypeError, match="takes a stream"):
        handle.set_stream("stream 1")


@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
@pytest.mark.parametrize("transa,transb", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
def test_a_batch_of_small_products_takes_an_element_per_thread(handle, dtype, transa, transb):
    """Small matrices in a batch (attention's scores of a few tokens): one thread per element of each C_z, in
    every layout, with leading dimensions and batch strides past the matrices, alpha and beta."""
    import ml_dtypes
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    m, n, k, batch = 5, 7, 24, 9
    ra, ca = (k, m) if transa == "T" else (m, k)            # A_z stored column-major ra x ca, op(A_z) m x k
    rb, cb = (n, k) if transb == "T" else (k, n)
    lda, ldb, ldc = ra + 3, rb + 2, m + 1
    stride_a, stride_b, stride_c = lda * ca + 4, ldb * cb + 1, ldc * n + 2
    a = rng.standard_normal(batch * stride_a).astype(dt)
    b = rng.standard_normal(batch * stride_b).astype(dt)
    c = rng.standard_normal(batch * stride_c).astype(np.float32)
    dC = cuda.to_device(c)
    with trace() as t:
        blas.gemm_strided_batched(handle, transa, transb, m, n, k, 1.5, cuda.to_device(a), lda, stride_a,
                                  cuda.to_device(b), ldb, stride_b, 0.5, dC, ldc, stride_c, batch)
        got = dC.copy_to_host()
    assert [e.args["kernel"] for e in t.select(3, "launch")] == ["small_gemm_kernel"]

    def matrix(x, z, stride, ld, rows, cols, trans):
        stored = x[z * stride:z * stride + ld * cols].reshape(cols, ld)[:, :rows].T.astype(np.float64)
        return stored.T if trans == "T" else stored
    for z in range(batch):
        expected = 1.5 * matrix(a, z, stride_a, lda, ra, ca, transa) @ matrix(b, z, stride_b, ldb, rb, cb, transb)
        expected += 0.5 * matrix(c, z, stride_c, ldc, m, n, "N")
        assert np.allclose(matrix(got, z, stride_c, ldc, m, n, "N"), expected, rtol=1e-5, atol=1e-4)
    untouched = np.ones(batch * stride_c, bool)                 # the padding between columns and matrices
    for z in range(batch):
        for j in range(n):
            untouched[z * stride_c + j * ldc:z * stride_c + j * ldc + m] = False
    assert np.array_equal(got[untouched], c[untouched])


def test_a_batched_dot_is_predicted_as_a_small_kernel_not_a_tile_per_item(handle):
    """10,000 dot products of 64 as a batch of 1 x 64 by 64 x 1 products (the PyTorch benchmark recipe's bmm): the
    tiled kernel gave each its 64 x 64 block and was predicted at 169 us on h200; an element per thread takes a few."""
    batch, k = 10000, 64
    x = cuda.to_device(rng.standard_normal(batch * k).astype(np.float32))
    out = cuda.device_array(batch, np.float32)
    with trace() as t:
        blas.gemm_strided_batched(handle, "T", "N", 1, 1, k, 1.0, x, k, k, x, k, k, 0.0, out, 1, 1, batch)
        got = out.copy_to_host()
    flat = x.copy_to_host().reshape(batch, k).astype(np.float64)
    assert np.allclose(got, (flat * flat).sum(1), rtol=1e-5)
    [kernel] = [e.args for e in t.select(0, "kernel")]
    assert kernel["duration_ns"] < 10_000
