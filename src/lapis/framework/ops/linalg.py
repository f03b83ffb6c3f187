"""Layer 5: matrix products: `matmul` with torch's rules for 1-D and batched operands, `mm`, `bmm`. A 2-D product
is one BLAS gemm (cuBLAS's place, `lapis.libs.blas`) and a batched one one strided-batched gemm; transposed views
are read in place, as the operands of attention's `q @ k.mT` are."""

import math

from lapis import trace
from lapis.framework import amp, backend
from lapis.framework.autograd import Function
from lapis.framework.ops.common import broadcast_shapes, check_devices, new
from lapis.framework.tensor_base import TensorBase


def _blas_ready(x: TensorBase) -> TensorBase:
    """x itself when BLAS can read it (row-major, or a transposed row-major view), else a contiguous copy."""
    return x if x.is_contiguous() or x.t().is_contiguous() else x._contiguous()


def _mm(a: TensorBase, b: TensorBase) -> TensorBase:
    """(m, k) @ (k, n) in the operands' dtype."""
    out = new((a.shape[0], b.shape[1]), a.dtype, a.device)
    backend.matmul(_blas_ready(a)._data, _blas_ready(b)._data, out._data)
    return out


class MatMul(Function):
    """2-D @ 2-D; matmul() reduces 1-D operands, and batches times one matrix, to this."""
    node_name = "MmBackward0"

    @staticmethod
    def forward(ctx, a: TensorBase, b: TensorBase):
        ctx.save_for_backward(a, b)
        return _mm(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (_product_like(a, g, b.t()) if ctx.needs_input_grad[0] else None,
                _product_like(b, a.t(), g) if ctx.needs_input_grad[1] else None)


class AddMm(Function):
    """bias + a @ b for a (m, k), b (k, n) and bias (n,): one gemm whose kernel adds the bias as it writes C
    (cuBLASLt's bias epilogue, which torch's addmm takes for a linear layer), where a GPU gemm of a bias,
    a and b of one float32 dtype runs; on the cpu a matmul and an add."""
    node_name = "AddmmBackward0"

    @staticmethod
    def forward(ctx, bias: TensorBase, a: TensorBase, b: TensorBase):
        ctx.save_for_backward(a, b)
        out = new((a.shape[0], b.shape[1]), a.dtype, a.device)
        backend.matmul(_blas_ready(a)._data, _blas_ready(b)._data, out._data, bias._contiguous()._data)
        return out

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (g.sum(0) if ctx.needs_input_grad[0] else None,
                _product_like(a, g, b.t()) if ctx.needs_input_grad[1] else None,
                _product_like(b, a.t(), g) if ctx.needs_input_grad[2] else None)


def linear(x: TensorBase, weight: TensorBase, bias: TensorBase) -> TensorBase | None:
    """torch's linear with a bias where it is one addmm: x (..., in) folded to rows, one gemm with the bias
    added in its kernel, unfolded to (..., out); None where it is not (other dtypes, a bias that broadcasts
    otherwise), for the caller's matmul and add."""
    float32 = x.dtype is weight.dtype is bias.dtype and x.dtype.name == "float32"
    if not float32 or x.ndim < 1 or weight.ndim != 2 or bias.shape != (weight.shape[0],) or \
            x.shape[-1] != weight.shape[1] or not x.device == weight.device == bias.device:
        return None
    with trace.lazy_span(5, "linear", lambda: dict(x_shape=list(x.shape), weight_shape=list(weight.shape),
                                                   device=str(x.device))):
        rows = x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x
        out = AddMm.apply(bias, rows, weight.t())
        return out.reshape(*x.shape[:-1], weight.shape[0]) if x.ndim != 2 else out


def _product_like(x: TensorBase, p: TensorBase, q: TensorBase) -> TensorBase:
    """p @ q, the gradient of x, laid out as x is: for a transposed view x (linear's weight.t()) it is
    computed as (q.T @ p.T).T, so that the weight's gradient comes out row-major, as the weight is, and is
    stored without a copy (torch's mm_mat1_backward and mm_mat2_backward do the same)."""
    if not x.is_contiguous() and x.t().is_contiguous():
        return matmul(q.t(), p.t()).t()
    return matmul(p, q)


def _bmm_ready(x: TensorBase) -> TensorBase:
    """x (B, r, c) itself when BLAS can read it in place (a dense batch of row-major or transposed matrices,
    or one matrix broadcast over the batch: the backend's rule), else a contiguous copy."""
    return x if backend.batch_layout(x._data) is not None else x._contiguous()


class BatchedMatMul(Function):
    """(B, m, k) @ (B, k, n): one strided-batched gemm on a GPU, whose operands may be transposed views."""
    node_name = "BmmBackward0"

    @staticmethod
    def forward(ctx, a: TensorBase, b: TensorBase):
        ctx.save_for_backward(a, b)
        out = new((a.shape[0], a.shape[1], b.shape[2]), a.dtype, a.device)
        backend.bmm(_bmm_ready(a)._data, _bmm_ready(b)._data, out._data)
        return out

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        da = BatchedMatMul.apply(g, b.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        db = BatchedMatMul.apply(a.transpose(1, 2), g) if ctx.needs_input_grad[1] else None
        return da, db


def matmul(a: TensorBase, b: TensorBase) -> TensorBase:
    """torch.matmul: 1-D operands gain and lose a dimension; batch dimensions broadcast."""
    if not isinstance(a, TensorBase) or not isinstance(b, TensorBase):
        raise TypeError(f"matmul(): arguments must be TensorBases, not {type(a).__name__} and {type(b).__name__}")
    check_devices(a, b)
    a, b = amp.lower(a, b)
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype.name} != {b.dtype.name}")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(1) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        m, k = a2.shape[-2:]
        k2, n = b2.shape[-2:]
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n})")
    with trace.lazy_span(5, "matmul", lambda: dict(a_shape=list(a.shape), b_shape=list(b.shape),
                                                   dtype=str(a.dtype), device=str(a.device))) as info:
        if a2.ndim == 2 and b2.ndim == 2:
            out = MatMul.apply(a2, b2)
        elif b2.ndim == 2:                     # (..., m, k) @ (k, n): the batch folds into the rows
            out = MatMul.apply(a2.reshape(-1, a2.shape[-1]), b2).reshape(*a2.shape[:-1], b2.shape[-1])
        elif a2.ndim == 3 and b2.ndim == 3 and a2.shape[0] == b2.shape[0]:    # bmm's shapes: no reshaping
            out = BatchedMatMul.apply(a2, b2)
        else:
            batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
            count = math.prod(batch)
            a3 = a2.expand(*batch, *a2.shape[-2:]).reshape(count, *a2.shape[-2:])
            b3 = b2.expand(*batch, *b2.shape[-2:]).reshape(count, *b2.shape[-2:])
            out = BatchedMatMul.apply(a3, b3).reshape(*batch, a2.shape[-2], b2.shape[-1])
        if a.ndim == 1:
            out = out.squeeze(-2)
        if b.ndim == 1:
            out = out.squeeze(-1)
        info.update(out_shape=list(out.shape))
    return out


