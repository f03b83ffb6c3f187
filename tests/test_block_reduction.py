"""Layer 4's block reductions: the tree's exact order of additions, the maximum, and argmax's ties."""

import numpy as np
import pytest

from lapis import cuda
from lapis.libs.reduction import block_argmax, block_reduce


def make_kernel(threads: int):
    SIZE = threads

    def reduce_kernel(x, sums, maxima, best, where):
        s = cuda.shared.array(SIZE, np.float32)
        si = cuda.shared.array(SIZE, np.int64)
        t = cuda.threadIdx.x
        v = x[cuda.blockIdx.x * SIZE + t]
        total = block_reduce(s, t, v, False)
        top = block_reduce(s, t, v, True)                   # the same scratch again, straight away
        value, index = block_argmax(s, si, t, v, t)
        sums[cuda.blockIdx.x * SIZE + t] = total            # every thread gets the results
        maxima[cuda.blockIdx.x * SIZE + t] = top
        if t == 0:
            best[cuda.blockIdx.x] = value
            where[cuda.blockIdx.x] = index
    return reduce_kernel


def tree_sum(v: np.ndarray) -> np.float32:
    """The sum in the tree's order: slot t takes in slot t + stride, the stride halving."""
    v = v.copy()
    stride = len(v) // 2
    while stride:
        v[:stride] = v[:stride] + v[stride:2 * stride]
        stride //= 2
    return v[0]


@pytest.mark.parametrize("threads", [32, 64, 128, 256])
def test_block_reductions_in_a_fixed_tree_order(threads):
    rng = np.random.default_rng(threads)
    blocks = 3
    x = (rng.standard_normal((blocks, threads)) * 10 ** rng.uniform(-3, 3, (blocks, threads))).astype(np.float32)
    x[2] = np.round(x[2])                                    # the last block: ties for the maximum
    x[2, [5, threads - 1]] = x[2].max() + 1
    sums, maxima = cuda.device_array(x.size, np.float32), cuda.device_array(x.size, np.float32)
    best, where = cuda.device_array(blocks, np.float32), cuda.device_array(blocks, np.int64)
    cuda.jit(make_kernel(threads))[blocks, threads](cuda.to_device(x.ravel()), sums, maxima, best, where)
    want = np.array([tree_sum(row) for row in x], np.float32)
    assert np.array_equal(sums.copy_to_host().reshape(x.shape), np.repeat(want[:, None], threads, 1))  # bit for bit
    assert np.array_equal(maxima.copy_to_host().reshape(x.shape), np.repeat(x.max(1)[:, None], threads, 1))
    assert np.array_equal(best.copy_to_host(), x.max(1))
    assert np.array_equal(where.copy_to_host(), x.argmax(1)) and where.copy_to_host()[2] == 5   # the first of ties


@pytest.mark.parametrize("threads, device", [(32, "cuda"), (64, "cuda"), (32, "hip")])
def test_a_sum_over_one_warp_takes_shuffles_only_the_rest_after_the_shared_levels(threads, device):
    # the last five levels of block_reduce are shuffles among threads 0-31 (the same pairs as the tree, so
    # the same bits on a 64-wide device): a block of one warp neither touches shared memory nor waits
    import lapis
    api = getattr(lapis, device)
    SIZE = threads

    def warp_sum(x, out):
        s = api.shared.array(SIZE, np.float32)
        t = api.threadIdx.x
        out[t] = block_reduce(s, t, x[t], False)

    x = np.random.default_rng(7).standard_normal(threads).astype(np.float32) * 1000
    out = api.device_array(threads, np.float32)
    with lapis.trace() as trace:
        api.jit(warp_sum)[1, threads](api.to_device(x), out)
        got = out.copy_to_host()
    assert np.array_equal(got, np.full(threads, tree_sum(x)))
    (kernel,) = trace.select(0, "kernel")
    ran = {text.split()[0] for text, n in zip(kernel.args["per_instruction"]["text"],
                                              kernel.args["per_instruction"]["warp_executions"], strict=True) if n}
    assert "SHFL.DOWN" in ran and "SHFL.IDX" in ran or threads > 32
    assert ("BAR.SYNC" in ran or "BAR" in ran) == (threads > 32)
    assert (kernel.args["shared_wavefronts"] > 0) == (threads > 32)
