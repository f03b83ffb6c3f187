"""The lapis instruction set: opcode table, 128-bit encoding, assembler and disassembler.

A shared specification, not a layer: it imports no layer and holds no state. The compiler
(Layer 3, `lapis.cuda.compiler`) emits these instructions and the simulated GPU (Layer 0,
`lapis.hardware`) decodes and executes them, as ptxas and the silicon share one ISA manual.
"""

from lapis.isa.encoding import INSTRUCTION_BYTES, decode, decode_program, encode, encode_program, slots
from lapis.isa.instruction import Const, Control, Imm, Instruction, IsaError, Reg, make
from lapis.isa.opcodes import (
    BY_CODE,
    NUM_PREDICATES,
    NUM_REGISTERS,
    OPCODES,
    PT,
    RZ,
    SPECIAL_REGISTERS,
    Opcode,
    SpecialRegister,
)
from lapis.isa.text import assemble, bits_float, disassemble, float_bits, format_instruction, parse_instruction

__all__ = [
    "BY_CODE", "INSTRUCTION_BYTES", "NUM_PREDICATES", "NUM_REGISTERS", "OPCODES", "PT", "RZ",
    "SPECIAL_REGISTERS", "Const", "Control", "Imm", "Instruction", "IsaError", "Opcode", "Reg", "SpecialRegister",
    "assemble", "bits_float", "decode", "decode_program", "disassemble", "encode", "encode_program",
    "float_bits", "format_instruction", "make", "parse_instruction", "slots",
]
