"""Layer 0: the SIMT core: executes decoded machine code for a batch of resident thread blocks at once.

Every register is a numpy array over all lanes in flight (every thread of the resident
blocks), and each instruction is one numpy operation under an active-lane mask: there is
no loop over threads. The package, by concept:

- `launch.py`: `Dispatch`, `Counters`, `KernelFault`: what comes in, what goes out.
- `scheduler.py`: `SimtCore`: batches of blocks, the scheduling of lane groups (divergence,
  reconvergence, barriers, exits), the watchdog; the control instructions.
- `blocks.py`: `ResidentBlocks`: the lanes of a batch, their warps, shared and local memory
  and special registers.
- `registers.py`: `RegisterFile`: registers and predicates, reading and writing operands.
- `binders.py`: `BINDERS`, the one table from opcode to the function that binds an
  instruction to its executor, filled by the family modules.
- `integer.py`, `floating.py`, `memory_access.py` (with the coalescing, bank and L2
  counters), `warp.py` (shuffles, votes and the HMMA matrix unit): the instruction families.
- `simulator_caches.py`: `SimulatorCaches`, everything kept only for speed, behind one switch.
"""

# Each family module registers its binders in BINDERS as it is imported.
from lapis.hardware.simt import floating, integer, memory_access, warp  # noqa: F401
from lapis.hardware.simt.binders import BINDERS
from lapis.hardware.simt.blocks import ResidentBlocks
from lapis.hardware.simt.launch import Counters, Dispatch, KernelFault
from lapis.hardware.simt.scheduler import SimtCore
from lapis.hardware.simt.simulator_caches import SimulatorCaches

__all__ = ["BINDERS", "Counters", "Dispatch", "KernelFault", "ResidentBlocks", "SimtCore", "SimulatorCaches"]
