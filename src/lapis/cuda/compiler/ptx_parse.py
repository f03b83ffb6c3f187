"""Layer 3: reading PTX, NVIDIA's virtual ISA, as NVRTC writes it (the parsing half of the ptxas step).

PTX is text: module directives (`.version`, `.target`, `.address_size`), module-scope variables, and
`.entry` kernels, each with its `.param` list, `.reg` declarations (virtual registers: `%r<15>` declares
%r0 to %r14), `.shared` variables, labels and one instruction per statement:

    @%p1 bra    $L__BB0_2;              a guard (`@!%p1` negated), an opcode with dotted modifiers, operands
    ld.global.f32  %f2, [%rd6+4];       an address is [register], [symbol] or either plus an offset
    shfl.sync.down.b32  %r11|%p2, ...   a second destination after `|`

`parse` turns a module into `Module`/`Entry`/`Statement`s that keep each statement's PTX line (and
the `.loc` source line in force there, when compiled with -lineinfo), and `.func` device functions
the same way (their return values as parameters too); `ptx.py` translates them.
"""

import re
from dataclasses import dataclass, field

from lapis.cuda.compiler.errors import CompileError

# The bytes and alignment of a parameter or variable of each PTX type
TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
              "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "pred": 1}


@dataclass
class Statement:
    """One instruction (`opcode` its dotted name, `operands` as written) or label, at PTX line `line`;
    `source` is the (file number, line) of the CUDA source that `.loc` last named, if any (`Module.files`
    names the file: NVRTC writes `.file` after the kernels)."""
    line: int
    opcode: str = ""
    operands: list[str] = field(default_factory=list)
    guard: tuple[str, bool] | None = None        # (predicate register, negated)
    label: str | None = None
    source: tuple[int, int] | None = None

    @property
    def parts(self) -> list[str]:
        return self.opcode.split(".")


@dataclass
class Variable:
    """A `.shared`, `.local`, `.global` or `.const` variable of `kind` elements (b8 for bytes): `size` 0 for an
    `.extern` array (dynamic shared memory); `init` the initializer's values as written, if any."""
    name: str
    space: str
    align: int
    size: int
    line: int
    kind: str = "b8"
    init: list[str] | None = None


@dataclass
class Param:
    name: str
    type: str            # the PTX type of a scalar parameter, or "b8" for a byte array (a struct by value)
    size: int
    align: int


@dataclass
class Entry:
    name: str
    params: list[Param]
    registers: dict[str, str]          # a register (or declared prefix, `%r`) -> its PTX type
    variables: list[Variable]
    body: list[Statement]
    line: int
    maxntid: tuple[int, ...] | None = None
    returns: list[Param] = field(default_factory=list)     # a .func's return values


@dataclass
class Module:
    entries: dict[str, Entry]
    variables: list[Variable]          # module scope: `.extern .shared` arrays, `.global` and `.const` data
    files: dict[int, str]               # `.file` numbers -> names, for `.loc`
    target: str = ""
    functions: dict[str, Entry] = field(default_factory=dict)    # `.func` device functions with a body


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_VARIABLE = re.compile(r"^(?:\.extern\s+|\.visible\s+|\.weak\s+)*\.(shared|global|const|local)\s+"
                       r"(?:\.align\s+(\d+)\s+)?(?:\.v\d\s+)?\.(\w+)\s+([\w$]+)\s*(?:\[(\d*)\])?")
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([\w$]+)\s*(?:\[(\d+)\])?")


def parse(text: str, filename: str = "<ptx>") -> Module:
    """The module's kernels, variables and files; a CompileError names the PTX line it cannot read."""
    text = _COMMENTS.sub(lambda m: "\n" * m.group(0).count("\n"), text.replace("\x00", ""))
    lines = text.split("\n")
    if not any(re.match(r"\s*\.version\s+\d", line) for line in lines):
        raise CompileError("this is not PTX: it has no .version directive", filename)
    module = Module({}, [], {})
    i = 0
    while i < len(lines):
        try:
            i = _module_line(module, lines, i, filename)
        except (AttributeError, ValueError, IndexError) as e:     # a regular expression that did not match, ...
            raise CompileError(f"cannot read this PTX: {lines[min(i, len(lines) - 1)].strip()!r} ({e})", filename,
                               i + 1) from None
    return module


def _module_line(module: Module, lines: list[str], i: int, filename: str) -> int:
    """Read the module-scope statement at line i (a kernel or function whole); the line after it."""
    line = lines[i].strip()
    if line.startswith(".target"):
        module.target = line.split()[1].rstrip(",;")
    elif line.startswith(".file"):
        number, name = re.match(r'\.file\s+(\d+)\s+"([^"]*)"', line).groups()
        module.files[int(number)] = name
    elif re.match(r"(\.visible\s+|\.weak\s+)?\.entry\b", line):
        entry, i = _entry(lines, i, filename)
        module.entries[entry.name] = entry
        return i
    elif re.match(r"(\.visible\s+|\.weak\s+)?\.func\b", line) and _has_body(lines, i):
        function, i = _entry(lines, i, filename)
        module.functions[function.name] = function
        return i
    elif re.match(r"\.extern\s+\.func\b", line) or re.match(r"(\.visible\s+|\.weak\s+)?\.func\b", line):
        return _skip_body(lines, i)                 # a declaration (vprintf's), or a prototype
    elif line and (m := _VARIABLE.match(line)):
        module.variables.append(_variable(m, i + 1, line))
    return i + 1


