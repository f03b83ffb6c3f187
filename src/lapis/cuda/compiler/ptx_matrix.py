"""Layer 3: the PTX assembler's matrix instructions (the matrix unit's HMMA).

`ptx.OPCODES` maps each opcode to one of these translators; each reads its operands from the
`PtxFunction` and emits IR."""

from lapis.cuda.compiler import ir
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.ptx_function import (
    TYPES,
    PtxFunction,
    elements,
    pack,
)
from lapis.cuda.compiler.ptx_parse import Statement


def _lane_group(fn: PtxFunction) -> tuple[ir.Value, ir.Value]:
    """(g, t) of PTX's matrix-fragment layouts: the lane's group of four in its 32 and its place in it."""
    lane, _ = fn.warp_lane()
    g = fn.emit(Op.SHR, T.int32, [lane, fn.const(2)])
    t = fn.emit(Op.AND, T.int32, [lane, fn.const(3)])
    return g, t


def _mma_operands(fn: PtxFunction, names: list[str], kind: str) -> ir.Value:
    """Registers as one HMMA fragment: four words of A (u32x4), two of B (u32x2), four floats of C (f32x4)."""
    t = {"a": T.u32x4, "b": T.u32x2, "c": T.f32x4}[kind]
    element = T.float32 if kind == "c" else T.uint32
    return fn.emit(Op.VPACK, t, [fn.value(x, element) for x in names])


def _hmma(fn: PtxFunction, a: list[str], b: list[str], c: list[str], d: list[str], kind: str) -> None:
    result = fn.emit(Op.MMA, T.f32x4, [_mma_operands(fn, a, "a"), _mma_operands(fn, b, "b"),
                                       _mma_operands(fn, c, "c")], kind=kind)
    for i, name in enumerate(d):
        fn.assign(name, fn.emit(Op.VGET, T.float32, [result], index=i))


def _mma(fn: PtxFunction, s: Statement) -> None:
    """mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32: one HMMA.16816, whose fragments are PTX's."""
    types = [p for p in s.parts if p in ("f16", "bf16", "f32", "f64", "tf32", "s8", "u8")]
    if "m16n8k16" not in s.parts or "row" not in s.parts or "col" not in s.parts or \
            types not in (["f32", "f16", "f16", "f32"], ["f32", "bf16", "bf16", "f32"]):
        raise fn.refuse(f"{s.opcode} (the matrix unit's mma.m16n8k16.row.col with f16 or bf16 inputs and float32 "
                        "accumulators is)")
    d, a, b, c = (elements(x) for x in s.operands)
    _hmma(fn, a, b, c, d, TYPES[types[1]].isa_format)


def _fragment_address(fn: PtxFunction, base: ir.Value, space: str, row: ir.Value, col: ir.Value, ldm: ir.Value,
                      layout: str, size: int) -> ir.Value:
    """The address of element (row, col) of a matrix stored `layout` (row- or column-major) with leading
    dimension ldm, `size` bytes an element."""
    major, minor = (row, col) if layout == "row" else (col, row)
    index = fn.emit(Op.ADD, T.int32, [fn.emit(Op.MUL, T.int32, [major, ldm]), minor])
    offset = fn.emit(Op.MUL, T.int32, [index, fn.const(size)])
    if space == "shared":
        return fn.emit(Op.ADD, T.int32, [base, offset])
    return fn.emit(Op.ADD, T.uint64, [base, fn.as_type(fn.as_type(offset, T.int64), T.uint64)])


def _wmma_positions(which: str, g: ir.Value, t: ir.Value, fn: PtxFunction):
    """(register, (row, col) of each of its elements) of lapis's m16n16k16 wmma fragments: A is mma.m16n8k16's A
    fragment; B is two B fragments (n 0-7, then 8-15); C and D are two C fragments. The rest of the eight
    registers PTX gives a fragment are not used (a fragment's layout is the implementation's to choose)."""
    def add(x, v):
        return fn.emit(Op.ADD, T.int32, [x, fn.const(v)]) if v else x
    two_t = fn.emit(Op.SHL, T.int32, [t, fn.const(1)])
    if which == "a":                                 # rows g + 8 (r & 1), columns 2t + 8 (r >> 1) + half
        return [(r, [(add(g, 8 * (r & 1)), add(two_t, 8 * (r >> 1) + h)) for h in (0, 1)]) for r in range(4)]
    if which == "b":                                 # k 2t + 8 reg2 + half, n g + 8 (which eight)
        return [(2 * n8 + r2, [(add(two_t, 8 * r2 + h), add(g, 8 * n8)) for h in (0, 1)])
                for n8 in (0, 1) for r2 in (0, 1)]
    return [(4 * n8 + r, [(add(g, 8 * (r >> 1)), add(two_t, 8 * n8 + (r & 1)))])            # c, d: float32
            for n8 in (0, 1) for r in range(4)]


