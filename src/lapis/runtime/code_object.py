"""Layer 2: code objects (the container the compiler writes) and executables (loaded code).

A code object is an ELF64 file, so `readelf -a` can open it:
  - one PT_LOAD segment: `.rodata` with a 64-byte kernel descriptor per kernel
    (`lapis.abi.KernelDescriptor`), then `.text` with each kernel's machine code;
  - `.note.lapis`: a note whose description is JSON metadata (kernel arguments and their
    kernarg offsets, register, shared and local memory use, the compiler's line table:
    `line_table.py`), as AMD code objects carry msgpack metadata in a note;
  - `.symtab`: `name` (the code, a function) and `name.kd` (its descriptor, an object).
e_machine is 0x4C50 ("LP"): the lapis ISA is no registered machine.

Loading (`Executable.load_code_object`) copies the segment into executable device memory;
a kernel's kernel_object is then the GPU address of its descriptor.
"""

import json
import struct
from dataclasses import dataclass, field

from lapis import abi, trace
from lapis.driver import NodeProperties
from lapis.isa import INSTRUCTION_BYTES, IsaError, decode_program
from lapis.isa.verify import check_program
from lapis.runtime.errors import HsaError

EM_LAPIS = 0x4C50
ELFOSABI_LAPIS = 0x4C
ET_EXEC = 2
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_NOTE = 1, 2, 3, 7
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4
PT_LOAD, PT_NOTE = 1, 4
NT_LAPIS_METADATA = 1
SEGMENT_OFFSET = 0x1000
CODE_ALIGN = 256


class CodeObjectError(HsaError, ValueError):
    """A code object the runtime refuses, or a misuse of an executable; `status` names the hsa_status_t code
    (HSA_STATUS_ERROR_INVALID_CODE_OBJECT unless the raiser says otherwise)."""

    def __init__(self, message: str, status: str = "HSA_STATUS_ERROR_INVALID_CODE_OBJECT"):
        super().__init__(message)
        self.status = status


@dataclass
class KernelCode:
    name: str
    code: bytes
    descriptor: abi.KernelDescriptor
    metadata: dict = field(default_factory=dict)


