"""Binary layouts shared by the software stack and the simulated device.

A shared specification, not a layer: it imports no layer and holds no state, like the
`hsa.h` and `amd_hsa_kernel_code.h` headers that ROCr and the firmware both follow. The
runtime (Layer 2) writes these bytes; the command processor (Layer 0) reads them.

- AQL packets (64 bytes, little-endian): kernel dispatch, barrier-AND/OR in the HSA
  layout, and a vendor-specific linear-copy packet that the copy engine consumes.
- The signal object (the memory an HSA signal handle points to; like amd_signal_t).
- The kernel descriptor (64 bytes, like AMD's), addressed by a dispatch's kernel_object.
- Constant bank 0 as the command processor fills it for a dispatch (NVIDIA's model:
  launch dimensions first, kernel arguments from KERNARG_CBANK_OFFSET).
"""

import functools
import operator
import struct
from dataclasses import dataclass, fields

PACKET_BYTES = 64

# Header: bits 0-7 type, bit 8 barrier, bits 9-10 acquire fence scope, bits 11-12 release scope.
PACKET_TYPE_VENDOR_SPECIFIC = 0
PACKET_TYPE_INVALID = 1
PACKET_TYPE_KERNEL_DISPATCH = 2
PACKET_TYPE_BARRIER_AND = 3
PACKET_TYPE_AGENT_DISPATCH = 4
PACKET_TYPE_BARRIER_OR = 5
PACKET_TYPE_NAMES = {0: "VENDOR_SPECIFIC", 1: "INVALID", 2: "KERNEL_DISPATCH", 3: "BARRIER_AND",
                     4: "AGENT_DISPATCH", 5: "BARRIER_OR"}
FENCE_SCOPE_NONE, FENCE_SCOPE_AGENT, FENCE_SCOPE_SYSTEM = 0, 1, 2
HEADER_BARRIER_BIT = 8
HEADER_ACQUIRE_SHIFT = 9
HEADER_RELEASE_SHIFT = 11

VENDOR_FORMAT_LINEAR_COPY = 1


def make_header(packet_type: int, barrier: bool = False, acquire: int = FENCE_SCOPE_SYSTEM,
                release: int = FENCE_SCOPE_SYSTEM) -> int:
    return (packet_type | int(barrier) << HEADER_BARRIER_BIT | acquire << HEADER_ACQUIRE_SHIFT
            | release << HEADER_RELEASE_SHIFT)


def header_fields(header: int) -> dict:
    return {"type": header & 0xFF, "barrier": bool(header >> HEADER_BARRIER_BIT & 1),
            "acquire_fence_scope": header >> HEADER_ACQUIRE_SHIFT & 3,
            "release_fence_scope": header >> HEADER_RELEASE_SHIFT & 3}


class _Layout:
    """A fixed little-endian struct: subclasses list fields in order with a struct format."""
    FORMAT = ""

    def pack(self) -> bytes:
        codec, values = _codec(type(self))
        return codec.pack(*values(self))

    @classmethod
    def unpack(cls, data: bytes):
        codec = _codec(cls)[0]
        if len(data) < codec.size:
            raise struct.error(f"{cls.__name__} needs {codec.size} bytes, got {len(data)}")
        return cls(*codec.unpack_from(data))

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("reserved")}


@functools.cache
def _codec(cls) -> tuple[struct.Struct, operator.attrgetter]:
    """A layout's compiled struct and a getter of its fields' values in order (packets are packed on every
    launch)."""
    return struct.Struct(cls.FORMAT), operator.attrgetter(*(f.name for f in fields(cls)))


@dataclass
class KernelDispatchPacket(_Layout):
    FORMAT = "<HHHHHHIIIIIQQQQ"
    header: int = 0
    setup: int = 1                  # bits 0-1: dimensions; bit 15 (lapis's): SETUP_COOPERATIVE
    workgroup_size_x: int = 1
    workgroup_size_y: int = 1
    workgroup_size_z: int = 1
    reserved0: int = 0
    grid_size_x: int = 1
    grid_size_y: int = 1
    grid_size_z: int = 1
    private_segment_size: int = 0
    group_segment_size: int = 0
    kernel_object: int = 0
    kernarg_address: int = 0
    reserved2: int = 0
    completion_signal: int = 0


