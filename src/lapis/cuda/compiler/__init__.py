"""Layer 3: the lapis kernel compiler (the nvcc + ptxas of the stack).

    Python source --frontend--> typed SSA IR --passes--> clean IR --isel--> machine code on
    virtual registers --regalloc--> physical registers --layout--> rotated loops --codegen-->
    scheduled, encoded ISA
    --> an ELF code object (lapis.runtime.CodeObject)

`compile_kernel(pyfunc, argtypes)` runs every stage and keeps what each produced, so a
student can read them (`CompiledKernel.ir`, `.listing()`, `.resources()`). With
LAPIS_DUMP_DIR set, each stage is also written to files there. Results are kept in an
on-disk cache (`cache.py`), so a second run of a program reuses them.
"""

import functools
import hashlib
import os
from dataclasses import dataclass, field

from lapis import abi, trace
from lapis.cuda.compiler import cache, codegen, isel, layout, passes, regalloc
from lapis.cuda.compiler.errors import CompileError
from lapis.cuda.compiler.frontend import build_ir, kernarg_layout
from lapis.cuda.cooperative_groups import BARRIER_WORD
from lapis.isa import INSTRUCTION_BYTES, disassemble, encode_program
from lapis.runtime import CodeObject, KernelCode, line_table


@dataclass
class CompiledKernel:
    name: str
    argtypes: tuple
    ir: str
    machine_ir: str
    instructions: list
    registers: int
    predicates: int
    shared_bytes: int
    local_bytes: int
    kernarg_size: int
    arg_layout: list
    code_object: bytes
    variable_types: dict = field(default_factory=dict)
    spill_bytes: int = 0
    const_arrays: list = field(default_factory=list)    # hidden arguments after the kernel's own
    assertions: dict = field(default_factory=dict)      # trap number -> the assertion it reports (BPT.TRAP n)
    prints: dict = field(default_factory=dict)          # print() number -> its items, the printf FIFO's records

    @functools.cached_property
    def cooperative(self) -> bool:
        """Whether the kernel syncs its grid, so that it must be launched cooperatively (looked up at every
        launch: worked out once)."""
        return any(entry.get("name") == BARRIER_WORD for entry in self.arg_layout)

    def listing(self) -> str:
        """The machine code, cuobjdump -lineinfo style: a `// file:line` comment where the source line changes."""
        (kernel,) = CodeObject.from_bytes(self.code_object).kernels
        return disassemble(self.instructions, sources=line_table.sources(kernel.metadata, len(self.instructions)))

    def resources(self) -> str:
        """A ptxas -v style report."""
        return (f"ptxas info    : Compiling entry function '{self.name}' for 'lapis-isa'\n"
                f"ptxas info    : Used {self.registers} registers, {self.predicates} predicates, "
                f"{self.shared_bytes} bytes smem, {self.local_bytes} bytes lmem, {self.kernarg_size} bytes cmem[0] "
                f"(kernel arguments), {len(self.instructions) * INSTRUCTION_BYTES} bytes of code\n"
                f"ptxas info    : {self.spill_bytes} bytes of spill slots in local memory")


def compile_kernel(pyfunc, argtypes) -> CompiledKernel:
    """Compile a kernel for argument types, or take it from the on-disk cache (see cache.py)."""
    try:
        cache_key = cache.key(pyfunc, argtypes)
    except (OSError, TypeError):            # no source on disk (an interactive session): compile
        cache_key = None
    if os.environ.get("LAPIS_DUMP_DIR"):
        cache_key = None                    # asked for every stage's output: run every stage
    with trace.span(3, "compile", kernel=pyfunc.__name__, argtypes=[str(t) for t in argtypes]) as info:
        compiled = cache.load(cache_key) if cache_key else None
        info.update(cached=compiled is not None)
        if compiled is None:
            compiled = _compile(pyfunc, argtypes)
            if cache_key:
                cache.store(cache_key, compiled)
        info.update(registers=compiled.registers, instructions=len(compiled.instructions),
                    shared_bytes=compiled.shared_bytes, local_bytes=compiled.local_bytes)
    return compiled


def _compile(pyfunc, argtypes) -> CompiledKernel:
    """Every stage, from source to code object (the dump directory gets each stage's output)."""
    return compile_function(build_ir(pyfunc, list(argtypes)), argtypes)


def compile_function(func, argtypes) -> CompiledKernel:
    """Every stage after the frontend, from a kernel's IR (Python's, or PTX's: `ptx.py`) to its code object."""
    passes.optimize(func)
    ir_text = func.format()
    blocks = isel.select(func)
    machine_ir = "\n".join(f"{b.label}:\n" + "\n".join("    " + i.format() for i in b.insts) for b in blocks)
    assignment, registers, predicates, spill_bytes = regalloc.allocate(blocks, func)
    local_bytes = func.local_bytes + spill_bytes
    layout.arrange(blocks)
    insts, sources = codegen.lower(blocks, assignment)
    targets = {x.branch_target(i * INSTRUCTION_BYTES) // INSTRUCTION_BYTES
               for i, x in enumerate(insts) if x.op == "BRA"}
    insts = codegen.schedule(insts, targets)
    registers = max(registers, 1)
    kd = abi.KernelDescriptor(group_segment_fixed_size=func.shared_bytes, kernarg_size=func.kernarg_size,
                              private_segment_fixed_size=local_bytes,
                              compute_pgm_rsrc1=registers | (1 if any(i.op == "BAR" for i in insts) else 0) << 8)
    named = [{"name": n, **entry} for (n, _), entry in zip(func.params, func.arg_layout, strict=False)]
    meta = {"args": named + func.arg_layout[len(func.params):],
            "registers": registers, "predicates": predicates, "shared_bytes": func.shared_bytes,
            "local_bytes": local_bytes, "spill_bytes": spill_bytes, "kernarg_size": func.kernarg_size}
    lines = line_table.encode(sources)
    if lines:
        meta["lines"] = lines
    code_object = CodeObject([KernelCode(func.name, encode_program(insts), kd, meta)]).to_bytes()
    compiled = CompiledKernel(func.name, tuple(argtypes), ir_text, machine_ir, insts, registers, predicates,
                              func.shared_bytes, local_bytes, func.kernarg_size, func.arg_layout, code_object,
                              func.variable_types, spill_bytes, func.const_arrays, func.assertions, func.prints)
    dump = os.environ.get("LAPIS_DUMP_DIR")
    if dump:
        os.makedirs(dump, exist_ok=True)
        signature = hashlib.sha1(",".join(map(str, argtypes)).encode()).hexdigest()[:8]
        stem = os.path.join(dump, f"{func.name}-{signature}")   # one set of files per argument types
        for suffix, text in ((".ir", ir_text), (".mir", machine_ir), (".sass", compiled.listing()),
                             (".resources", compiled.resources())):
            with open(stem + suffix, "w") as f:
                f.write(text + "\n")
        with open(stem + ".co", "wb") as f:
            f.write(code_object)
    return compiled


__all__ = ["CompileError", "CompiledKernel", "compile_function", "compile_kernel", "kernarg_layout"]
