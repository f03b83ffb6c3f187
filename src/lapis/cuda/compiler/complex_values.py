"""Layer 3 compiler: complex numbers in kernels (numba's complex64 and complex128), lowered in the frontend as pairs
of floats.

While the frontend compiles, a complex number is a `values.Complex`: its real and imaginary parts, each a float
value (an `ir.Value` or a `Const`) of the component type (float32 for complex64, float64 for complex128), and its
type. The IR, the ISA and the register allocator never see a complex type, as they never see a tuple (the frontend
keeps a tuple of numbers as one variable per element):

- a complex variable `z` is two float variables, `z$re` and `z$im`; `var_types['z']` holds its complex type, so
  it widens (complex64 to complex128, or a float variable to a complex one) as any variable does, by a restart;
- an element of a complex array is two consecutive floats (8 or 16 bytes an element: `Frontend.address(ref, index,
  part)` addresses a part), an element of a local array kept in registers two slots;
- a complex kernel argument is its two floats in the kernarg segment, aligned as its parts (`kernarg_layout`);
- `+ - *` and `==`/`!=` work on the parts as written out; `/` is Smith's algorithm, `z ** n` for an integer constant
  n multiplies (numpy's way, so `z ** 2` is `z * z`), other powers, `abs` and `cmath`'s functions are the device
  functions of `lapis.cuda.libdevice_complex` (numba's algorithms), inlined with the parts, so they compute in the
  component type on libdevice's float math.

Types follow numba (`types.unify`): float32 (or a narrower number) with complex64 is complex64, float64 or an
int32/int64 with complex64 complex128; `complex(x, y)` of float32s is complex64; `.real`, `.imag`, `abs(z)` and
`cmath.phase(z)` are of the component type. As everywhere in lapis, a literal is weak: `1j` alone is complex128
(numba's type), but `z * 2j` and `z ** 2` of a complex64 z stay complex64 (numba's are complex128). A complex is
refused where numba refuses it, with the line: stored into a real array, used as an index, ordered (`<`), or given
to `int()`, `float()`, `math`'s functions or `//` and `%`.
"""

import ast
import cmath
import math
import operator
from dataclasses import dataclass

import numpy as np

from lapis.cuda import libdevice_complex as lib
from lapis.cuda.compiler import ir
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.values import Complex, Const, cast_constant, describe

# the largest part sqrt may square without overflow: the parts' largest float / (1 + sqrt 2) (numba's THRES)
_SQRT_BIG = {T.float32: float(np.finfo(np.float32).max) / (1 + math.sqrt(2.0)),
             T.float64: float(np.finfo(np.float64).max) / (1 + math.sqrt(2.0))}
_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
POWER_LIMIT = 100              # z ** n multiplies out for |n| below this (numpy's npy_cpow), else goes polar


@dataclass(frozen=True)
class Method:
    """A number's method, named in a call (`z.conjugate()`)."""
    name: str
    value: object


# -- values and types -------------------------------------------------------------------------------------------------
def constant(value, t=T.WEAK_COMPLEX) -> Complex:
    """A complex known when compiling (a literal, a global, a folded expression), of type t."""
    value = complex(value)
    c = T.component(t)
    if isinstance(c, T.Weak):
        return Complex(Const(value.real, c), Const(value.imag, c), t)
    return Complex(Const(cast_constant(value.real, c), c), Const(cast_constant(value.imag, c), c), t)


def type_of(fe, x):
    """The type of a number or a complex (a CompileError naming x for anything else)."""
    return x.type if isinstance(x, Complex) else fe.typeof(x)


def _is_constant(*values) -> bool:
    return all(isinstance(p, Const) for z in values for p in ((z.re, z.im) if isinstance(z, Complex) else (z,)))


def _value(x) -> complex:
    return complex(x.re.value, x.im.value) if isinstance(x, Complex) else x.value


def promote(fe, x, t) -> Complex:
    """x, a number or a complex, as a complex of type t: its parts converted to t's component type (numba converts a
    real number to a complex with a zero imaginary part, and computes with that)."""
    if isinstance(x, Complex):
        re, im = x.re, x.im
    elif isinstance(x, Const | ir.Value) and getattr(fe.typeof(x), "kind", "int") != "vector":
        re, im = x, Const(0.0, T.WEAK_FLOAT)
    else:
        raise fe.error(f"{describe(x)} is not a number")
    c = T.component(t)
    if isinstance(c, T.Weak):                    # constants only: fold them
        return Complex(re, im, t)
    return Complex(fe.cast(re, c), fe.cast(im, c), t)


