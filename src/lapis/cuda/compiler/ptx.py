"""Layer 3: the ptxas step, PTX into the compiler's typed SSA IR: `build_ir` and the instruction table.

`ptx_parse.py` reads PTX text; `ptx_function.py` builds a kernel's IR from it (registers, blocks, parameters,
variables); each opcode's translator is in `ptx_arith.py`, `ptx_memory.py` or `ptx_matrix.py`, and `OPCODES` is
the one table of them. From the IR on, a CUDA C++ kernel goes through the same back end as a Python one
(`compile_function`).
"""

from lapis.cuda.compiler import ir, ptx_arith, ptx_matrix, ptx_memory
from lapis.cuda.compiler.errors import CompileError
from lapis.cuda.compiler.ptx_function import PtxFunction, globals_image, immediate
from lapis.cuda.compiler.ptx_parse import Module

OPCODES = {**ptx_arith.TABLE, **ptx_memory.TABLE, **ptx_matrix.TABLE}


def build_ir(module: Module, name: str, filename: str, predicates_as_words: bool = False) -> ir.Function:
    """The IR of the module's kernel `name` (with `predicates_as_words`, its .pred registers kept in words: for a
    kernel that keeps more conditions live than the ISA's seven predicate registers hold)."""
    if name not in module.entries:
        known = ", ".join(sorted(module.entries)) or "none"
        raise CompileError(f"the module has no kernel {name!r} (its kernels: {known})", filename)
    return PtxFunction(module.entries[name], module, filename, OPCODES, predicates_as_words).build()


__all__ = ["OPCODES", "build_ir", "globals_image", "immediate"]
