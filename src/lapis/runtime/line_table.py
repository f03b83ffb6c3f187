"""Layer 2: a kernel's line table, which source line each instruction was compiled from (what nvcc -lineinfo keeps),
so that a fault or a listing can name the kernel's file and line.

It is the code object's kernel metadata entry "lines": {"files": [path, ...], "rows": [[pc, file, line], ...]}.
A row starts a run of instructions at byte offset `pc` of the kernel's code, from line `line` of files[`file`]; the
run ends where the next row starts. Line 0 marks instructions no source line made. A code object written before
line tables (or by hand) has none, and every lookup in it answers None.
"""

from bisect import bisect_right

from lapis.isa import INSTRUCTION_BYTES


def encode(sources: list) -> dict | None:
    """The "lines" entry for a program whose instructions, in order, came from `sources` ((file, line), or None for
    none); None when no instruction has a line."""
    files: dict[str, int] = {}
    rows: list[list[int]] = []
    for index, source in enumerate(sources):
        file, line = source if source is not None else (None, 0)
        entry = [files.setdefault(file, len(files)) if file is not None else 0, line]
        if not rows or rows[-1][1:] != entry:
            rows.append([index * INSTRUCTION_BYTES, *entry])
    if not files:
        return None
    return {"files": list(files), "rows": rows}


def _rows(metadata: dict) -> list[tuple[int, str | None, int]]:
    """The table's rows as (pc, file, line), file None where line is 0; none unless the table is one `encode`
    writes (a damaged code object's is ignored, not raised on: it only ever adds to a message or a listing)."""
    table = metadata.get("lines")
    files = table.get("files") if isinstance(table, dict) else None
    if not isinstance(files, list) or not isinstance(table.get("rows"), list):
        return []
    rows = []
    for row in table["rows"]:
        if not (isinstance(row, list) and len(row) == 3 and all(type(x) is int and x >= 0 for x in row)
                and row[1] < len(files) and isinstance(files[row[1]], str)) or rows and row[0] <= rows[-1][0]:
            return []
        rows.append((row[0], files[row[1]] if row[2] else None, row[2]))
    return rows


def lookup(metadata: dict, pc: int) -> tuple[str, int] | None:
    """(file, line) of the instruction at byte offset `pc` of a kernel, from its metadata (a code object's kernel
    entry); None where the kernel has no table or the instruction no line."""
    rows = _rows(metadata)
    at = bisect_right([row[0] for row in rows], pc) - 1
    return None if at < 0 or rows[at][2] == 0 else rows[at][1:]


def sources(metadata: dict, count: int) -> list[tuple[str, int] | None]:
    """(file, line), or None, for each of a kernel's `count` instructions: what `encode` was given, back."""
    rows, at, out = _rows(metadata), -1, []
    for index in range(count):
        while at + 1 < len(rows) and rows[at + 1][0] <= index * INSTRUCTION_BYTES:
            at += 1
        out.append(None if at < 0 or rows[at][2] == 0 else rows[at][1:])
    return out