def mm(a: TensorBase, b: TensorBase) -> TensorBase:
    """torch.mm: 2-D operands only."""
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"{'self' if a.ndim != 2 else 'mat2'} must be a matrix")
    return matmul(a, b)


def bmm(a: TensorBase, b: TensorBase) -> TensorBase:
    """torch.bmm: (B, m, k) @ (B, k, n), no broadcasting."""
    for name, x in (("batch1", a), ("batch2", b)):
        if x.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{a.shape[0]}, "
                           f"{a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}].")
    return matmul(a, b)


def einsum(equation: str, *operands) -> TensorBase:
    """torch.einsum for subscripts of letters without ellipsis: a letter repeated within one operand first takes
    that operand's diagonal over its dimensions (torch.diagonal: "ii->i", "ii" a trace); then each operand sums
    the letters no one else needs, and pairs contract left to right as one batched matrix product (batch
    letters, the left's own, the contracted, the right's own), so the work is matmul's."""
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if "." in equation or len(terms) != len(operands):
        raise NotImplementedError(f"einsum {equation!r}: one subscript per operand, without '...', is supported")
    if not arrow:                                   # implicit output: the letters that appear once, in order
        output = "".join(sorted(c for c in set(inputs) if inputs.count(c) == 1 and c.isalpha()))
    for c in output:
        if output.count(c) > 1:
            raise RuntimeError(f"einsum(): output subscript {c} appears more than once in the output")
    pairs = []
    for k, (term, x) in enumerate(zip(terms, operands, strict=True)):
        if len(term) != x.ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(term)}) does not match the "
                               f"number of dimensions ({x.ndim}) for operand {k} and no ellipsis was given")
        pairs.append(_einsum_diagonal(term, x, k))
    term, x = _einsum_keep(*pairs[0], "".join(t for t, _ in pairs[1:]) + output)
    for k in range(1, len(pairs)):
        later = "".join(t for t, _ in pairs[k + 1:]) + output
        other, y = _einsum_keep(*pairs[k], term + later)
        term, x = _einsum_pair(term, x, other, y, later)
    return x.permute(*(term.index(c) for c in output)) if term != output else x