def _variable(m: re.Match, line: int, text: str = "") -> Variable:
    space, align, kind, name, count = m.groups()
    size = TYPE_BYTES.get(kind, 1) * (int(count) if count else 1 if count is None else 0)
    init = None
    if "=" in text:
        values = text.split("=", 1)[1].strip().rstrip(";").strip()
        init = split_operands(values[1:-1]) if values.startswith("{") else [values]
    return Variable(name, space, int(align or TYPE_BYTES.get(kind, 1)), size, line, kind, init)


def _has_body(lines: list[str], i: int) -> bool:
    """Whether the declaration starting at line i goes on to a `{` body before a `;` ends it."""
    for line in lines[i:]:
        if "{" in line:
            return True
        if ";" in line:
            return False
    return False


def _skip_body(lines: list[str], i: int) -> int:
    """The line after the `{ ... }` that starts at or after line i (a declaration without one ends at `;`)."""
    depth = 0
    while i < len(lines):
        depth += lines[i].count("{") - lines[i].count("}")
        if depth == 0 and ("}" in lines[i] or lines[i].rstrip().endswith(";")):
            return i + 1
        i += 1
    return i


def _entry(lines: list[str], i: int, filename: str) -> tuple[Entry, int]:
    start = i
    header = []
    while "{" not in lines[i]:
        header.append(lines[i])
        i += 1
    text = " ".join(header)
    # .entry name(params), or .func (returns) name(params): a device function's return values are parameters too
    m = re.search(r"\.(?:entry|func)\s+(?:\(([^)]*)\)\s*)?([\w$]+)\s*(?:\((.*)\))?", text, re.S)
    returns_text, name, params_text = m.group(1) or "", m.group(2), m.group(3) or ""
    params, returns = _params(params_text), _params(returns_text)
    maxntid = re.search(r"\.maxntid\s+([\d,\s]+)", text)
    entry = Entry(name, params, {}, [], [], start + 1,
                  tuple(int(x) for x in maxntid.group(1).replace(" ", "").split(",") if x) if maxntid else None,
                  returns)
    depth, source = 0, None
    pending, first = "", 0              # a statement running over several lines (a call's), and its first line
    while i < len(lines):
        pieces = lines[i].split(";")
        for k, piece in enumerate(pieces):
            ended = k < len(pieces) - 1                  # a ';' followed it
            piece = piece.strip()
            if pending:
                piece = f"{pending} {piece}"
            else:
                first = i + 1
                # A brace before a statement opens or closes a scope (a call sequence, an inline asm block);
                # braces after an opcode are a vector operand's.
                while piece[:1] in ("{", "}"):
                    depth += 1 if piece[0] == "{" else -1
                    piece = piece[1:].strip()
            pending = ""
            if not piece:
                continue
            if re.match(r"\.loc\s", piece):
                numbers = piece.split()[1:3]
                source = (int(numbers[0]), int(numbers[1]))
            elif not ended and not re.fullmatch(r"[\w$]+\s*:", piece):
                pending = piece                          # goes on at the next line
            elif piece.startswith(".reg"):
                _registers(entry, piece, first, filename)
            elif (m := _VARIABLE.match(piece)) is not None:
                entry.variables.append(_variable(m, first))
            elif piece.startswith((".pragma", ".maxnreg", ".reqntid", ".minnctapersm", ".param")):
                pass                               # (a call sequence's .param: st.param and ld.param name it)
            else:
                _statements(entry, piece, first, source, filename)
        i += 1
        if depth <= 0 and not pending:
            break
    else:
        raise CompileError(f"the body of kernel {name!r} has no closing brace (the PTX ends first)", filename,
                           start + 1)
    return entry, i


def _params(text: str) -> list[Param]:
    out = []
    for align, kind, pname, count in _PARAM.findall(text):
        size = TYPE_BYTES.get(kind, 1) * (int(count) if count else 1)
        out.append(Param(pname, kind, size, int(align or TYPE_BYTES.get(kind, 1))))
    return out


def _registers(entry: Entry, piece: str, line: int, filename: str) -> None:
    m = re.match(r"\.reg\s+(?:\.v\d\s+)?\.(\w+)\s+(.*)", piece)
    if m is None:
        raise CompileError(f"cannot read the register declaration {piece!r}", filename, line, entry.name)
    kind, names = m.groups()
    for name in names.split(","):
        name = name.strip()
        counted = re.match(r"([%\w$]+)<\d+>", name)
        entry.registers[counted.group(1) if counted else name] = kind


def _statements(entry: Entry, piece: str, line: int, source, filename: str) -> None:
    """A label (or several), then at most one instruction."""
    while (m := re.match(r"([\w$]+)\s*:\s*", piece)) and not piece.startswith(("%", "@")):
        entry.body.append(Statement(line, label=m.group(1), source=source))
        piece = piece[m.end():]
    if not piece:
        return
    guard = None
    if piece.startswith("@"):
        m = re.match(r"@(!?)(%?[\w$]+)\s+", piece)
        guard, piece = (m.group(2), m.group(1) == "!"), piece[m.end():]
    opcode, _, rest = piece.partition(" ") if " " in piece else piece.partition("\t")
    entry.body.append(Statement(line, opcode.strip(), split_operands(rest), guard, source=source))


def split_operands(text: str) -> list[str]:
    """Comma-separated operands, a comma inside [] or {} not splitting."""
    out, depth, current = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        out.append(current.strip())
    return out