def _parts(fe, z: Complex) -> list:
    """The parts as device-function arguments: run-time values always (a constant part would fold there, and a
    constant zero divisor is an error in a constant expression)."""
    c = T.component(z.type)
    return [fe.materialize(p, c) for p in (z.re, z.im)]


def _result(fe, parts, t) -> Complex:
    c = T.component(t)
    return Complex(fe.cast(parts[0], c), fe.cast(parts[1], c), t)


# -- arithmetic -----------------------------------------------------------------------------------------------------
def arith(fe, op: ast.operator, a, b):
    """a <op> b where a or b is complex: + - * / **."""
    if isinstance(op, ast.Pow):
        return power(fe, a, b)
    fn = _ARITH.get(type(op))
    if fn is None:
        raise fe.error(f"unsupported operator {type(op).__name__} on complex numbers (kernels, as numba, have + - * / "
                       "and ** for them)")
    t = T.unify(type_of(fe, a), type_of(fe, b))
    if _is_constant(a, b):
        folded = _fold(fn, t, _value(a), _value(b))
        if folded is not None:
            return folded
    t = T.concrete(t)
    a, b = promote(fe, a, t), promote(fe, b, t)
    if fn is operator.add or fn is operator.sub:
        op_ = Op.ADD if fn is operator.add else Op.SUB
        return Complex(fe.binop(op_, a.re, b.re), fe.binop(op_, a.im, b.im), t)
    if fn is operator.mul:
        return multiply(fe, a, b)
    return divide(fe, a, b)


def multiply(fe, a: Complex, b: Complex) -> Complex:
    re = fe.binop(Op.SUB, fe.binop(Op.MUL, a.re, b.re), fe.binop(Op.MUL, a.im, b.im))
    im = fe.binop(Op.ADD, fe.binop(Op.MUL, a.re, b.im), fe.binop(Op.MUL, a.im, b.re))
    return Complex(re, im, a.type)


def divide(fe, a: Complex, b: Complex) -> Complex:
    return _result(fe, fe.inline(lib.div, _parts(fe, a) + _parts(fe, b)), a.type)


def _fold(fn, t, *values):
    """fn of constants, computed now (in complex128, then rounded to t's parts); None where Python refuses (a zero
    divisor): the device then computes it, as numpy would."""
    try:
        value = fn(*values)
    except (ZeroDivisionError, OverflowError, ValueError):
        return None
    if isinstance(value, tuple):
        c = T.component(t)
        return tuple(Const(v if isinstance(c, T.Weak) else cast_constant(v, c), c) for v in value)
    if isinstance(value, bool):
        return Const(value, T.boolean)
    if isinstance(value, float) and not isinstance(t, T.Weak) and T.component(t) != t:
        return Const(cast_constant(value, T.component(t)), T.component(t))
    if isinstance(value, float):
        return Const(value, T.component(t))
    return constant(value, t)


def _integer_exponent(b):
    """b's value if it is a constant integer (an int, an integral float, or a complex of those with no imaginary
    part), else None."""
    value = _value(b) if _is_constant(b) else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, complex):
        if value.imag != 0:
            return None
        value = value.real
    if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
        return None
    return int(value) if abs(value) < POWER_LIMIT else None


def power(fe, a, b):
    """a ** b with a or b complex. An integer constant exponent multiplies out by squaring, and a negative one then
    divides 1 by that (numpy's npy_cpow: z ** 2 is z * z); any other is the polar form (numba's cpow)."""
    t = T.unify(type_of(fe, a), type_of(fe, b))
    if _is_constant(a, b):
        folded = _fold(operator.pow, t, _value(a), _value(b))
        if folded is not None:
            return folded
    t = T.concrete(t)
    n = _integer_exponent(b)
    a = promote(fe, a, t)
    if n is not None:
        c = T.component(t)
        one = Complex(Const(1.0, c), Const(0.0, c), t)
        result, square, k = None, a, abs(n)
        while k:
            if k & 1:
                result = square if result is None else multiply(fe, result, square)
            k >>= 1
            if k:
                square = multiply(fe, square, square)
        if result is None:
            return one
        return divide(fe, one, result) if n < 0 else result
    b = promote(fe, b, t)
    return _result(fe, fe.inline(lib.power, _parts(fe, a) + _parts(fe, b)), t)


def negate(fe, z: Complex) -> Complex:
    return Complex(fe.neg(z.re), fe.neg(z.im), z.type)


