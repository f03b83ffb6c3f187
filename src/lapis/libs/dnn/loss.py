"""Layer 4, DNN: the negative log-likelihood loss, forward and backward, one kernel each way.

Cross entropy is log-softmax (`activation.softmax_forward`) then this: PyTorch launches the same two
kernels. The forward reduces in one block of ROW_THREADS threads (a fixed tree, so the sum is
deterministic), which is right for the batch sizes of classification losses; `reduction` "none"
gives each row its own loss instead. A target outside 0..C-1 (other than `ignore_index`) stops the
kernel with a device-side assert, as PyTorch's CUDA kernel does (reported at the next synchronisation);
the framework's cpu path raises PyTorch's IndexError.
"""

import numpy as np

from lapis import cuda, trace
from lapis.cuda import float32, shared, threadIdx
from lapis.libs.dnn.descriptors import DnnError
from lapis.libs.dnn.handle import ROW_THREADS, THREADS, Handle, _blocks, _flat
from lapis.libs.reduction import block_reduce

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def nll_forward_kernel(rows, cols, ignore_index, reduction, logp, target, out, kept_rows):
    # reduction none: out[i] = -logp[i, target[i]] (0 where ignored); mean and sum: out[0] = the sum over
    # kept rows (divided by their count for mean); kept_rows[0] = that count
    s = shared.array(128, np.float32)
    t = threadIdx.x
    total = float32(0.0)
    kept = float32(0.0)
    for i in range(t, rows, 128):
        c = target[i]
        loss = float32(0.0)
        if c != ignore_index:
            assert c >= 0 and c < cols, "Target out of bounds"       # a device-side assert, as ATen's
            loss = -logp[i * cols + c]
            kept += 1.0
        if reduction == 0:
            out[i] = loss
        total += loss
    if reduction != 0:
        total = block_reduce(s, t, total, False)
        kept = block_reduce(s, t, kept, False)
        if t == 0:
            out[0] = total / kept if reduction == 1 else total
            kept_rows[0] = kept


def nll_backward_kernel(rows, cols, ignore_index, reduction, target, dloss, kept_rows, dlogp):
    # dlogp[i, c] = -(the loss's gradient for row i) where c == target[i], else 0
    k = cuda.grid(1)
    while k < rows * cols:
        i = k // cols
        c = target[i]
        grad = float32(0.0)
        if c == k - i * cols and c != ignore_index:
            if reduction == 0:
                grad = -dloss[i]
            elif reduction == 1:
                grad = -dloss[0] / kept_rows[0]
            else:
                grad = -dloss[0]
        dlogp[k] = grad
        k += cuda.gridsize(1)


def nll_loss_forward(handle: Handle, logp, target, ignore_index: int, reduction: str, out, kept_rows) -> None:
    """The loss of log-probabilities `logp` (N, C) float32 at class indices `target` (N,) int64 into
    `out`: (N,) for reduction "none", else one value, the mean or sum over the kept rows (those whose
    target is not `ignore_index`), whose count goes to `kept_rows` (one float)."""
    rows, cols = _shape(logp, target, reduction)
    flogp, ftarget = _flat(logp, "logp"), _flat(target, "target", rows, np.int64)
    fout, fkept = _flat(out, "out", rows if reduction == "none" else 1), _flat(kept_rows, "kept_rows", 1)
    with trace.span(4, "nll_loss_forward", rows=rows, cols=cols, reduction=reduction):
        handle.kernel(nll_forward_kernel)[1, ROW_THREADS, handle.stream](
            np.int64(rows), np.int64(cols), np.int64(ignore_index), np.int32(REDUCTIONS[reduction]), flogp,
            ftarget, fout, fkept)


def nll_loss_backward(handle: Handle, target, ignore_index: int, reduction: str, dloss, kept_rows, dlogp) -> None:
    """dlogp (N, C) from the loss's gradient `dloss` ((N,) for "none", else one value) and the
    forward's `kept_rows`."""
    rows, cols = _shape(dlogp, target, reduction)
    ftarget = _flat(target, "target", rows, np.int64)
    fdloss = _flat(dloss, "dloss", rows if reduction == "none" else 1)
    fkept, fdlogp = _flat(kept_rows, "kept_rows", 1), _flat(dlogp, "dlogp", rows * cols)
    with trace.span(4, "nll_loss_backward", rows=rows, cols=cols, reduction=reduction):
        if rows * cols:
            handle.kernel(nll_backward_kernel)[_blocks(rows * cols), THREADS, handle.stream](
                np.int64(rows), np.int64(cols), np.int64(ignore_index), np.int32(REDUCTIONS[reduction]),
                ftarget, fdloss, fkept, fdlogp)


def _shape(x, target, reduction: str) -> tuple[int, int]:
    if reduction not in REDUCTIONS:
        raise DnnError(f"reduction must be one of {', '.join(REDUCTIONS)}, not {reduction!r}")
    if x.ndim != 2 or target.ndim != 1 or target.shape[0] != x.shape[0]:
        raise DnnError(f"the loss takes (N, C) log-probabilities and (N,) targets, not {x.shape} and {target.shape}")
    return x.shape
