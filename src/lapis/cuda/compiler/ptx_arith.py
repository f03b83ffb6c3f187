"""Layer 3: the PTX assembler's arithmetic, comparisons, conversions and bit operations.

`ptx.OPCODES` maps each opcode to one of these translators; each reads its operands from the
`PtxFunction` and emits IR."""

from lapis.cuda.compiler import ir
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.ptx_function import (
    COMBINE,
    HALF2,
    ROUNDING,
    STORAGE,
    TYPES,
    PtxFunction,
    check_modifiers,
    elements,
    immediate,
    invert,
    narrow,
    operand_type,
    pack,
    part,
)
from lapis.cuda.compiler.ptx_parse import Statement

# -- instructions ---------------------------------------------------------------------------------
_BINARY = {"add": Op.ADD, "sub": Op.SUB, "mul": Op.MUL, "min": Op.MIN, "max": Op.MAX, "and": Op.AND,
           "or": Op.OR, "xor": Op.XOR, "shl": Op.SHL, "shr": Op.SHR, "div": Op.DIV, "rem": Op.MOD}


def _binary(fn: PtxFunction, s: Statement) -> None:
    name = s.parts[0]
    check_modifiers(s, fn, {"lo", "wide", "hi", "cc"})
    t, _ = operand_type(s, fn)
    d, a, b = s.operands
    if "cc" in s.parts:
        raise fn.refuse(f"{s.opcode}")
    if "hi" in s.parts and t.bits == 64:
        fn.assign(d, _mul_hi64(fn, fn.value(a, t), fn.value(b, t), t))
        return
    if "hi" in s.parts:                           # the high word of the 64-bit product
        wide = T.int64 if t.kind == "int" else T.uint64
        x, y = (fn.as_type(fn.value(o, t), wide) for o in (a, b))
        product = fn.emit(Op.MUL, wide, [x, y])
        fn.assign(d, fn.as_type(fn.emit(Op.SHR, wide, [product, fn.const(32, wide)]), t))
        return
    if "wide" in s.parts:                         # mul.wide: the product of two 32-bit values, in 64 bits
        wide = T.int64 if t.kind == "int" else T.uint64
        x, y = (fn.as_type(fn.value(o, t), wide) for o in (a, b))
        fn.assign(d, fn.emit(Op.MUL, wide, [x, y]))
        return
    if name in ("shl", "shr"):                    # the amount is a u32 whatever the value's width
        x = fn.value(a, t)
        fn.assign(d, fn.emit(_BINARY[name], t, [x, fn.as_type(fn.value(b, T.uint32), t)]))
        return
    x, y = fn.value(a, t), fn.value(b, t)
    if name == "div" and t.kind == "float":
        fn.assign(d, fn.emit(Op.FDIV, t, [x, y]))
    elif name in ("div", "rem") and t.kind == "int":
        fn.assign(d, _truncating(fn, name, x, y, t))
    else:
        fn.assign(d, fn.emit(_BINARY[name], t, [x, y]))


def _mul_hi64(fn: PtxFunction, x: ir.Value, y: ir.Value, t) -> ir.Value:
    """The high 64 bits of the 128-bit product (what NVRTC divides a 64-bit integer by a constant with): from the
    four 32x32-bit products of the halves, with their carries; signed, less y where x < 0 and x where y < 0."""
    u = T.uint64

    def op(o, *args):
        return fn.emit(o, u, list(args))
    xu, yu = fn.as_type(x, u), fn.as_type(y, u)
    low, shift = fn.const(0xFFFFFFFF, u), fn.const(32, u)
    xl, xh, yl, yh = op(Op.AND, xu, low), op(Op.SHR, xu, shift), op(Op.AND, yu, low), op(Op.SHR, yu, shift)
    ll, lh, hl, hh = op(Op.MUL, xl, yl), op(Op.MUL, xl, yh), op(Op.MUL, xh, yl), op(Op.MUL, xh, yh)
    middle = op(Op.ADD, op(Op.ADD, op(Op.SHR, ll, shift), op(Op.AND, lh, low)), op(Op.AND, hl, low))
    high = op(Op.ADD, op(Op.ADD, op(Op.ADD, hh, op(Op.SHR, lh, shift)), op(Op.SHR, hl, shift)),
              op(Op.SHR, middle, shift))
    if t.kind == "int":                           # two's complement: x y = xu yu - 2^64 (x<0 ? y : 0) - ...
        zero = fn.const(0, t)
        for sign, other in ((x, yu), (y, xu)):
            negative = fn.emit(Op.CMP, T.boolean, [sign, zero], op="lt")
            high = op(Op.SUB, high, fn.emit(Op.SELECT, u, [negative, other, fn.const(0, u)]))
    return fn.as_type(high, t)


