"""`python -m lapis.isa` prints the ISA reference page (docs/isa.md)."""

from lapis.isa.reference import markdown

print(markdown(), end="")
