"""Layer 3: the PTX assembler's memory, atomics, barriers, warp operations and calls.

`ptx.OPCODES` maps each opcode to one of these translators; each reads its operands from the
`PtxFunction` and emits IR."""

import re

from lapis import abi
from lapis.cuda.compiler import ir, printing
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.ptx_function import (
    STORAGE,
    TYPES,
    PtxFunction,
    elements,
    narrow,
    offset_address,
    operand_type,
    pack,
    part,
    vector_count,
)
from lapis.cuda.compiler.ptx_parse import TYPE_BYTES, Statement

_SPACES = {"global": "global", "shared": "shared", "param": "param", "local": "local", "const": "global"}


def _space(fn: PtxFunction, s: Statement) -> str:
    spaces = [p for p in s.parts[1:] if p in ("global", "shared", "param", "local", "const")]
    return _SPACES[spaces[0]] if spaces else "global"    # a generic address: a global one here (.const: global


def _ld(fn: PtxFunction, s: Statement) -> None:
    space = _space(fn, s)
    t, kind = operand_type(s, fn)
    d, a = s.operands
    if (count := vector_count(s)) and space != "param":
        addr = fn.address(a, space)
        names = elements(d)
        if t.bits == 32 and kind not in STORAGE and count in (2, 4):      # one 64- or 128-bit load
            whole = fn.emit(Op.VLOAD, T.u32x2 if count == 2 else T.u32x4, [addr], space=space)
            for i, name in enumerate(names):
                if name != "_":
                    fn.assign(name, fn.as_type(fn.emit(Op.VGET, T.uint32, [whole], index=i), t))
            return
        for i, name in enumerate(names):                                  # else one load per element
            fn.assign(name, _load(fn, offset_address(fn, addr, i * TYPE_BYTES[kind]), space, t, kind))
        return
    if space == "param":
        name = a.strip()[1:-1]
        base, _, off = name.partition("+")
        if base in fn.call_results:               # a call's return value
            fn.assign(d, fn.as_type(fn.call_results[base], t))
            return
        if base in fn.var_types:                  # an inlined function's parameter
            fn.assign(d, fn.as_type(fn.read(base, fn.current), t))
            return
        if base not in fn.param_offsets:
            raise fn.error(f"{base!r} is not a parameter of {fn.kernel}")
        offset = abi.KERNARG_CBANK_OFFSET + fn.param_offsets[base] + (int(off, 0) if off else 0)
        v = fn.emit(Op.PARAM, t, offset=offset)
        fn.assign(d, narrow(fn, v, kind) if kind in STORAGE else v)
        return
    fn.assign(d, _load(fn, fn.address(a, space), space, t, kind))


def _load(fn: PtxFunction, addr: ir.Value, space: str, t, kind: str) -> ir.Value:
    if kind in STORAGE:
        return fn.as_type(fn.emit(Op.LOAD, T.int32, [addr], space=space, storage=STORAGE[kind]), t)
    return fn.emit(Op.LOAD, t, [addr], space=space)


def _st(fn: PtxFunction, s: Statement) -> None:
    space = _space(fn, s)
    if space == "param":                          # an argument of the call that follows, or a return value
        a, v = s.operands
        name, value = a.strip()[1:-1].split("+")[0], fn.value(v, operand_type(s, fn)[0])
        if name in fn.var_types:                  # an inlined function's return value: a variable of its own
            fn.write(name, fn.current, fn.as_type(value, fn.var_types[name]))
        else:
            fn.call_arguments[name] = value
        return
    t, kind = operand_type(s, fn)
    a, v = s.operands
    addr = fn.address(a, space)
    if count := vector_count(s):
        values = [fn.value(x, t) for x in elements(v)]
        if t.bits == 32 and kind not in STORAGE and count in (2, 4):     # one 64- or 128-bit store
            words = [fn.as_type(x, T.float32 if count == 4 else T.uint32) for x in values]
            whole = fn.emit(Op.VPACK, T.f32x4 if count == 4 else T.u32x2, words)
            fn.emit(Op.VSTORE, None, [addr, whole], space=space)
            return
        for i, x in enumerate(values):
            _store(fn, offset_address(fn, addr, i * TYPE_BYTES[kind]), x, space, kind)
        return
    _store(fn, addr, fn.value(v, t), space, kind)