def _truncating(fn: PtxFunction, name: str, x: ir.Value, y: ir.Value, t) -> ir.Value:
    """C's signed division and remainder (toward zero) from the IR's floor division and modulo: where the
    remainder is not 0 and its sign differs from x's, the quotient is one more and the remainder one y less."""
    q, r = fn.emit(Op.DIV, t, [x, y]), fn.emit(Op.MOD, t, [x, y])
    zero = fn.const(0, t)
    nonzero = fn.emit(Op.CMP, T.boolean, [r, zero], op="ne")
    differ = fn.emit(Op.CMP, T.boolean, [fn.emit(Op.XOR, t, [r, x]), zero], op="lt")
    fix = fn.emit(Op.AND, T.boolean, [nonzero, differ])
    if name == "div":
        return fn.emit(Op.SELECT, t, [fix, fn.emit(Op.ADD, t, [q, fn.const(1, t)]), q])
    return fn.emit(Op.SELECT, t, [fix, fn.emit(Op.SUB, t, [r, y]), r])


def _mad(fn: PtxFunction, s: Statement) -> None:
    check_modifiers(s, fn, {"lo", "wide"})
    t, _ = operand_type(s, fn)
    d, a, b, c = s.operands
    if t.kind == "float":
        fn.assign(d, fn.emit(Op.MATH, t, [fn.value(a, t), fn.value(b, t), fn.value(c, t)], fn="fma"))
        return
    if "wide" in s.parts:
        wide = T.int64 if t.kind == "int" else T.uint64
        x, y = (fn.as_type(fn.value(o, t), wide) for o in (a, b))
        fn.assign(d, fn.emit(Op.ADD, wide, [fn.emit(Op.MUL, wide, [x, y]), fn.value(c, wide)]))
        return
    fn.assign(d, fn.emit(Op.ADD, t, [fn.emit(Op.MUL, t, [fn.value(a, t), fn.value(b, t)]), fn.value(c, t)]))


def _unary(fn: PtxFunction, s: Statement) -> None:
    check_modifiers(s, fn, set())
    t, _ = operand_type(s, fn)
    d, a = s.operands
    x, name = fn.value(a, t), s.parts[0]
    if name == "neg":
        fn.assign(d, fn.emit(Op.NEG, t, [x]))
    elif name == "not":
        fn.assign(d, invert(fn, x))
    elif t.kind == "float":                        # abs
        fn.assign(d, fn.emit(Op.MATH, t, [x], fn="fabs"))
    else:
        zero = fn.const(0, t)
        fn.assign(d, fn.emit(Op.SELECT, t, [fn.emit(Op.CMP, T.boolean, [x, zero], op="lt"),
                                             fn.emit(Op.NEG, t, [x]), x]))


_MATH = {"ex2": "exp2", "lg2": "log2", "sin": "sin", "cos": "cos", "sqrt": "sqrt", "rsqrt": "rsqrt"}


def _math(fn: PtxFunction, s: Statement) -> None:
    check_modifiers(s, fn, set())
    t, _ = operand_type(s, fn)
    d, a = s.operands
    name, x = s.parts[0], fn.value(a, t)
    if name == "sqrt" and t == T.float64:
        fn.assign(d, _sqrt64(fn, x))
    elif name == "rcp":
        fn.assign(d, fn.emit(Op.FDIV, t, [fn.const(1.0, t), x]))
    elif name == "rsqrt" and t == T.float64:
        fn.assign(d, fn.emit(Op.FDIV, t, [fn.const(1.0, t), _sqrt64(fn, x)]))
    elif name == "rsqrt":
        root = fn.emit(Op.MATH, t, [x], fn="sqrt")
        fn.assign(d, fn.emit(Op.FDIV, t, [fn.const(1.0, t), root]))
    else:
        if t != T.float32:
            raise fn.refuse(f"{s.opcode}")
        fn.assign(d, fn.emit(Op.MATH, t, [x], fn=_MATH[name]))