def compare(fe, op: str, a, b):
    """a == b or a != b with a or b complex: both parts equal (numba has no order of complex numbers)."""
    if op not in ("eq", "ne"):
        raise fe.error("complex numbers have no order: compare them with == or != (or compare abs(z), z.real or "
                       "z.imag)")
    t = T.unify(type_of(fe, a), type_of(fe, b))
    if not _is_constant(a, b):
        t = T.concrete(t)
    a, b = promote(fe, a, t), promote(fe, b, t)
    if op == "eq":
        return fe.logical(Op.AND, fe.compare("eq", a.re, b.re), fe.compare("eq", a.im, b.im))
    return fe.logical(Op.OR, fe.compare("ne", a.re, b.re), fe.compare("ne", a.im, b.im))


def truth(fe, z: Complex):
    """bool(z): whether either part is nonzero."""
    zero = Const(0, T.WEAK_INT)
    return fe.logical(Op.OR, fe.compare("ne", z.re, zero), fe.compare("ne", z.im, zero))


# -- attributes and methods -----------------------------------------------------------------------------------------
def attribute(fe, base, attr: str):
    """z.real, z.imag and z.conjugate of a complex or a real number (numba has them on every number: x.real is x,
    x.imag a zero of x's type, x.conjugate() x)."""
    if attr == "conjugate":
        return Method(attr, base)
    if isinstance(base, Complex):
        if attr == "real":
            return base.re
        if attr == "imag":
            return base.im
        raise fe.error(f"a complex number has .real, .imag and .conjugate(), not .{attr}")
    if attr == "real":
        return base
    t = fe.typeof(base)
    return Const(0, t) if isinstance(t, T.Weak) else Const(cast_constant(0, t), t)


def call_method(fe, method: Method, args: list):
    if args:
        raise fe.error(f"{method.name}() takes no arguments")
    z = method.value
    return Complex(z.re, fe.neg(z.im), z.type) if isinstance(z, Complex) else z


# -- variables, arguments and array elements -------------------------------------------------------------------------
def assign(fe, name: str, value) -> None:
    """name = value where the value or the variable is complex: the variable's two parts (`write`), the variable
    widened where the value needs it (a complex128 into a complex64 variable, a complex into a float one)."""
    if not isinstance(value, Complex | Const | ir.Value):
        raise fe.error(f"{name!r} is a complex variable and cannot be bound to {describe(value)}")
    fe.static.pop(name, None)
    t = type_of(fe, value)
    hint = fe.var_types.get(name)
    if hint is None:
        hint = fe.var_types[name] = T.concrete(t)
    elif not T.can_hold(hint, t):
        fe.widen(name, T.concrete(T.unify(hint, t)))
    write(fe, name, promote(fe, value, hint))


def write(fe, name: str, z: Complex) -> None:
    """Assign the parts of z (a complex of the variable's type) to name's two part variables."""
    c = T.component(z.type)
    for part, value in (("re", z.re), ("im", z.im)):
        fe.var_types[f"{name}${part}"] = c
        fe.write(f"{name}${part}", fe.current, fe.materialize(value, c))


def read(fe, name: str) -> Complex:
    """The complex variable name, from its two part variables (zeros where it was never assigned)."""
    t = fe.var_types[name]
    c = T.component(t)
    parts = []
    for part in ("re", "im"):
        fe.var_types.setdefault(f"{name}${part}", c)
        parts.append(fe.read(f"{name}${part}", fe.current))
    return Complex(*parts, t)


def param(fe, offset: int, t) -> Complex:
    """A complex kernel argument: its two floats at the kernarg offset."""
    c = T.component(t)
    return Complex(fe.param(offset, c), fe.param(offset + c.itemsize, c), t)


def load(fe, ref, index, space: str) -> Complex:
    """An element of a complex array: its two floats."""
    t = ref.type.dtype
    if ref.type.space == "local":                      # a local array in registers: two slots an element
        return read(fe, fe.local_slot(ref, index))
    c = T.component(t)
    return Complex(*(fe.emit(Op.LOAD, c, [fe.address(ref, index, part)], space=space) for part in (0, 1)), t)


def store(fe, ref, index, value, space: str) -> None:
    """array[index] = value into a complex array: a real number gets a zero imaginary part, a complex128 into a
    complex64 array is rounded (numba converts both)."""
    t = ref.type.dtype
    if not isinstance(value, Complex | Const | ir.Value):
        raise fe.error(f"cannot store {describe(value)} into an array")
    z = promote(fe, value, t)
    if ref.type.space == "local":
        write(fe, fe.local_slot(ref, index), z)
        return
    c = T.component(t)
    for part, v in enumerate((z.re, z.im)):
        fe.emit(Op.STORE, None, [fe.address(ref, index, part), fe.materialize(v, c)], space=space)