def _wmma(fn: PtxFunction, s: Statement) -> None:
    """nvcuda::wmma's m16n16k16 load, mma and store: two HMMA.16816 per mma (n 0-7 and 8-15)."""
    parts = s.parts
    if "m16n16k16" not in parts:
        raise fn.refuse(f"{s.opcode} (wmma's m16n16k16 shape is)")
    if parts[1] == "mma":
        types = [p for p in parts if p in ("f16", "bf16", "f32")]
        if types[0] != "f32" or types[-1] != "f32" or "satfinite" in parts:
            raise fn.refuse(f"{s.opcode} (float32 accumulators are)")
        d, a, b, c = (elements(x) for x in s.operands)
        kind = "BF16" if "bf16" in parts else "F16"
        for n8 in (0, 1):
            _hmma(fn, a[:4], b[2 * n8:2 * n8 + 2], c[4 * n8:4 * n8 + 4], d[4 * n8:4 * n8 + 4], kind)
        return
    which = parts[2]                                  # load.a / load.b / load.c / store.d
    layout = "row" if "row" in parts else "col"
    space = "shared" if "shared" in parts else "global"
    element = next(p for p in parts if p in ("f16", "bf16", "f32"))
    if element == "f32" and which in ("a", "b") or element != "f32" and which in ("c", "d"):
        raise fn.refuse(f"{s.opcode} (f16 and bf16 inputs and float32 accumulators are)")
    g, t = _lane_group(fn)
    if parts[1] == "load":
        regs, addr, stride = s.operands
        names = elements(regs)
    else:
        addr, regs, stride = s.operands
        names = elements(regs)
    base = fn.address(addr, space)
    ldm = fn.as_type(fn.value(stride, T.uint32), T.int32)
    size = 4 if element == "f32" else 2
    used = set()
    for r, positions in _wmma_positions(which if which != "d" else "c", g, t, fn):
        used.add(r)
        addresses = [_fragment_address(fn, base, space, row, col, ldm, layout, size) for row, col in positions]
        if parts[1] == "store":
            fn.emit(Op.STORE, None, [addresses[0], fn.value(names[r], T.float32)], space=space)
        elif size == 4:
            fn.assign(names[r], fn.emit(Op.LOAD, T.float32, [addresses[0]], space=space))
        else:
            halves = [fn.emit(Op.LOAD, T.int32, [x], space=space, storage="uint16") for x in addresses]
            fn.assign(names[r], pack(fn, halves, T.uint32))
    if parts[1] == "load":                            # the registers lapis's layout leaves unused
        for r, name in enumerate(names):
            if r not in used:
                fn.assign(name, fn.const(0, T.uint32))


def _ldmatrix(fn: PtxFunction, s: Statement) -> None:
    """ldmatrix.sync.aligned.m8n8.x1/.x2/.x4{.trans}.shared.b16: up to four 8x8 matrices of 16-bit elements from
    shared memory into mma's fragment layout. Lanes 8i to 8i+7 give matrix i's row addresses; lane (g, t) gets
    row g's elements 2t and 2t+1 (with .trans: column g's elements of rows 2t and 2t+1). The addresses travel by
    SHFL.IDX, the elements by 32-bit (or, transposed, 16-bit) shared loads."""
    count = next((int(p[1:]) for p in s.parts if p in ("x1", "x2", "x4")), 1)
    if "m8n8" not in s.parts or "shared" not in s.parts or "b16" not in s.parts:
        raise fn.refuse(f"{s.opcode} (ldmatrix of m8n8 b16 matrices in shared memory is)")
    d, a = s.operands
    names = elements(d)
    if len(names) != count:
        raise fn.error(f"{s.opcode} writes {count} registers, not {len(names)}")
    g, t = _lane_group(fn)
    rows = fn.address(a, "shared")                       # this lane's row address (the first lanes' are used)
    _, base = fn.warp_lane()

    def row_address(lane: ir.Value) -> ir.Value:        # the row address lane `lane` (of this 32) holds
        source = fn.emit(Op.OR, T.int32, [base, lane])
        return fn.as_type(fn.emit(Op.SHFL, T.uint32, [fn.as_type(rows, T.uint32), source], mode="IDX"), T.int32)

    def half(address: ir.Value) -> ir.Value:
        return fn.emit(Op.LOAD, T.int32, [address], space="shared", storage="uint16")
    for i, name in enumerate(names):
        if "trans" in s.parts:                          # rows 2t and 2t+1 of matrix i, column g
            two_t = fn.emit(Op.ADD, T.int32, [fn.emit(Op.SHL, T.int32, [t, fn.const(1)]), fn.const(8 * i)])
            column = fn.emit(Op.SHL, T.int32, [g, fn.const(1)])
            words = [half(fn.emit(Op.ADD, T.int32, [row_address(fn.emit(Op.ADD, T.int32, [two_t, fn.const(h)])),
                                                    column])) for h in (0, 1)]
            fn.assign(name, pack(fn, words, T.uint32))
        else:                                           # row g of matrix i, elements 2t and 2t+1: one word
            address = fn.emit(Op.ADD, T.int32, [row_address(fn.emit(Op.ADD, T.int32, [g, fn.const(8 * i)])),
                                                fn.emit(Op.SHL, T.int32, [t, fn.const(2)])])
            fn.assign(name, fn.emit(Op.LOAD, T.uint32, [address], space="shared"))


TABLE = {"mma": _mma, "wmma": _wmma, "ldmatrix": _ldmatrix}