def _sqrt64(fn: PtxFunction, x: ir.Value) -> ir.Value:
    """sqrt.rn.f64: x brought into [1, 4) by an even power of two 2^-2k (a subnormal x first by 2^108), the
    special function unit's float32 reciprocal square root refined by two Newton steps in float64, the root
    corrected once by its exact residual (an FMA), and scaled back by 2^k; 0, inf, negatives and NaN as IEEE's."""
    f, i = T.float64, T.int64

    def c(v, t=i):
        return fn.const(v, t)

    def power_of_two(exponent: ir.Value) -> ir.Value:        # 2^exponent for exponent within [-1022, 1023]
        field = fn.emit(Op.SHL, i, [fn.emit(Op.ADD, i, [exponent, c(1023)]), c(52)])
        return fn.emit(Op.BITCAST, f, [field])

    def exponent_field(v: ir.Value) -> ir.Value:
        return fn.emit(Op.AND, i, [fn.emit(Op.SHR, i, [fn.emit(Op.BITCAST, i, [v]), c(52)]), c(0x7FF)])
    tiny = fn.emit(Op.CMP, T.boolean, [exponent_field(x), c(0)], op="eq")
    x2 = fn.emit(Op.SELECT, f, [tiny, fn.emit(Op.MUL, f, [x, c(2.0**108, f)]), x])
    k = fn.emit(Op.SHR, i, [fn.emit(Op.SUB, i, [exponent_field(x2), c(1023)]), c(1)])       # floor((e - 1023) / 2)
    xs = fn.emit(Op.MUL, f, [x2, power_of_two(fn.emit(Op.MUL, i, [k, c(-2)]))])               # in [1, 4)
    guess = fn.emit(Op.MATH, T.float32, [fn.emit(Op.CAST, T.float32, [xs])], fn="rsq")
    y = fn.emit(Op.CAST, f, [guess])
    half_xs = fn.emit(Op.MUL, f, [xs, c(0.5, f)])
    for _ in range(2):                                # y = y (1.5 - x/2 y^2)
        y = fn.emit(Op.MUL, f, [y, fn.emit(Op.SUB, f, [c(1.5, f), fn.emit(Op.MUL, f, [half_xs, fn.emit(
            Op.MUL, f, [y, y])])])])
    root = fn.emit(Op.MUL, f, [xs, y])
    residual = fn.emit(Op.MATH, f, [fn.emit(Op.NEG, f, [root]), root, xs], fn="fma")    # xs - root^2, exact
    root = fn.emit(Op.MATH, f, [fn.emit(Op.MUL, f, [y, c(0.5, f)]), residual, root], fn="fma")
    scale = fn.emit(Op.ADD, i, [k, fn.emit(Op.SELECT, i, [tiny, c(-54), c(0)])])
    result = fn.emit(Op.MUL, f, [root, power_of_two(scale)])
    ordinary = fn.emit(Op.AND, T.boolean, [fn.emit(Op.CMP, T.boolean, [x, c(0.0, f)], op="gt"),
                                           fn.emit(Op.CMP, T.boolean, [x, c(float("inf"), f)], op="lt")])
    kept = fn.emit(Op.OR, T.boolean, [fn.emit(Op.CMP, T.boolean, [x, c(0.0, f)], op="eq"),
                                      fn.emit(Op.CMP, T.boolean, [x, c(float("inf"), f)], op="eq")])
    special = fn.emit(Op.SELECT, f, [kept, x, c(float("nan"), f)])      # +-0 and inf stay; negatives, NaN: NaN
    return fn.emit(Op.SELECT, f, [ordinary, result, special])


def _fma(fn: PtxFunction, s: Statement) -> None:
    check_modifiers(s, fn, set())
    t, _ = operand_type(s, fn)
    d, a, b, c = s.operands
    fn.assign(d, fn.emit(Op.MATH, t, [fn.value(a, t), fn.value(b, t), fn.value(c, t)], fn="fma"))


def _mov(fn: PtxFunction, s: Statement) -> None:
    t, _ = operand_type(s, fn)
    d, a = s.operands
    if a.startswith("{"):                         # pack: {low, high} into one register of twice their width
        fn.assign(d, pack(fn, [fn.value(x, T.uint32 if t.bits == 64 else T.uint32) for x in elements(a)], t))
    elif d.startswith("{"):                       # unpack
        whole = fn.value(a, T.uint64 if t.bits == 64 else T.uint32)
        names = elements(d)
        for i, name in enumerate(names):
            if name != "_":
                fn.assign(name, part(fn, whole, i, len(names)))
    else:
        fn.assign(d, fn.value(a, t))