@dataclass
class CodeObject:
    kernels: list[KernelCode]
    target: str = "lapis-isa"

    # -- writing ------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        kd_bytes = abi.KERNEL_DESCRIPTOR_BYTES
        rodata_size = kd_bytes * len(self.kernels)
        text_addr = -(-rodata_size // CODE_ALIGN) * CODE_ALIGN
        text, code_addrs = bytearray(), []
        for k in self.kernels:
            text += bytes(-len(text) % CODE_ALIGN)
            code_addrs.append(text_addr + len(text))
            text += k.code
        rodata = bytearray()
        for i, k in enumerate(self.kernels):
            kd = abi.KernelDescriptor(**{**k.descriptor.__dict__,
                                         "kernel_code_entry_byte_offset": code_addrs[i] - i * kd_bytes,
                                         "code_size": len(k.code)})
            rodata += kd.pack()
        segment = bytes(rodata) + bytes(text_addr - rodata_size) + bytes(text)

        meta = json.dumps({"target": self.target, "kernels": [
            {"name": k.name, "symbol": k.name, "descriptor_symbol": k.name + ".kd", **k.metadata}
            for k in self.kernels]}, sort_keys=True).encode()
        note = struct.pack("<III", 6, len(meta), NT_LAPIS_METADATA) + b"LAPIS\0\0\0" + meta + bytes(-len(meta) % 4)

        strtab = bytearray(b"\0")
        symbols = [bytes(24)]

        def name_of(s: str) -> int:
            strtab.extend(s.encode() + b"\0")
            return len(strtab) - len(s) - 1
        for i, k in enumerate(self.kernels):
            symbols.append(struct.pack("<IBBHQQ", name_of(k.name), 0x12, 0, 2, code_addrs[i], len(k.code)))
            symbols.append(struct.pack("<IBBHQQ", name_of(k.name + ".kd"), 0x11, 0, 1, i * kd_bytes, kd_bytes))
        symtab = b"".join(symbols)

        shstrtab = bytearray(b"\0")
        names = {}
        for s in (".rodata", ".text", ".note.lapis", ".symtab", ".strtab", ".shstrtab"):
            names[s] = len(shstrtab)
            shstrtab.extend(s.encode() + b"\0")

        out = bytearray(SEGMENT_OFFSET)
        out += segment
        note_off = len(out)
        out += note
        out += bytes(-len(out) % 8)
        symtab_off = len(out)
        out += symtab
        strtab_off = len(out)
        out += strtab
        shstrtab_off = len(out)
        out += shstrtab
        out += bytes(-len(out) % 8)
        shoff = len(out)

        def section(name, sh_type, flags, addr, offset, size, link=0, info=0, align=1, entsize=0):
            return struct.pack("<IIQQQQIIQQ", names[name] if name else 0, sh_type, flags, addr, offset, size, link,
                               info, align, entsize)
        out += bytes(64)
        out += section(".rodata", SHT_PROGBITS, SHF_ALLOC, 0, SEGMENT_OFFSET, rodata_size, align=64)
        out += section(".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, text_addr, SEGMENT_OFFSET + text_addr,
                       len(text), align=CODE_ALIGN)
        out += section(".note.lapis", SHT_NOTE, 0, 0, note_off, len(note), align=4)
        out += section(".symtab", SHT_SYMTAB, 0, 0, symtab_off, len(symtab), link=5, info=1, align=8, entsize=24)
        out += section(".strtab", SHT_STRTAB, 0, 0, strtab_off, len(strtab))
        out += section(".shstrtab", SHT_STRTAB, 0, 0, shstrtab_off, len(shstrtab))
        phdrs = struct.pack("<IIQQQQQQ", PT_LOAD, 0x5, SEGMENT_OFFSET, 0, 0, len(segment), len(segment), 0x1000)
        phdrs += struct.pack("<IIQQQQQQ", PT_NOTE, 0x4, note_off, 0, 0, len(note), len(note), 4)
        ident = b"\x7fELF" + bytes([2, 1, 1, ELFOSABI_LAPIS, 0]) + bytes(7)
        header = ident + struct.pack("<HHIQQQIHHHHHH", ET_EXEC, EM_LAPIS, 1, 0, 64, shoff, 0, 64, 56, 2, 64, 7, 6)
        out[:64] = header
        out[64:64 + len(phdrs)] = phdrs
        return bytes(out)

    # -- reading ------------------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data: bytes) -> "CodeObject":
        image = LoadedImage.parse(data)
        kernels = []
        try:
            for meta in image.metadata["kernels"]:
                kd_addr = image.symbols[meta["descriptor_symbol"]][0]
                kd = abi.KernelDescriptor.unpack(image.segment[kd_addr:kd_addr + abi.KERNEL_DESCRIPTOR_BYTES])
                start = kd_addr + kd.kernel_code_entry_byte_offset
                info = {k: v for k, v in meta.items() if k not in ("name", "symbol", "descriptor_symbol")}
                kernels.append(KernelCode(meta["name"], image.segment[start:start + kd.code_size], kd, info))
            return cls(kernels, image.metadata.get("target", "lapis-isa"))
        except (struct.error, KeyError, TypeError) as e:            # metadata naming what is not there
            raise CodeObjectError(f"malformed lapis code object: {e!r}") from None


@dataclass
class LoadedImage:
    segment: bytes
    symbols: dict[str, tuple[int, int]]     # name -> (address in the segment, size)
    metadata: dict

    @classmethod
    def parse(cls, data: bytes) -> "LoadedImage":
        if len(data) < 64 or data[:4] != b"\x7fELF":
            raise CodeObjectError("not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise CodeObjectError("not a little-endian ELF64 file")
        e_type, machine = struct.unpack_from("<HH", data, 16)
        if machine != EM_LAPIS:
            raise CodeObjectError(f"ELF machine {machine:#x} is not the lapis ISA ({EM_LAPIS:#x})")
        phoff, shoff = struct.unpack_from("<QQ", data, 32)
        phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHH", data, 56)
        try:
            sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
            shstr = sections[shstrndx]
            by_name = {}
            for s in sections[1:]:
                end = data.index(b"\0", shstr[4] + s[0])
                by_name[data[shstr[4] + s[0]:end].decode()] = s
            load = next(struct.unpack_from("<IIQQQQQQ", data, phoff + i * 56) for i in range(phnum)
                        if struct.unpack_from("<I", data, phoff + i * 56)[0] == PT_LOAD)
            segment = data[load[2]:load[2] + load[5]]
            note = by_name[".note.lapis"]
            namesz, descsz, _ = struct.unpack_from("<III", data, note[4])
            desc_off = note[4] + 12 + -(-namesz // 4) * 4
            metadata = json.loads(data[desc_off:desc_off + descsz])
            symtab, strtab = by_name[".symtab"], by_name[".strtab"]
            symbols = {}
            for off in range(symtab[4] + 24, symtab[4] + symtab[5], 24):
                name_off, _, _, _, value, size = struct.unpack_from("<IBBHQQ", data, off)
                end = data.index(b"\0", strtab[4] + name_off)
                symbols[data[strtab[4] + name_off:end].decode()] = (value, size)
        except (struct.error, KeyError, IndexError, StopIteration, ValueError, OverflowError) as e:
            raise CodeObjectError(f"malformed lapis code object: {e!r}") from None
        return cls(segment, symbols, metadata)


def check_kernel(name: str, segment: bytes, kd_addr: int, device: NodeProperties) -> None:
    """Raise CodeObjectError unless the kernel whose descriptor sits at `kd_addr` of the loaded segment can run on
    `device` (a GPU's `NodeProperties`): its code inside the segment and whole instructions, a register count,
    shared and local memory and kernel arguments within the device's limits, and a program that names no register
    past its count and branches only to its own instructions (`isa.verify`), as ROCr's loader refuses a code object
    (HSA_STATUS_ERROR_INVALID_CODE_OBJECT) that the device would fault on."""
    if kd_addr < 0 or kd_addr + abi.KERNEL_DESCRIPTOR_BYTES > len(segment):
        raise CodeObjectError(f"kernel {name!r}: its descriptor at {kd_addr:#x} is outside the loaded segment")
    kd = abi.KernelDescriptor.unpack(segment[kd_addr:kd_addr + abi.KERNEL_DESCRIPTOR_BYTES])
    start = kd_addr + kd.kernel_code_entry_byte_offset
    limits = [
        (0 < kd.code_size and kd.code_size % INSTRUCTION_BYTES == 0,
         f"code of {kd.code_size} bytes is not a whole number of {INSTRUCTION_BYTES}-byte instructions"),
        (0 <= start and start + kd.code_size <= len(segment), f"code at {start:#x} is outside the loaded segment"),
        (0 < kd.registers <= device.max_registers_per_thread,
         f"declares {kd.registers} registers per thread; the device allows 1 to {device.max_registers_per_thread}"),
        (kd.group_segment_fixed_size <= device.shared_per_block,
         f"{kd.group_segment_fixed_size} bytes of shared memory exceed the device's {device.shared_per_block} "
         "per block"),
        (kd.private_segment_fixed_size <= device.max_local_per_thread,
         f"{kd.private_segment_fixed_size} bytes of local memory per thread exceed the device's "
         f"{device.max_local_per_thread}"),
        (kd.kernarg_size <= abi.MAX_KERNARG_BYTES,
         f"kernel arguments of {kd.kernarg_size} bytes exceed {abi.MAX_KERNARG_BYTES}"),
    ]
    for holds, why in limits:
        if not holds:
            raise CodeObjectError(f"kernel {name!r}: {why}")
    try:
        check_program(decode_program(segment[start:start + kd.code_size]), kd.registers, device.warp_size)
    except IsaError as e:
        raise CodeObjectError(f"kernel {name!r} is not a valid program: {e}") from None


@dataclass
class KernelSymbol:
    name: str
    kernel_object: int          # GPU address of the kernel descriptor
    kernarg_size: int
    group_segment_size: int
    private_segment_size: int
    registers: int
    metadata: dict


class Executable:
    """Code objects loaded onto an agent; frozen before its symbols are used (hsa_executable_*)."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.symbols: dict[str, KernelSymbol] = {}
        self.buffers = []
        self.frozen = False

    def load_code_object(self, agent, data: bytes) -> None:
        """Load a code object onto a GPU agent, once every kernel in it is checked against the agent (`check_kernel`):
        one the device could not run is refused here, before anything is allocated or dispatched."""
        if self.frozen:
            raise CodeObjectError("cannot load into a frozen executable", "HSA_STATUS_ERROR_FROZEN_EXECUTABLE")
        image = LoadedImage.parse(data)
        try:
            for meta in image.metadata["kernels"]:
                kd_addr = image.symbols[meta["descriptor_symbol"]][0]
                check_kernel(meta["name"], image.segment, kd_addr, agent.properties)
        except (KeyError, TypeError) as e:          # metadata naming what is not there
            raise CodeObjectError(f"malformed lapis code object: {e!r}") from None
        buffer = self.runtime.device_pool(agent).allocate(len(image.segment), executable=True)
        self.runtime.copy_to_device(agent, buffer.va, image.segment)
        self.buffers.append(buffer)
        for meta in image.metadata["kernels"]:
            kd_addr = image.symbols[meta["descriptor_symbol"]][0]
            kd = abi.KernelDescriptor.unpack(image.segment[kd_addr:kd_addr + abi.KERNEL_DESCRIPTOR_BYTES])
            self.symbols[meta["name"]] = KernelSymbol(
                meta["name"], buffer.va + kd_addr, kd.kernarg_size, kd.group_segment_fixed_size,
                kd.private_segment_fixed_size, kd.registers, meta)
        trace.emit(2, "load_code_object", agent=agent.name, bytes=len(data), va=buffer.va,
                   kernels=[m["name"] for m in image.metadata["kernels"]])

    def freeze(self) -> None:
        self.frozen = True

    def get_symbol(self, name: str) -> KernelSymbol:
        if not self.frozen:
            raise CodeObjectError("freeze the executable before looking up symbols",
                                  "HSA_STATUS_ERROR_INVALID_EXECUTABLE")
        try:
            return self.symbols[name]
        except KeyError:
            raise CodeObjectError(f"no kernel named {name!r} in this executable "
                                  f"(it has: {', '.join(self.symbols) or 'none'})",
                                  "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME") from None

    def destroy(self) -> None:
        for b in self.buffers:
            b.free()
        self.buffers.clear()
