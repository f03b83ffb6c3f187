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


@pytest.mark.parametrize("threads", [64, 128, 256])
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
