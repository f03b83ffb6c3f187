"""Layer 3, compiler: views of arrays inside a kernel, as numba makes them: `a[i]` of a 2-D array (a row), `a[1:]`,
`m[i, :]`, `m[:, j]`, `a[lo:hi:2]`, and views of views.

A view is an `ArrayRef` whose `parent` is the array it views and whose `prefix` holds, for the parent's leading
dimensions, an integer index (the dimension is gone) or a `Span` (the dimension stays, from `start` in steps of
`step`, `length` long); the parent's later dimensions stay whole. Nothing is copied and nothing is computed until
the view is indexed: an element of the view is its parent's element at the indices `parent_indices` maps it to,
and the view's shape (`.shape`, `.size`, `len()`) comes from the spans' lengths and the parent's shape. A slice's
bounds follow Python's rules (negative bounds count from the end, bounds past either end are clipped), computed in
the kernel where they are not constants; its step must be a constant (numba's may vary at run time).
"""

import ast
from dataclasses import dataclass

from lapis.cuda.compiler import ir
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.values import ArrayRef, Const, describe


@dataclass(frozen=True)
class Slice:
    """`lower:upper:step` as written in a subscript: each a value, or None where left out."""
    lower: object
    upper: object
    step: object


@dataclass(frozen=True)
class Span:
    """A dimension a slice keeps: elements start, start + step, ... (`length` of them) of the parent's."""
    start: object
    length: object
    step: int


def view(fe, ref: ArrayRef, items: tuple) -> ArrayRef:
    """ref[items] where items (fewer than ref's dimensions, or some of them slices) leave an array: the view."""
    if len(items) > ref.type.ndim:
        raise fe.error(f"array {ref.name!r} has {ref.type.ndim} dimension(s) but is indexed with {len(items)}")
    sizes = shape(fe, ref)
    prefix = []
    for item, size in zip(items, sizes, strict=False):
        if isinstance(item, Slice):
            prefix.append(_span(fe, item, size))
        elif isinstance(item, Const | ir.Value) and getattr(fe.typeof(item), "kind", "int") != "float":
            prefix.append(item)
        else:
            raise fe.error(f"array index must be an integer or a slice, not {describe(item)}")
    t = ref.type
    kept = sum(isinstance(p, Span) for p in prefix) + t.ndim - len(prefix)
    whole_rows = all(isinstance(p, Const | ir.Value) for p in prefix)      # a[i]: the rest, contiguous as a is
    layout = "C" if whole_rows and t.layout == "C" else "A"
    static = t.shape[len(prefix):] if whole_rows and t.shape is not None else None
    return ArrayRef(ref.name, T.ArrayType(t.dtype, kept, layout, t.space, static), ref.param_offset, ref.base,
                    tuple(prefix), ref)


def shape(fe, ref: ArrayRef) -> tuple:
    """The array's shape: constants where it has a static one, else values read or computed in the kernel."""
    if ref.parent is not None:
        parent = shape(fe, ref.parent)
        return tuple(p.length for p in ref.prefix if isinstance(p, Span)) + parent[len(ref.prefix):]
    if ref.type.shape is not None:
        return tuple(Const(s, T.WEAK_INT) for s in ref.type.shape)
    return tuple(fe.param(ref.param_offset + 8 + 8 * k, T.int64) for k in range(ref.type.ndim))


def parent_indices(fe, ref: ArrayRef, items: list) -> tuple:
    """The indices into the view's parent of the view's element `items`."""
    rest = iter(items)
    mapped = [p if not isinstance(p, Span) else
              fe.binop(Op.ADD, p.start, fe.binop(Op.MUL, next(rest), Const(p.step, T.WEAK_INT)))
              for p in ref.prefix]
    return (*mapped, *rest)


def _span(fe, s: Slice, size) -> Span:
    """The dimension a slice of a dimension of `size` elements keeps, by Python's slice rules."""
    step = 1 if s.step is None else s.step
    if isinstance(step, Const) and isinstance(step.value, int):
        step = step.value
    if not isinstance(step, int):
        raise fe.error("a slice's step must be a constant integer in a kernel")
    if step == 0:
        raise fe.error("slice step cannot be zero")
    zero, none = Const(0, T.WEAK_INT), Const(-1, T.WEAK_INT)
    last = fe.binop(Op.SUB, size, Const(1, T.WEAK_INT))
    low, high = (zero, size) if step > 0 else (none, last)          # where a bound is clipped to
    start = (zero if step > 0 else last) if s.lower is None else _clip(fe, _from_end(fe, s.lower, size), low, high)
    stop = (size if step > 0 else none) if s.upper is None else _clip(fe, _from_end(fe, s.upper, size), low, high)
    distance = fe.binop(Op.SUB, stop, start) if step > 0 else fe.binop(Op.SUB, start, stop)
    if abs(step) > 1:
        distance = fe.arith(ast.FloorDiv(), fe.binop(Op.ADD, distance, Const(abs(step) - 1, T.WEAK_INT)),
                            Const(abs(step), T.WEAK_INT))
    return Span(start, fe.binop(Op.MAX, distance, zero), step)


def _from_end(fe, bound, size):
    """A slice bound as Python reads it: a negative one counts from the end."""
    if not isinstance(bound, Const | ir.Value) or getattr(fe.typeof(bound), "kind", "int") == "float":
        raise fe.error(f"slice indices must be integers, not {describe(bound)}")
    if isinstance(bound, Const):
        return bound if bound.value >= 0 else fe.binop(Op.ADD, bound, size)
    t = T.int64
    negative = fe.compare("lt", bound, Const(0, T.WEAK_INT))
    return fe.emit(Op.SELECT, t, [negative, fe.materialize(fe.binop(Op.ADD, bound, size), t),
                                  fe.materialize(bound, t)])


def _clip(fe, bound, low, high):
    return fe.binop(Op.MIN, fe.binop(Op.MAX, bound, low), high)
