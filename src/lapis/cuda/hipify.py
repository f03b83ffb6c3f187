"""Layer 3: hipify for lapis programs: rewrite a Python program's CUDA spellings into HIP's.

As hipify-perl does for CUDA C++, it works on identifiers, never inside strings or comments
(it reads the program with `tokenize`):

- imports: `from lapis import cuda` -> `from lapis import hip`; `from lapis.cuda import X` ->
  `from lapis.hip import X'`; `import lapis.cuda` -> `import lapis.hip`;
- the module: `lapis.cuda.` -> `lapis.hip.`, and a bare `cuda.` where `from lapis import cuda`
  bound that name (an alias, `... as gpu`, is left as it is and still works);
- every runtime-API name in `runtime_api.HIPIFY_TABLE`: `cudaMalloc` -> `hipMalloc`,
  `cudaMemcpyHostToDevice` -> `hipMemcpyHostToDevice`, `cudaSuccess` -> `hipSuccess`,
  `cudaError_t` -> `hipError_t`, `cudaLaunchKernel` -> `hipLaunchKernel` (the same arguments);
  `CudaError` -> `HipError`.

Framework device strings stay: `lapis.device("cuda")`, like `torch.device("cuda")` in PyTorch's
ROCm build, names the framework's CUDA-style device, and strings are never rewritten. So do
other objects' `.cuda` attributes (`tensor.cuda()`). A name left pointing at nothing in
`lapis.hip` is reported as a warning.
"""

import io
import tokenize
from collections import Counter

from lapis import hip
from lapis.cuda.hipify_result import Result
from lapis.cuda.runtime_api import HIPIFY_TABLE

# The order kinds are reported in (hipify-perl lists its kinds in a fixed order, zeros included).
KINDS = ["import", "module", "device", "memory", "stream", "event", "execution", "error", "type", "numeric_literal"]


_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}


def _statements(source: str) -> list[list[tokenize.TokenInfo]]:
    """The program's logical lines, as lists of their significant tokens."""
    statements, current = [], []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in _SKIP:
            continue
        if tok.type == tokenize.NEWLINE or tok.string == ";":
            if current:
                statements.append(current)
            current = []
        else:
            current.append(tok)
    if current:
        statements.append(current)
    return statements


def _dotted(tokens: list, start: int) -> tuple[list, int]:
    """The NAME tokens of a dotted module name from `start`, and the index after it."""
    names, i = [], start
    while i < len(tokens) and tokens[i].type == tokenize.NAME:
        names.append(tokens[i])
        if i + 1 < len(tokens) and tokens[i + 1].string == ".":
            i += 2
        else:
            i += 1
            break
    return names, i


class _Rewriter:
    def __init__(self, source: str, filename: str):
        self.source, self.filename = source, filename
        self.edits: dict[tuple[int, int], tuple[tokenize.TokenInfo, str]] = {}
        self.counts: Counter = Counter()
        self.warnings: list[str] = []

    def replace(self, tok: tokenize.TokenInfo, text: str, kind: str) -> None:
        if tok.start not in self.edits:
            self.edits[tok.start] = (tok, text)
            self.counts[kind] += 1

    def warn(self, tok: tokenize.TokenInfo, message: str) -> None:
        self.warnings.append(f"{self.filename}:{tok.start[0]}: {message}")

    def check_hip_name(self, tok: tokenize.TokenInfo, name: str) -> None:
        if not hasattr(hip, name):
            self.warn(tok, f"lapis.hip has no {name!r}; the converted program will not find it")

    def rewrite(self) -> Result:
        statements = _statements(self.source)
        bound = False               # whether `from lapis import cuda` binds the bare name `cuda`
        for tokens in statements:
            bound |= self.imports(tokens)
        for tokens in statements:
            if tokens[0].string not in ("from", "import"):
                self.names(tokens, bound)
        lines = self.source.splitlines(keepends=True)
        for (row, col), (tok, text) in sorted(self.edits.items(), reverse=True):
            line = lines[row - 1]
            lines[row - 1] = line[:col] + text + line[tok.end[1]:]
        return Result("".join(lines), self.counts, self.warnings, KINDS)

    def imports(self, tokens: list) -> bool:
        """Rewrite an import statement; returns whether it binds the bare name `cuda` to lapis.cuda."""
        first = tokens[0].string
        if first == "import":
            i = 1
            while i < len(tokens):
                names, i = _dotted(tokens, i)
                if [t.string for t in names[:2]] == ["lapis", "cuda"]:
                    self.replace(names[1], "hip", "import")
                    if len(names) > 2:
                        self.warn(names[1], f"module {'.'.join(t.string for t in names)} has no lapis.hip twin")
                while i < len(tokens) and tokens[i].string != ",":
                    i += 1
                i += 1
            return False
        if first != "from":
            return False
        module, i = _dotted(tokens, 1)
        path = [t.string for t in module]
        imported = [tokens[j] for j in range(i + 1, len(tokens)) if tokens[j].type == tokenize.NAME
                    and tokens[j - 1].string in ("import", ",", "(")]
        if path == ["lapis"]:
            binds = False
            for tok in imported:
                if tok.string == "cuda":
                    self.replace(tok, "hip", "import")
                    after = tokens.index(tok) + 1
                    binds |= after >= len(tokens) or tokens[after].string != "as"
            return binds
        if path[:2] == ["lapis", "cuda"]:
            if len(path) > 2:
                self.warn(module[1], f"imports from {'.'.join(path)} are left as they are (no lapis.hip twin)")
                return False
            self.replace(module[1], "hip", "import")
            for tok in imported:
                hip_name, kind = HIPIFY_TABLE.get(tok.string, (tok.string, None))
                if kind:
                    self.replace(tok, hip_name, kind)
                self.check_hip_name(tok, hip_name)
        return False

    def names(self, tokens: list, bound: bool) -> None:
        for i, tok in enumerate(tokens):
            if tok.type != tokenize.NAME:
                continue
            after_dot = i > 0 and tokens[i - 1].string == "."
            if tok.string == "cuda" and (after_dot and i > 1 and tokens[i - 2].string == "lapis"
                                         or bound and not after_dot):
                self.replace(tok, "hip", "module")
                if i + 2 < len(tokens) and tokens[i + 1].string == "." and tokens[i + 2].type == tokenize.NAME:
                    attr = tokens[i + 2].string
                    self.check_hip_name(tokens[i + 2], HIPIFY_TABLE.get(attr, (attr,))[0])
            elif tok.string in HIPIFY_TABLE:
                hip_name, kind = HIPIFY_TABLE[tok.string]
                self.replace(tok, hip_name, kind)


def hipify(source: str, filename: str = "<program>") -> Result:
    """The program with its CUDA spellings turned into HIP's, the counts by kind, and warnings.
    Raises SyntaxError (tokenize.TokenError) for a file Python cannot tokenize. A C/C++ file by its suffix
    (`.cu`, `.cuh`, `.cpp`, `.h`, ...) is CUDA C++, rewritten by `hipify_cpp` as hipify-perl does."""
    from lapis.cuda import hipify_cpp
    if hipify_cpp.is_cpp(filename):
        return hipify_cpp.hipify_cpp(source, filename)
    return _Rewriter(source, filename).rewrite()