def _cvta(fn: PtxFunction, s: Statement) -> None:
    """Generic and global addresses are the same virtual addresses here; a generic shared address is not. A
    generic address of local memory stays its local offset: printf's argument buffer is the one use (`_call`)."""
    if "shared" in s.parts:
        raise fn.refuse(f"{s.opcode} (a generic address of shared memory)")
    t, _ = operand_type(s, fn)
    d, a = s.operands
    fn.assign(d, fn.value(a, t))


# ordered comparisons; the unordered ones (ltu, ...) are the negation of the ordered opposite
_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "lo": "lt", "ls": "le",
            "hi": "gt", "hs": "ge"}


_UNORDERED = {"ltu": "ge", "leu": "gt", "gtu": "le", "geu": "lt", "equ": "ne"}


def _compare(fn: PtxFunction, op: str, x: ir.Value, y: ir.Value, t) -> ir.Value:
    def cmp(o):
        return fn.emit(Op.CMP, T.boolean, [x, y], op=o)
    if t.kind != "float":
        return cmp(_COMPARE[op])
    if op == "ne":                       # ordered: false where either is NaN (the IR's ne is unordered)
        return fn.emit(Op.OR, T.boolean, [cmp("lt"), cmp("gt")])
    if op == "equ":
        return fn.emit(Op.NOT, T.boolean, [fn.emit(Op.OR, T.boolean, [cmp("lt"), cmp("gt")])])
    if op == "neu":
        return cmp("ne")
    if op in _UNORDERED:
        return fn.emit(Op.NOT, T.boolean, [cmp(_UNORDERED[op])])
    if op in ("num", "nan"):
        both = fn.emit(Op.AND, T.boolean, [fn.emit(Op.CMP, T.boolean, [x, x], op="eq"),
                                           fn.emit(Op.CMP, T.boolean, [y, y], op="eq")])
        return both if op == "num" else fn.emit(Op.NOT, T.boolean, [both])
    return cmp(_COMPARE[op])


def _setp(fn: PtxFunction, s: Statement) -> None:
    op = s.parts[1]
    if op not in _COMPARE and op not in _UNORDERED and op not in ("neu", "num", "nan"):
        raise fn.refuse(f"the comparison .{op} of {s.opcode}")
    t, _ = operand_type(s, fn)
    d, a, b, *rest = s.operands
    p = _compare(fn, op, fn.value(a, t), fn.value(b, t), t)
    combine = next((c for c in s.parts[2:] if c in COMBINE), None)
    if combine:
        q = rest[0]
        negated = q.startswith("!")
        qv = fn.value(q.lstrip("!"), T.boolean)
        if negated:
            qv = fn.emit(Op.NOT, T.boolean, [qv])
        p = fn.emit(COMBINE[combine], T.boolean, [p, qv])
    first, _, second = d.partition("|")
    fn.assign(first, p)
    if second:
        fn.assign(second, fn.emit(Op.NOT, T.boolean, [p]))


def _selp(fn: PtxFunction, s: Statement) -> None:
    t, _ = operand_type(s, fn)
    d, a, b, c = s.operands
    fn.assign(d, fn.emit(Op.SELECT, t, [fn.value(c, T.boolean), fn.value(a, t), fn.value(b, t)]))


def _predicate_logic(fn: PtxFunction, s: Statement) -> None:
    """and/or/xor/not on .pred (on other types they are _binary's and _unary's)."""
    if s.parts[-1] != "pred":
        (_unary if s.parts[0] == "not" else _binary)(fn, s)
        return
    d, *args = s.operands
    values = [fn.emit(Op.NOT, T.boolean, [fn.value(a[1:], T.boolean)]) if a.startswith("!")
              else fn.value(a, T.boolean) for a in args]
    if s.parts[0] == "not":
        fn.assign(d, fn.emit(Op.NOT, T.boolean, values))
    else:
        fn.assign(d, fn.emit(COMBINE[s.parts[0]], T.boolean, values))