def _einsum_diagonal(term: str, x: TensorBase, k: int) -> tuple[str, TensorBase]:
    """An operand whose subscript repeats a letter, as the diagonal over each repeated pair of its dimensions (a
    view, the letter moved last, as torch.diagonal puts it), until each letter names one dimension."""
    for c in term:
        while term.count(c) > 1:
            i = term.index(c)
            j = term.index(c, i + 1)
            if x.shape[i] != x.shape[j]:
                raise RuntimeError(f"einsum(): subscript {c} is repeated for operand {k} but the sizes don't match, "
                                   f"{x.shape[j]} != {x.shape[i]}")
            x = x.diagonal(0, i, j)
            term = term[:i] + term[i + 1:j] + term[j + 1:] + c
    return term, x


def _einsum_keep(term: str, x: TensorBase, needed: str) -> tuple[str, TensorBase]:
    """x summed over the letters of `term` that `needed` lacks."""
    gone = [d for d, c in enumerate(term) if c not in needed]
    if not gone:
        return term, x
    return "".join(c for c in term if c in needed), x.sum(gone)


def _einsum_pair(a_term: str, a: TensorBase, b_term: str, b: TensorBase, later: str) -> tuple[str, TensorBase]:
    """The product of two operands contracted over the letters they share that `later` does not need."""
    batch = [c for c in a_term if c in b_term and c in later]
    shared = [c for c in a_term if c in b_term and c not in later]
    a_own, b_own = [c for c in a_term if c not in b_term], [c for c in b_term if c not in a_term]
    a_size, b_size = dict(zip(a_term, a.shape, strict=True)), dict(zip(b_term, b.shape, strict=True))
    for c in batch + shared:
        if a_size[c] != b_size[c]:
            raise RuntimeError(f"einsum(): subscript {c} has sizes {a_size[c]} and {b_size[c]} that do not match")
    size = {**a_size, **b_size}

    def prod(letters) -> int:
        n = 1
        for c in letters:
            n *= size[c]
        return n
    left = a.permute(*(a_term.index(c) for c in batch + a_own + shared)).reshape(prod(batch), prod(a_own),
                                                                                prod(shared))
    right = b.permute(*(b_term.index(c) for c in batch + shared + b_own)).reshape(prod(batch), prod(shared),
                                                                                 prod(b_own))
    out = matmul(left, right).reshape(*(size[c] for c in batch + a_own + b_own))
    return "".join(batch + a_own + b_own), out


def outer(a: TensorBase, b: TensorBase) -> TensorBase:
    """torch.outer of two 1-D tensors: (n,) and (m,) -> (n, m), a broadcast product."""
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError("outer: expected 1D tensors")
    return a.unsqueeze(1) * b.unsqueeze(0)