# A cooperative dispatch (CUDA's cuLaunchCooperativeKernel, HIP's hipLaunchCooperativeKernel): every workgroup of
# the grid is resident at once, so that workgroups may wait for each other (a grid barrier). HSA leaves the setup
# field's upper bits reserved; lapis marks the dispatch with its top bit, where AMD's runtime uses a queue of its own.
SETUP_COOPERATIVE = 1 << 15


@dataclass
class BarrierPacket(_Layout):
    """Barrier-AND (type 3) or barrier-OR (type 5): up to five dependency signals."""
    FORMAT = "<HHI5QQQ"
    header: int = 0
    reserved0: int = 0
    reserved1: int = 0
    dep_signal0: int = 0
    dep_signal1: int = 0
    dep_signal2: int = 0
    dep_signal3: int = 0
    dep_signal4: int = 0
    reserved2: int = 0
    completion_signal: int = 0


@dataclass
class CopyPacket(_Layout):
    """Vendor-specific packet (type 0, format 1): copy `size` bytes from `src` to `dst` (GPU VAs)."""
    FORMAT = "<HHIQQQ3QQ"
    header: int = 0
    format: int = VENDOR_FORMAT_LINEAR_COPY
    reserved0: int = 0
    src: int = 0
    dst: int = 0
    size: int = 0
    reserved1: int = 0
    reserved2: int = 0
    reserved3: int = 0
    completion_signal: int = 0


for _cls in (KernelDispatchPacket, BarrierPacket, CopyPacket):
    assert struct.calcsize(_cls.FORMAT) == PACKET_BYTES, _cls

# Signal object (amd_signal_t): kind i64 @0, value i64 @8, event mailbox address u64 @16, event id
# u32 @24, start_ts u64 @32, end_ts u64 @40 (device clock, ns, written by the command processor when
# the packet the signal completes began and ended).
SIGNAL_BYTES = 64
SIGNAL_VALUE_OFFSET = 8
SIGNAL_MAILBOX_OFFSET = 16
SIGNAL_EVENT_ID_OFFSET = 24
SIGNAL_START_TS_OFFSET = 32
SIGNAL_END_TS_OFFSET = 40
SIGNAL_KIND_USER = 1


@dataclass
class SignalObject(_Layout):
    FORMAT = "<qqQI4xQQ16x"
    kind: int = SIGNAL_KIND_USER
    value: int = 0
    event_mailbox_ptr: int = 0
    event_id: int = 0
    start_ts: int = 0
    end_ts: int = 0


assert struct.calcsize(SignalObject.FORMAT) == SIGNAL_BYTES


@dataclass
class KernelDescriptor(_Layout):
    """64 bytes at a kernel_object address. `code_size` sits in AMD's reserved bytes @24:
    the simulated front end decodes a kernel's whole program once, so it needs its length."""
    FORMAT = "<IIIIqI16xIIIHHI"
    group_segment_fixed_size: int = 0
    private_segment_fixed_size: int = 0
    kernarg_size: int = 0
    reserved0: int = 0
    kernel_code_entry_byte_offset: int = 0
    code_size: int = 0
    compute_pgm_rsrc3: int = 0
    compute_pgm_rsrc1: int = 0      # bits 0-7: registers per thread; bits 8-15: barriers used
    compute_pgm_rsrc2: int = 0
    kernel_code_properties: int = 0
    kernarg_preload: int = 0
    reserved2: int = 0

    @property
    def registers(self) -> int:
        return self.compute_pgm_rsrc1 & 0xFF


KERNEL_DESCRIPTOR_BYTES = 64
# The simulated front end reads and decodes a kernel's whole program at once (a real one fetches as it goes), so
# a descriptor's code_size is bounded: 16 MiB, a million instructions, far past any compiled kernel, and no
# 4 GiB host read for a descriptor that claims one.
MAX_CODE_BYTES = 1 << 24
assert struct.calcsize(KernelDescriptor.FORMAT) == KERNEL_DESCRIPTOR_BYTES

# Constant bank 0 of a dispatch: blockDim at 0x0, gridDim (in blocks) at 0xc, the warp size at
# 0x18, kernel arguments from 0x160.
CBANK_BLOCK_DIM = 0x0
CBANK_GRID_DIM = 0xC
CBANK_WARP_SIZE = 0x18
KERNARG_CBANK_OFFSET = 0x160
MAX_KERNARG_BYTES = 4096
CBANK_BYTES = KERNARG_CBANK_OFFSET + MAX_KERNARG_BYTES