def _cvt(fn: PtxFunction, s: Statement) -> None:
    if any(p in HALF2 for p in s.parts):          # cvt.rn.f16x2.f32 d, a, b: a's half high, b's low
        kind = next(p for p in s.parts if p in HALF2)
        d, a, b = s.operands
        halves = [fn.emit(Op.CAST, TYPES[HALF2[kind]], [fn.value(x, T.float32)]) for x in (b, a)]
        fn.assign(d, pack(fn, halves, T.uint32))
        return
    types = [p for p in s.parts[1:] if p in TYPES]
    check_modifiers(s, fn, set())
    if len(types) != 2:
        raise fn.error(f"{s.opcode} needs a destination and a source type")
    (dt, dname), (st, sname) = (TYPES[types[0]], types[0]), (TYPES[types[1]], types[1])
    d, a = s.operands
    x = fn.value(a, st)
    if sname in STORAGE:                          # from a narrow integer: its low bits, extended
        x = narrow(fn, x, sname)
    rounding = next((p for p in s.parts[1:] if p in ROUNDING), None)
    if st.kind == "float" and dt.kind == "float" and rounding in ("rni", "rmi", "rpi", "rzi"):
        x = fn.emit(Op.MATH, st, [x], fn={"rni": "rint", "rmi": "floor", "rpi": "ceil", "rzi": "trunc"}[rounding])
    elif st.kind == "float" and dt.kind != "float" and rounding in ("rni", "rmi", "rpi"):
        x = fn.emit(Op.MATH, st, [x], fn={"rni": "rint", "rmi": "floor", "rpi": "ceil"}[rounding])
    v = fn.as_type(x, dt) if dt.kind != "float" and st.kind != "float" else \
        (x if dt == st else fn.emit(Op.CAST, dt, [x]))
    if "sat" in s.parts and dt.kind == "float":   # clamped to [0, 1] (NaN to 0)
        v = fn.emit(Op.MIN, dt, [fn.emit(Op.MAX, dt, [v, fn.const(0.0, dt)]),
                                 fn.const(1.0, dt)])
    if dname in STORAGE:
        v = narrow(fn, v, dname)
    fn.assign(d, v)


def _wide_mask(fn: PtxFunction, length: ir.Value, position: ir.Value | None, t) -> ir.Value:
    """((1 << length) - 1) << position in type t, computed in 64 bits so that a length of 32 is every bit."""
    one = fn.const(1, T.uint64)
    ones = fn.emit(Op.SUB, T.uint64, [fn.emit(Op.SHL, T.uint64, [one, fn.as_type(length, T.uint64)]), one])
    if position is not None:
        ones = fn.emit(Op.SHL, T.uint64, [ones, fn.as_type(position, T.uint64)])
    return fn.as_type(ones, t) if t.bits == 32 else ones


def _bfi(fn: PtxFunction, s: Statement) -> None:
    """bfi d, a, b, pos, len: b with its bits [pos, pos + len) replaced by a's low len bits."""
    t, _ = operand_type(s, fn)
    d, a, b, c, e = s.operands
    pos, length = fn.value(c, T.uint32), fn.value(e, T.uint32)
    mask = _wide_mask(fn, length, pos, t)
    kept = fn.emit(Op.AND, t, [fn.value(b, t), invert(fn, mask)])
    inserted = fn.emit(Op.AND, t, [fn.emit(Op.SHL, t, [fn.value(a, t), fn.as_type(pos, t)]), mask])
    fn.assign(d, fn.emit(Op.OR, t, [kept, inserted]))


def _bfe(fn: PtxFunction, s: Statement) -> None:
    """bfe d, a, pos, len: a's bits [pos, pos + len), zero-extended (.u) or sign-extended (.s)."""
    t, _ = operand_type(s, fn)
    d, a, b, c = s.operands
    pos, length = fn.value(b, T.uint32), fn.value(c, T.uint32)
    x = fn.value(a, t)
    if t.kind == "uint":
        field = fn.emit(Op.SHR, t, [x, fn.as_type(pos, t)])
        fn.assign(d, fn.emit(Op.AND, t, [field, _wide_mask(fn, length, None, t)]))
        return
    width = fn.const(t.bits, t)
    up = fn.emit(Op.SUB, t, [fn.emit(Op.SUB, t, [width, fn.as_type(pos, t)]), fn.as_type(length, t)])
    down = fn.emit(Op.SUB, t, [width, fn.as_type(length, t)])
    fn.assign(d, fn.emit(Op.SHR, t, [fn.emit(Op.SHL, t, [x, up]), down]))