def _store(fn: PtxFunction, addr: ir.Value, x: ir.Value, space: str, kind: str) -> None:
    if kind in STORAGE:
        fn.emit(Op.STORE, None, [addr, fn.as_type(x, T.int32)], space=space, storage=STORAGE[kind])
    else:
        fn.emit(Op.STORE, None, [addr, x], space=space)


# PTX's atomic operations, each one ATOMG/ATOMS of the ISA
_ATOMIC = {"add", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec"}


def _atom(fn: PtxFunction, s: Statement) -> None:
    space = _space(fn, s)
    op = next((p for p in s.parts[1:] if p in _ATOMIC), None)
    if op is None:
        raise fn.refuse(f"{s.opcode}")
    t, kind = operand_type(s, fn)
    if kind in ("b32", "b64") and op in ("min", "max", "add"):
        raise fn.error(f"{s.opcode}: .{op} needs a typed operand")
    if s.parts[0] == "red":
        a, *values = s.operands
        d = None
    else:
        d, a, *values = s.operands
    addr = fn.address(a, space)
    if op in ("min", "max") and t == T.int64:        # the ISA's 64-bit MIN/MAX are unsigned: a CAS loop
        b = fn.value(values[0], t)
        old = _cas_loop(fn, addr, space, t, lambda current: fn.emit(Op.MIN if op == "min" else Op.MAX, t,
                                                                     [current, b]))
    else:
        old = fn.emit(Op.ATOMIC, t, [addr, *(fn.value(v, t) for v in values)], op=op, space=space)
    if d is not None:
        fn.assign(d, old)


def _cas_loop(fn: PtxFunction, addr: ir.Value, space: str, t, update) -> ir.Value:
    """An atomic read-modify-write by compare-and-swap: read the word, CAS in update(it), again until the CAS saw
    what was read; the old value. Lanes that lose go round again while the winners wait after the loop."""
    seen = "%__cas_seen"
    fn.var_types[seen] = t
    fn.write(seen, fn.current, fn.emit(Op.LOAD, t, [addr], space=space))
    loop, done = fn.new_block("cas"), fn.new_block("cas_done")
    fn.current.term = ir.Jump(loop)
    loop.preds.append(fn.current)
    fn.place(loop)
    expected = fn.read(seen, loop)
    actual = fn.emit(Op.ATOMIC, t, [addr, expected, update(expected)], op="cas", space=space)
    fn.write(seen, loop, actual)
    lost = fn.emit(Op.CMP, T.boolean, [actual, expected], op="ne")
    loop.term = ir.Branch(lost, loop, done)
    loop.preds.append(loop)
    done.preds.append(loop)
    fn.seal(loop)
    fn.place(done)
    fn.seal(done)
    return actual


def _bar(fn: PtxFunction, s: Statement) -> None:
    if "warp" in s.parts:
        # bar.warp.sync (__syncwarp, a tile's sync): the simulated warp runs its lanes together and reconverges
        # diverged ones at the join before this point, and its memory is coherent: nothing left to wait for
        return
    if "red" in s.parts:
        _bar_red(fn, s)
        return
    if s.operands and s.operands[0] != "0" or len(s.operands) > 1 or "arrive" in s.parts:
        raise fn.refuse(f"{s.opcode} {', '.join(s.operands)} (only barrier 0 of the whole block)")
    fn.emit(Op.BARRIER, None)


def _bar_red(fn: PtxFunction, s: Statement) -> None:
    """bar.red.popc.u32 d, 0, p / bar.red.and.pred / bar.red.or.pred (__syncthreads_count, _and, _or): a barrier
    that also counts the threads whose p holds, through a shared word of the kernel's own: zeroed, counted into
    with a shared atomic add, read, with a barrier between each step (and after, so the word is free again)."""
    d, barrier, p = s.operands
    if barrier != "0":
        raise fn.refuse(f"{s.opcode} on barrier {barrier} (barrier 0 of the whole block is)")
    word = fn.block_word()
    holds = fn.value(p.lstrip("!"), T.boolean)
    if p.startswith("!"):
        holds = fn.emit(Op.NOT, T.boolean, [holds])
    one, zero = fn.const(1, T.uint32), fn.const(0, T.uint32)
    fn.emit(Op.BARRIER, None)
    fn.emit(Op.STORE, None, [word, zero], space="shared")
    fn.emit(Op.BARRIER, None)
    fn.emit(Op.ATOMIC, T.uint32, [word, fn.emit(Op.SELECT, T.uint32, [holds, one, zero])], op="add", space="shared")
    fn.emit(Op.BARRIER, None)
    count = fn.emit(Op.LOAD, T.uint32, [word], space="shared")
    fn.emit(Op.BARRIER, None)
    if "popc" in s.parts:
        fn.assign(d, count)
    elif "and" in s.parts:                        # every thread's p: the count is the block's size
        threads = fn.emit(Op.MUL, T.uint32, [fn.emit(Op.MUL, T.uint32, [
            fn.special("%ntid.x"), fn.special("%ntid.y")]), fn.special("%ntid.z")])
        fn.assign(d, fn.emit(Op.CMP, T.boolean, [count, fn.as_type(threads, T.uint32)], op="eq"))
    else:
        fn.assign(d, fn.emit(Op.CMP, T.boolean, [count, zero], op="ne"))


_REDUX = {"add": Op.ADD, "min": Op.MIN, "max": Op.MAX, "and": Op.AND, "or": Op.OR, "xor": Op.XOR}


def _redux(fn: PtxFunction, s: Statement) -> None:
    """redux.sync.op.type d, a, membermask (cg::reduce, __reduce_*_sync over a warp): every lane gets the reduction
    of the member lanes' a. With the whole warp a butterfly of five shuffles; with part of it (a member mask that
    is not a constant 0xffffffff) each of the 32 lanes' a in turn, those of lanes outside the mask or not running
    left out (a butterfly would mix in their stale registers). On a 64-lane wave each 32 reduce their own, as
    PTX's warp is 32."""
    op = next(p for p in s.parts if p in _REDUX)
    t, _ = operand_type(s, fn)
    d, a, mask = s.operands
    v = fn.value(a, t)
    members = fn.value(mask, T.uint32)
    if members.op is Op.CONST and members.attrs["value"] == 0xFFFFFFFF:
        for step in (16, 8, 4, 2, 1):
            other = fn.emit(Op.SHFL, T.uint32, [fn.as_type(v, T.uint32), fn.const(step)], mode="BFLY")
            v = fn.emit(_REDUX[op], t, [v, fn.as_type(other, t)])
        fn.assign(d, v)
        return
    running = fn.emit(Op.BALLOT, T.uint32, [fn.const(True, T.boolean)], own_half=True)
    taking = fn.emit(Op.AND, T.uint32, [running, members])
    _, base = fn.warp_lane()
    total = None
    for lane in range(32):
        source = fn.emit(Op.OR, T.int32, [base, fn.const(lane)])
        theirs = fn.as_type(fn.emit(Op.SHFL, T.uint32, [fn.as_type(v, T.uint32), source], mode="IDX"), t)
        member = fn.emit(Op.CMP, T.boolean, [fn.emit(Op.AND, T.uint32, [
            taking, fn.const(1 << lane, T.uint32)]), fn.const(0, T.uint32)], op="ne")
        if total is None:                        # the first member's a starts it (no identity needed)
            total, started = theirs, member
            continue
        combined = fn.emit(_REDUX[op], t, [total, theirs])
        total = fn.emit(Op.SELECT, t, [member, fn.emit(Op.SELECT, t, [started, combined, theirs]), total])
        started = fn.emit(Op.OR, T.boolean, [started, member])
    fn.assign(d, total)


def _match(fn: PtxFunction, s: Statement) -> None:
    """match.any.sync.b32 d, a, mask: the lanes (of 32) whose a equals this lane's; match.all: the mask where
    every lane's a is equal, else 0, and p whether it was. One shuffle per lane, as libdevice's match does."""
    t, _ = operand_type(s, fn)
    d, a, *_mask = s.operands
    ut = T.uint32 if t.bits == 32 else T.uint64
    v = fn.as_type(fn.value(a, t), ut)
    same = fn.const(0, T.uint32)
    for lane in range(32):
        theirs = _shuffle_index(fn, v, lane)
        equal = fn.emit(Op.CMP, T.boolean, [theirs, v], op="eq")
        same = fn.emit(Op.OR, T.uint32, [same, fn.emit(Op.SELECT, T.uint32, [
            equal, fn.const(1 << lane, T.uint32), fn.const(0, T.uint32)])])
    first, _, predicate = d.partition("|")
    if "any" in s.parts:
        fn.assign(first, same)
        return
    everyone = fn.emit(Op.BALLOT, T.uint32, [fn.const(True, T.boolean)], own_half=True)
    all_equal = fn.emit(Op.CMP, T.boolean, [same, everyone], op="eq")
    fn.assign(first, fn.emit(Op.SELECT, T.uint32, [all_equal, same, fn.const(0, T.uint32)]))
    if predicate:
        fn.assign(predicate, all_equal)


def _shuffle_index(fn: PtxFunction, v: ir.Value, lane: int) -> ir.Value:
    """v of lane `lane` (of this lane's 32): one SHFL.IDX per 32-bit word."""
    _, base = fn.warp_lane()
    source = fn.emit(Op.OR, T.int32, [base, fn.const(lane)])
    if v.type.bits == 32:
        return fn.emit(Op.SHFL, T.uint32, [v, source], mode="IDX")
    words = [fn.emit(Op.SHFL, T.uint32, [part(fn, v, i, 2), source], mode="IDX") for i in (0, 1)]
    return pack(fn, words, T.uint64)


def _membar(fn: PtxFunction, s: Statement) -> None:
    scope = "CTA" if "cta" in s.parts else "SYS" if "sys" in s.parts else "GPU"
    fn.emit(Op.FENCE, None, scope=scope)


def _shfl(fn: PtxFunction, s: Statement) -> None:
    mode = next((p for p in s.parts[1:] if p in ("up", "down", "bfly", "idx")), None)
    d, a, b, c, *_mask = s.operands
    clamp = fn.value(c, T.uint32)
    whole = 0 if mode == "up" else 0x1F
    if clamp.op is not Op.CONST or clamp.attrs["value"] != whole:
        _segment_shuffle(fn, mode, d, fn.value(a, T.uint32), fn.as_type(fn.value(b, T.uint32), T.int32),
                         fn.as_type(clamp, T.int32))
        return
    lane = fn.as_type(fn.value(b, T.uint32), T.int32)
    value = fn.emit(Op.SHFL, T.uint32, [fn.value(a, T.uint32), lane], mode=mode.upper())
    first, _, second = d.partition("|")
    fn.assign(first, value)
    if second:                                    # whether the source lane is in the warp
        me = fn.emit(Op.SREG, T.int32, name="laneid")
        combine = {"down": Op.ADD, "up": Op.SUB, "bfly": Op.XOR}.get(mode)
        source = lane if combine is None else fn.emit(combine, T.int32, [me, lane])
        low = fn.emit(Op.CMP, T.boolean, [source, fn.const(0)], op="ge")
        wave = fn.emit(Op.DIM, T.int32, offset=abi.CBANK_WARP_SIZE)      # 32, or 64 on a 64-wide device
        high = fn.emit(Op.CMP, T.boolean, [source, wave], op="lt")
        fn.assign(second, fn.emit(Op.AND, T.boolean, [low, high]))


def _segment_shuffle(fn: PtxFunction, mode: str, d: str, value: ir.Value, b: ir.Value, c: ir.Value) -> None:
    """shfl.sync whose c operand is not a whole warp's (a `width` below 32, or c known only at run time): PTX's
    definition, lane by lane: c's bits 12-8 mask the segment, its bits 4-0 clamp the source within it; the source
    lane j (up: lane - b, down: lane + b, bfly: lane ^ b, idx: the segment's first | b), or the lane itself where
    j is past the clamp; one SHFL.IDX reads it (within this lane's 32 on a 64-lane wave)."""
    def op(o, *args):
        return fn.emit(o, T.int32, list(args))
    me, base = fn.warp_lane()
    segment = op(Op.AND, op(Op.SHR, c, fn.const(8)), fn.const(31))
    outside = op(Op.XOR, segment, fn.const(31))                        # ~segment, within 5 bits
    low = op(Op.AND, me, segment)
    high = op(Op.OR, low, op(Op.AND, c, outside))
    j = {"up": lambda: op(Op.SUB, me, b), "down": lambda: op(Op.ADD, me, b), "bfly": lambda: op(Op.XOR, me, b),
         "idx": lambda: op(Op.OR, low, op(Op.AND, b, outside))}[mode]()
    valid = fn.emit(Op.CMP, T.boolean, [j, high], op="ge" if mode == "up" else "le")
    source = op(Op.OR, base, fn.emit(Op.SELECT, T.int32, [valid, j, me]))
    first, _, second = d.partition("|")
    fn.assign(first, fn.emit(Op.SHFL, T.uint32, [value, source], mode="IDX"))
    if second:
        fn.assign(second, valid)


def _vote(fn: PtxFunction, s: Statement) -> None:
    mode = next((p for p in s.parts[1:] if p in ("all", "any", "uni", "ballot")), None)
    d, a, *_mask = s.operands
    p = fn.value(a.lstrip("!"), T.boolean)
    if a.startswith("!"):
        p = fn.emit(Op.NOT, T.boolean, [p])
    if mode == "ballot":
        fn.assign(d, fn.emit(Op.BALLOT, T.uint32, [p], own_half=True))
    elif mode in ("all", "any"):
        fn.assign(d, fn.emit(Op.VOTE, T.boolean, [p], mode=mode.upper()))
    else:
        raise fn.refuse(f"{s.opcode}")


def _activemask(fn: PtxFunction, s: Statement) -> None:
    (d,) = s.operands
    fn.assign(d, fn.emit(Op.BALLOT, T.uint32, [fn.const(True, T.boolean)], own_half=True))


_CALL = re.compile(r"\s*(?:\(([^)]*)\)\s*,\s*)?([\w$]+)\s*(?:,\s*\(([^)]*)\))?\s*(?:,.*)?$", re.S)


def _call(fn: PtxFunction, s: Statement) -> None:
    """call (retval0), name, (param0, param1): vprintf (CUDA's device printf, `_printf`), or a `.func` of the
    module, whose body is inlined here (its registers, labels and parameters renamed for this call)."""
    m = _CALL.match(", ".join(s.operands))
    if m is None:
        raise fn.error(f"cannot read the call {', '.join(s.operands)}")
    results, callee, arguments = ([x.strip() for x in (group or "").split(",") if x.strip()]
                                  for group in (m.group(1), None, m.group(3)))
    callee = m.group(2)
    if callee == "vprintf" and len(results) == 1 and len(arguments) == 2:
        _printf(fn, results[0], *arguments)
    elif callee in fn.module.functions:
        _inline(fn, fn.module.functions[callee], results, arguments)
    else:
        raise fn.refuse(f"a call to {callee!r} (neither vprintf nor a .func of this module)")


def _inline(fn: PtxFunction, function, results: list[str], arguments: list[str]) -> None:
    """A device function the compiler did not inline (__noinline__), inlined: its parameters and return values are
    variables of the builder, bound to the call's; its body translated here with every register, label and
    parameter name given this call's tag (`@n`), its returns going to the block after it."""
    if function.name in fn.calling:
        raise fn.refuse(f"a recursive call to {function.name!r}")
    if any(v.space == "local" for v in function.variables) or len(arguments) != len(function.params) or \
            len(results) != len(function.returns):
        raise fn.refuse(f"the call to {function.name!r} (its arguments, return values or a stack of its own)")
    tag = f"@{len(fn.inlined) + 1}"
    fn.inlined[tag] = function
    for param, argument in zip(function.params, arguments, strict=True):
        if param.type not in TYPES:
            raise fn.refuse(f"a {param.size}-byte parameter of {function.name!r} (a struct by value)")
        fn.var_types[param.name + tag] = TYPES[param.type]
        value = fn.call_arguments.get(argument)
        if value is None:
            raise fn.error(f"the call to {function.name!r} passes {argument!r}, which nothing stored")
        fn.write(param.name + tag, fn.current, fn.as_type(value, TYPES[param.type]))
    for ret in function.returns:
        fn.var_types[ret.name + tag] = TYPES.get(ret.type, T.uint32)
    renamed = {p.name for p in (*function.params, *function.returns)} | {s.label for s in function.body if s.label}
    registers = function.registers

    def rename(text: str) -> str:
        def one(m: re.Match) -> str:
            token = m.group(0)
            if token in renamed or (token.startswith("%") and (token in registers or
                                                                token.rstrip("0123456789") in registers)):
                return token + tag
            return token
        return re.sub(r"(?<![\w$.%])[%$]?[A-Za-z_$][\w$]*", one, text)
    body = [Statement(s.line, s.opcode, [rename(o) for o in s.operands],
                      None if s.guard is None else (rename(s.guard[0]), s.guard[1]),
                      None if s.label is None else rename(s.label), s.source) for s in function.body]
    fn.calling.append(function.name)
    fn.emit_body(body, fn.new_block("returned"))
    fn.calling.pop()
    for result, ret in zip(results, function.returns, strict=True):
        fn.call_results[result] = fn.read(ret.name + tag, fn.current)


def _printf(fn: PtxFunction, result: str, fmt_param: str, args_param: str) -> None:
    """vprintf(format, arguments): a record in the printf FIFO as a Python kernel's print() writes it
    (`printing.py`), its format kept in the kernel's `prints` table for the host to apply."""
    fmt = _constant_string(fn, fn.call_arguments.get(fmt_param))
    kinds, items = printing.c_format_arguments(fmt, lambda why: fn.refuse(f"printf {why}"))
    buffer = fn.call_arguments.get(args_param)
    values = []
    for offset, kind, size in kinds:
        if buffer is None:
            raise fn.error("printf's arguments are not in local memory")
        addr = fn.emit(Op.ADD, T.int32, [fn.as_type(buffer, T.int32), fn.const(offset)])
        t = T.float64 if kind == "float" else {(4, "int"): T.int32, (4, "uint"): T.uint32}.get((size, kind), T.uint64)
        word = fn.emit(Op.LOAD, t, [addr], space="local")
        values.append(fn.as_type(word, T.int64) if kind != "float" else fn.emit(Op.BITCAST, T.int64, [word]))
    number = printing.record_number(fn.ptx_name, fn.ptx_line, fn.kernel, items)
    fn.func.prints[number] = items
    fifo = fn.hidden_pointer(printing.FIFO_INT)
    words = 1 + len(values)
    old = fn.emit(Op.ATOMIC, T.int64, [fifo, fn.const(words, T.int64)], op="add",
                  space="global")
    fits = fn.emit(Op.CMP, T.boolean, [fn.emit(Op.ADD, T.int64, [old, fn.const(1 + words, T.int64)]),
                                       fn.const(printing.FIFO_WORDS, T.int64)], op="le")
    first = fn.emit(Op.ADD, T.uint64, [fifo, fn.emit(Op.SHL, T.uint64, [
        fn.emit(Op.ADD, T.uint64, [fn.as_type(old, T.uint64), fn.const(1, T.uint64)]),
        fn.const(3, T.uint64)])])
    write, after = fn.new_block("printf"), fn.new_block("printed")          # a record that does not fit: none
    fn.current.term = ir.Branch(fits, write, after)
    write.preds.append(fn.current)
    after.preds += [fn.current, write]
    fn.place(write)
    fn.seal(write)
    for k, value in enumerate([fn.const(number, T.int64), *values]):
        at = fn.emit(Op.ADD, T.uint64, [first, fn.const(8 * k, T.uint64)])
        fn.emit(Op.STORE, None, [at, value], space="global")
    write.term = ir.Jump(after)
    fn.place(after)
    fn.seal(after)
    fn.call_results[result] = fn.const(len(values))


def _constant_string(fn: PtxFunction, address: ir.Value | None) -> str:
    """The text at a module variable's address known while compiling (printf's format: `$str`)."""
    offset = None
    if address is not None and address.op is Op.PARAM and address.attrs["offset"] == getattr(fn, "globals_param",
                                                                                             None):
        offset = 0
    elif address is not None and address.op is Op.ADD and address.args[0].op is Op.PARAM and \
            address.args[1].op is Op.CONST:
        offset = address.args[1].attrs["value"]
    name = next((n for n, at in fn.globals.items() if at == offset), None)
    variable = next((v for v in fn.module.variables if v.name == name), None)
    if variable is None or variable.init is None:
        raise fn.refuse("printf with a format that is not a string literal")
    data = bytes(int(x, 0) & 0xFF for x in variable.init)
    return data.split(b"\0")[0].decode(errors="replace")


def _trap(fn: PtxFunction, s: Statement) -> None:
    """trap: the kernel stops with a device-side assert (CUDA's assert, as lapis's <assert.h> writes it), which
    the host reports naming this line."""
    number = len(fn.func.assertions) + 1
    fn.func.assertions[number] = f"{fn.filename}:{fn.line}"
    fn.emit(Op.TRAP, None, number=number)


TABLE = {
    "ld": _ld, "st": _st, "atom": _atom, "red": _atom, "bar": _bar, "barrier": _bar, "membar": _membar,
    "fence": _membar, "shfl": _shfl, "vote": _vote, "redux": _redux, "match": _match, "activemask": _activemask,
    "call": _call, "trap": _trap,
}