def refuse(fe, value: Complex, where: str):
    """The error for a complex where a real number is needed."""
    return fe.error(f"cannot use {describe(value)} {where}: a complex number does not convert to a real one (take "
                    ".real, .imag or abs() of it)")


# -- calls: complex(), np.complex64(), abs(), cmath ------------------------------------------------------------------
def construct(fe, args: list):
    """complex(), complex(x) and complex(re, im), typed as numba types them: complex(x) of a float32 is complex64,
    of an integer or a float64 complex128, and complex(z) of a complex is complex128."""
    if not args:
        return constant(0j)
    if len(args) == 1:
        x = args[0]
        if isinstance(x, Complex):
            return promote(fe, x, T.WEAK_COMPLEX if isinstance(x.type, T.Weak) else T.complex128)
        return promote(fe, x, T.complex_of(fe.typeof(x)))
    re, im = args
    if isinstance(re, Complex) or isinstance(im, Complex):
        raise fe.error("complex(real, imag) in a kernel takes two real numbers")
    t = T.complex_of(T.unify(fe.typeof(re), fe.typeof(im)))
    return Complex(re, im, t) if isinstance(t, T.Weak) else Complex(fe.cast(re, T.component(t)),
                                                                     fe.cast(im, T.component(t)), t)


def convert(fe, x, t) -> Complex:
    """np.complex64(x), np.complex128(x): x (a number or a complex) converted to t."""
    return promote(fe, x, t)


def absolute(fe, z: Complex):
    """abs(z): |z|, the hypotenuse of the parts, without overflow (libdevice's hypot), of the component type."""
    if _is_constant(z):
        return Const(abs(_value(z)), T.component(z.type))
    t = T.concrete(z.type)
    z = promote(fe, z, t)
    return fe.cast(fe.inline(lib.absolute, _parts(fe, z)), T.component(t))


# cmath's functions kernels may call: name -> (device function, extra arguments it takes)
CMATH = {"exp": (lib.exp, ()), "log": (lib.log, ()), "log10": (lib.log10, ()), "sqrt": (lib.sqrt, ("big",)),
         "sin": (lib.sin, ()), "cos": (lib.cos, ()), "tan": (lib.tan, ("one",)), "sinh": (lib.sinh, ()),
         "cosh": (lib.cosh, ()), "tanh": (lib.tanh, ("one",)), "asin": (lib.asin, ("one", "big")),
         "acos": (lib.acos, ("one", "big")), "atan": (lib.atan, ("one",)), "asinh": (lib.asinh, ("one", "big")),
         "acosh": (lib.acosh, ("one", "big")), "atanh": (lib.atanh, ("one",)), "phase": (lib.phase, ()),
         "polar": (lib.polar, ()), "isnan": (lib.isnan, ()), "isinf": (lib.isinf, ()),
         "isfinite": (lib.isfinite, ())}


def cmath_call(fe, name: str, args: list):
    """cmath.<name>(z) (or cmath.log(z, base), cmath.rect(r, phi)) for a complex or real z, in z's complex type (a
    real argument's: complex64 for a float32, complex128 for an integer): folded when z is a constant, else
    libdevice_complex's function inlined with the parts."""
    if name == "rect":
        return _rect(fe, *args)
    if name == "log" and len(args) == 2:
        return arith(fe, ast.Div(), cmath_call(fe, "log", args[:1]), cmath_call(fe, "log", args[1:]))
    (z,) = args
    t = z.type if isinstance(z, Complex) else T.complex_of(fe.typeof(z))
    if _is_constant(z):
        folded = _fold(getattr(cmath, name), t, complex(_value(z)))
        if folded is not None:
            return folded
    t = T.concrete(t)
    c = T.component(t)
    z = promote(fe, z, t)
    fn, extras = CMATH[name]
    extra = [Const(1.0, c) if e == "one" else Const(cast_constant(_SQRT_BIG[c], c), c) for e in extras]
    result = fe.inline(fn, _parts(fe, z) + extra)
    if name in ("isnan", "isinf", "isfinite"):
        return result
    if name == "phase":
        return fe.cast(result, c)
    if name == "polar":
        return tuple(fe.cast(r, c) for r in result)
    return _result(fe, result, t)


def _rect(fe, r, phi):
    t = T.complex_of(T.unify(fe.typeof(r), fe.typeof(phi)))
    if _is_constant(r, phi):
        folded = _fold(cmath.rect, t, r.value, phi.value)
        if folded is not None:
            return folded
    t = T.concrete(t)
    c = T.component(t)
    return _result(fe, fe.inline(lib.rect, [fe.materialize(fe.cast(r, c), c), fe.materialize(fe.cast(phi, c), c)]), t)