def _popc(fn: PtxFunction, s: Statement) -> None:
    """The set bits of a 32- or 64-bit value (SWAR: pairs, nibbles, then a multiply that sums the bytes)."""
    t, _ = operand_type(s, fn)
    d, a = s.operands
    ut = T.uint32 if t.bits == 32 else T.uint64
    x = fn.value(a, ut)

    def c(v):
        return fn.const(v & ((1 << ut.bits) - 1), ut)
    x = fn.emit(Op.SUB, ut, [x, fn.emit(Op.AND, ut, [fn.emit(Op.SHR, ut, [x, c(1)]), c(0x5555555555555555)])])
    x = fn.emit(Op.ADD, ut, [fn.emit(Op.AND, ut, [x, c(0x3333333333333333)]),
                             fn.emit(Op.AND, ut, [fn.emit(Op.SHR, ut, [x, c(2)]), c(0x3333333333333333)])])
    x = fn.emit(Op.AND, ut, [fn.emit(Op.ADD, ut, [x, fn.emit(Op.SHR, ut, [x, c(4)])]), c(0x0F0F0F0F0F0F0F0F)])
    x = fn.emit(Op.SHR, ut, [fn.emit(Op.MUL, ut, [x, c(0x0101010101010101)]), c(ut.bits - 8)])
    fn.assign(d, fn.as_type(x, T.uint32))


def _clz(fn: PtxFunction, s: Statement) -> None:
    """Leading zero bits, by halving: where the top half of what is left is zero, count it and shift."""
    t, _ = operand_type(s, fn)
    d, a = s.operands
    ut = T.uint32 if t.bits == 32 else T.uint64
    x, count = fn.value(a, ut), fn.const(0, T.uint32)
    zero = fn.const(0, ut)
    step = ut.bits // 2
    while step:
        top = fn.emit(Op.SHR, ut, [x, fn.const(ut.bits - step, ut)])
        empty = fn.emit(Op.CMP, T.boolean, [top, zero], op="eq")
        x = fn.emit(Op.SELECT, ut, [empty, fn.emit(Op.SHL, ut, [x, fn.const(step, ut)]), x])
        count = fn.emit(Op.ADD, T.uint32, [count, fn.emit(Op.SELECT, T.uint32, [
            empty, fn.const(step, T.uint32), fn.const(0, T.uint32)])])
        step //= 2
    last = fn.emit(Op.CMP, T.boolean, [x, zero], op="eq")          # all zero: one more
    fn.assign(d, fn.emit(Op.ADD, T.uint32, [count, fn.emit(Op.SELECT, T.uint32, [
        last, fn.const(1, T.uint32), fn.const(0, T.uint32)])]))


def _brev(fn: PtxFunction, s: Statement) -> None:
    """The bits reversed: swap halves, then quarters, ... then neighbouring bits."""
    t, _ = operand_type(s, fn)
    d, a = s.operands
    ut = T.uint32 if t.bits == 32 else T.uint64
    x, step = fn.value(a, ut), ut.bits // 2
    full = (1 << ut.bits) - 1
    while step:
        mask = 0
        for start in range(0, ut.bits, 2 * step):
            mask |= ((1 << step) - 1) << start
        amount = fn.const(step, ut)
        low = fn.emit(Op.SHL, ut, [fn.emit(Op.AND, ut, [x, fn.const(mask, ut)]), amount])
        high = fn.emit(Op.AND, ut, [fn.emit(Op.SHR, ut, [x, amount]), fn.const(mask & full, ut)])
        x = fn.emit(Op.OR, ut, [low, high])
        step //= 2
    fn.assign(d, x)


def _lop3(fn: PtxFunction, s: Statement) -> None:
    """lop3.b32 d, a, b, c, lut: each bit of d is lut's bit at index (a's << 2) | (b's << 1) | c's: the OR of the
    minterms lut selects."""
    t, _ = operand_type(s, fn)
    d, a, b, c, lut = s.operands
    table = immediate(lut, T.uint32, fn)
    xs = [fn.value(o, t) for o in (a, b, c)]
    inverted = [invert(fn, x) for x in xs]
    out = fn.const(0, t)
    for index in range(8):
        if table >> index & 1:
            term = None
            for k, (x, nx) in enumerate(zip(xs, inverted, strict=True)):
                factor = x if index >> (2 - k) & 1 else nx
                term = factor if term is None else fn.emit(Op.AND, t, [term, factor])
            out = fn.emit(Op.OR, t, [out, term])
    fn.assign(d, out)


def _prmt(fn: PtxFunction, s: Statement) -> None:
    """prmt.b32 d, a, b, c: d's byte i is byte (c's nibble i & 7) of b:a (a the low four), or that byte's sign
    replicated where the nibble's bit 3 is set. The selector must be a constant."""
    if len(s.parts) > 2:
        raise fn.refuse(f"{s.opcode} (a prmt mode)")
    d, a, b, c = s.operands
    selector = fn.value(c, T.uint32)
    if selector.op is not Op.CONST:
        raise fn.refuse(f"{s.opcode} with a selector computed at run time")
    both = pack(fn, [fn.value(a, T.uint32), fn.value(b, T.uint32)], T.uint64)
    out = fn.const(0, T.uint32)
    for i in range(4):
        nibble = selector.attrs["value"] >> (4 * i) & 0xF
        byte = part(fn, fn.emit(Op.SHR, T.uint64, [both, fn.const(8 * (nibble & 7), T.uint64)]), 0, 8)
        if nibble & 8:                            # the byte's top bit, in all eight bits
            byte = fn.as_type(fn.emit(Op.SHR, T.int32, [fn.emit(Op.SHL, T.int32, [
                fn.as_type(byte, T.int32), fn.const(24)]),
                fn.const(31)]), T.uint32)
            byte = fn.emit(Op.AND, T.uint32, [byte, fn.const(0xFF, T.uint32)])
        if i:
            byte = fn.emit(Op.SHL, T.uint32, [byte, fn.const(8 * i, T.uint32)])
        out = fn.emit(Op.OR, T.uint32, [out, byte])
    fn.assign(d, out)


def _shf(fn: PtxFunction, s: Statement) -> None:
    """shf.l/.r.wrap/.clamp.b32 d, a, b, c: b:a (b high) shifted by c (mod 32, or at most 32), the high word
    (left) or the low word (right)."""
    d, a, b, c = s.operands
    amount = fn.value(c, T.uint32)
    if "clamp" in s.parts:
        amount = fn.emit(Op.MIN, T.uint32, [amount, fn.const(32, T.uint32)])
    else:
        amount = fn.emit(Op.AND, T.uint32, [amount, fn.const(31, T.uint32)])
    both = pack(fn, [fn.value(a, T.uint32), fn.value(b, T.uint32)], T.uint64)
    n = fn.as_type(amount, T.uint64)
    if "l" in s.parts:
        fn.assign(d, part(fn, fn.emit(Op.SHL, T.uint64, [both, n]), 1, 2))
    else:
        fn.assign(d, part(fn, fn.emit(Op.SHR, T.uint64, [both, n]), 0, 2))


def _copysign(fn: PtxFunction, s: Statement) -> None:
    """copysign d, a, b: b's magnitude with a's sign (by their bits)."""
    t, _ = operand_type(s, fn)
    ut = T.uint32 if t.bits == 32 else T.uint64
    d, a, b = s.operands
    sign = 1 << (t.bits - 1)
    x = fn.emit(Op.AND, ut, [fn.value(a, ut), fn.const(sign, ut)])
    y = fn.emit(Op.AND, ut, [fn.value(b, ut), fn.const(sign - 1, ut)])
    fn.assign(d, fn.as_type(fn.emit(Op.OR, ut, [x, y]), t))


TABLE = {
    **{name: _binary for name in ("add", "sub", "mul", "min", "max", "shl", "shr", "div", "rem")},
    **{name: _predicate_logic for name in ("and", "or", "xor", "not")},
    **{name: _math for name in ("ex2", "lg2", "sin", "cos", "sqrt", "rsqrt", "rcp")},
    "neg": _unary, "abs": _unary, "mad": _mad, "fma": _fma, "mov": _mov, "cvta": _cvta, "setp": _setp,
    "selp": _selp, "cvt": _cvt, "lop3": _lop3, "prmt": _prmt, "shf": _shf, "copysign": _copysign, "bfi": _bfi,
    "bfe": _bfe, "popc": _popc, "clz": _clz, "brev": _brev,
}
