"""Layer 3: the host API, one implementation under two spellings (`lapis.cuda`, `lapis.hip`).

An `Api` sees the GPUs of one vendor profile family: `lapis.cuda` the NVIDIA-like ones
(h200), `lapis.hip` the AMD-like ones (mi300x), as each vendor's runtime lists only its
own devices. Everything else — contexts, arrays, launches — is shared.
"""

import contextlib
import math
import threading
from dataclasses import dataclass

import numpy as np

from lapis import runtime, trace
from lapis.cuda.compiler.device_function import DeviceFunction
from lapis.cuda.context import Context, Device, Event, Stream
from lapis.cuda.devicearray import DeviceNDArray, MappedNDArray, contiguous_strides
from lapis.cuda.dispatcher import Dispatcher
from lapis.cuda.errors import CudaSupportError
from lapis.cuda.signatures import is_signature


@dataclass(frozen=True, repr=False)
class DeviceProperties:
    """torch.cuda.get_device_properties(): one GPU's facts under PyTorch's attribute names, then
    lapis's own (the simulated profile and the peaks a roofline is drawn against). Read once from
    what the runtime reports of the agent, so later code reads typed fields, not profile keys."""
    name: str
    major: int                              # compute capability
    minor: int
    total_memory: int                       # bytes of device memory
    multi_processor_count: int              # SMs (NVIDIA) or CUs (AMD)
    warp_size: int                          # 32, or AMD's wavefront of 64
    max_threads_per_multi_processor: int
    shared_memory_per_block: int            # bytes a block may use
    regs_per_multiprocessor: int            # 32-bit registers per SM
    L2_cache_size: int                      # bytes
    gcnArchName: str                        # AMD's architecture name ("" on NVIDIA-like GPUs)
    profile: str                            # the simulated profile, "h200" or "mi300x"
    peak_fp32_flops: float                  # FLOP/s
    peak_matrix_flops: float                # FLOP/s on the matrix units
    memory_bandwidth: float                 # DRAM bytes/s
    l2_bandwidth: float                     # L2 bytes/s

    @classmethod
    def of(cls, agent: runtime.Agent) -> "DeviceProperties":
        p = agent.properties
        major, minor = p.compute_capability
        return cls(name=p.marketing_name, major=major, minor=minor, total_memory=p.memory_bytes,
                   multi_processor_count=p.compute_units, warp_size=p.warp_size,
                   max_threads_per_multi_processor=p.max_threads_per_unit,
                   shared_memory_per_block=p.shared_per_block, regs_per_multiprocessor=p.registers_per_unit,
                   L2_cache_size=p.reported_l2_bytes, gcnArchName="gfx942" if p.vendor == "amd" else "",
                   profile=p.profile, peak_fp32_flops=p.fp32_tflops * 1e12, peak_matrix_flops=p.matrix_tflops * 1e12,
                   memory_bandwidth=p.memory_bandwidth, l2_bandwidth=p.l2_bandwidth)

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 2**20}MB, multi_processor_count={self.multi_processor_count})")


class DeviceUse:
    """One of numba's cuda.gpus: the device's attributes, and `with cuda.gpus[i]:` makes it current for the block."""

    def __init__(self, api: "Api", index: int):
        self._api, self._index, self._before = api, index, []

    def __getattr__(self, name):
        return getattr(self._api.context(self._index).device, name)

    def __enter__(self):
        self._before.append(self._api.current_device())
        return self._api.select_device(self._index)

    def __exit__(self, *exc) -> None:
        self._api.select_device(self._before.pop())


class DeviceList:
    """numba's cuda.gpus: the API's devices, by index (each a `DeviceUse`); `current` is the current one."""

    def __init__(self, api: "Api"):
        self._api = api

    def __len__(self) -> int:
        return self._api.device_count()

    def __getitem__(self, index: int) -> DeviceUse:
        if not -len(self) <= index < len(self):
            raise IndexError(f"device {index} out of range ({len(self)} present)")
        return DeviceUse(self._api, index % len(self))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def current(self) -> DeviceUse:
        return self[self._api.current_device()]


class Api:
    def __init__(self, name: str, vendor: str):
        self.name, self.vendor = name, vendor
        self._contexts: dict[int, Context] = {}
        self._current = 0
        self._lock = threading.RLock()
        self._agents_of: tuple = (None, [])     # (runtime, its agents of this vendor): asked on every op

    # -- devices ------------------------------------------------------------------------------
    def _agents(self) -> list:
        rt = runtime.init()
        if self._agents_of[0] is not rt:        # a runtime's agents are fixed when it opens
            self._agents_of = (rt, [a for a in rt.gpu_agents if a.vendor == self.vendor])
        return self._agents_of[1]

    def device_count(self) -> int:
        return len(self._agents())

    def is_available(self) -> bool:
        return self.device_count() > 0

    def detect(self) -> bool:
        """numba's cuda.detect(): print the devices found and whether they are supported (every simulated one is);
        whether there is one."""
        n = self.device_count()
        print(f"Found {n} {self.name.upper()} devices")
        for i in range(n):
            p = self.get_device_properties(i)
            print(f"id {i}    {p.name!r:<40} [SUPPORTED]")
            print(f"{'Compute Capability':>40}: {p.major}.{p.minor}")
            print(f"{'Simulated profile':>40}: {p.profile}")
        print(f"Summary:\n\t{n}/{n} devices are supported")
        return n > 0

    def select_device(self, index: int) -> Device:
        if not 0 <= index < self.device_count():
            raise CudaSupportError(f"{self.name}: no device {index} ({self.device_count()} present)")
        self._current = index
        return self.get_current_device()

    def get_current_device(self) -> Device:
        return self.context(self._current).device

    # torch.cuda's names for the same facts
    def current_device(self) -> int:
        return self._current

    def set_device(self, index: int) -> None:
        self.select_device(index)

    def get_device_name(self, device=None) -> str:
        return self.get_device_properties(device).name

    def get_device_properties(self, device=None) -> "DeviceProperties":
        return DeviceProperties.of(self.context(self._index(device)).agent)

    def _index(self, device) -> int:
        """A device index from torch's spellings: None (the current device), an int, 'cuda:1', or an object
        with an `index` (torch.device, lapis.device)."""
        if device is None:
            return self._current
        if isinstance(device, int):
            return device
        if isinstance(device, str):
            return int(device.partition(":")[2] or self._current)
        return self._current if device.index is None else device.index

    def Stream(self, device=None, priority: int = 0) -> Stream:  # noqa: N802 - torch.cuda.Stream's spelling
        """torch.cuda.Stream(device=None, priority=0): a new stream with its own queue (priority is accepted
        and ignored: the command processor serves queues round robin)."""
        return self.context(self._index(device)).create_stream()

    def Event(self, enable_timing: bool = False, blocking: bool = False,  # noqa: N802 - torch.cuda.Event
              interprocess: bool = False) -> Event:
        """torch.cuda.Event(enable_timing=False): record(), synchronize(), query(), elapsed_time(end)."""
        return Event(self, enable_timing)

    def current_stream(self, device=None) -> Stream:
        """torch.cuda.current_stream(): the device's default stream (lapis has no stream context manager)."""
        return Stream(self.context(self._index(device)))

    def context(self, index: int | None = None) -> Context:
        index = self._current if index is None else index
        with self._lock:
            ctx = self._contexts.get(index)
            if ctx is None:
                agents = self._agents()
                if not 0 <= index < len(agents):
                    raise CudaSupportError(f"{self.name}: no {self.vendor} GPU with index {index} is present "
                                           f"(LAPIS_GPUS lists the simulated GPUs)")
                ctx = self._contexts[index] = Context(Device(index, agents[index], self.name))
            return ctx

    def current_context(self, devnum: int | None = None) -> Context:
        return self.context(devnum)

    def default_stream(self) -> Stream:
        return Stream(self.context())

    def stream(self) -> Stream:
        """A new stream on the current device, with its own queue (numba's cuda.stream())."""
        return self.context().create_stream()

    def event(self, timing: bool = True) -> Event:
        return Event(self, timing)

    def event_elapsed_time(self, start: Event, end: Event) -> float:
        """Milliseconds of device time between two recorded events."""
        return start.elapsed_time(end)

    def owner_of(self, address: int):
        """(context, Allocation) of a device address this API handed out, or None."""
        for ctx in list(self._contexts.values()):
            allocation = ctx.find_allocation(address)
            if allocation is not None:
                return ctx, allocation
        return None

    def device_range(self, address: int, count: int) -> tuple[Context, int]:
        """(context, address) of `count` bytes of device memory at `address`, which this API handed out; a
        ValueError saying why not (freed, never allocated, or running past its allocation)."""
        found = self.owner_of(address)
        if found is None:
            raise ValueError(f"{address:#x} is not in device memory allocated through lapis.{self.name} (freed "
                             "already?)")
        context, allocation = found
        if address + count > allocation.va + allocation.size:
            raise ValueError(f"{count} bytes at {address:#x} overrun the allocation of {allocation.size} bytes at "
                             f"{allocation.va:#x}")
        return context, address

    def is_cuda_array(self, obj) -> bool:
        """Whether `obj` describes device memory by the CUDA Array Interface (numba's cuda.is_cuda_array): a device
        array, a GPU tensor."""
        return hasattr(obj, "__cuda_array_interface__")

    def as_cuda_array(self, obj, sync: bool = True) -> DeviceNDArray:
        """A device array viewing the memory of `obj`, an object with a `__cuda_array_interface__` (a GPU tensor),
        without a copy (numba's cuda.as_cuda_array): a kernel's writes to it are the object's."""
        if not self.is_cuda_array(obj):
            raise TypeError("*obj* doesn't implement the cuda array interface.")        # numba's words
        return self.from_cuda_array_interface(obj.__cuda_array_interface__, owner=obj, sync=sync)

    def from_cuda_array_interface(self, desc: dict, owner=None, sync: bool = True) -> DeviceNDArray:
        """A device array viewing the memory a CUDA Array Interface dict describes (numba's
        cuda.from_cuda_array_interface). The memory must be an allocation of this API, which the view keeps alive
        (`owner` need not be held). Work queued on the device's streams is in order with the view's use, so `sync`
        has nothing to wait for; a `stream` entry is taken as the producer's, as numba takes it."""
        if desc.get("mask") is not None:
            raise NotImplementedError("Masked arrays are not supported")              # numba's words
        shape = tuple(int(n) for n in desc["shape"])
        dtype = np.dtype(desc["typestr"])
        address = int(desc["data"][0])
        strides = desc.get("strides")
        strides = (tuple(int(s) for s in strides) if strides is not None
                   else contiguous_strides(shape, dtype.itemsize, "C"))
        if math.prod(shape) == 0:
            extent = (0, 0)
        else:            # the lowest and one past the highest byte the view reaches (a stride may be negative)
            extent = (sum(min(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True)),
                      sum(max(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True)) + dtype.itemsize)
        found = self.owner_of(address)
        if found is None:
            raise ValueError(f"{address:#x} is not in device memory allocated through lapis.{self.name}: a CUDA "
                             "Array Interface here describes this API's own allocations (a tensor on another "
                             "device type, or freed memory?)")
        context, allocation = found
        if address + extent[0] < allocation.va or address + extent[1] > allocation.va + allocation.size:
            raise ValueError(f"the array of shape {shape} and strides {strides} at {address:#x} reaches past its "
                             f"allocation of {allocation.size} bytes at {allocation.va:#x}")
        return DeviceNDArray(shape, strides, dtype, context, allocation, address)

    def context_for(self, args, stream) -> Context:
        """The context a launch runs in: its stream's, else its first device array's, else the current one."""
        if isinstance(stream, Stream):
            return stream.context
        for a in args:
            if isinstance(a, DeviceNDArray):
                return a.context
        return self.context()

    # -- memory -------------------------------------------------------------------------------
    def device_array(self, shape, dtype=np.float64, order: str = "C", stream=0) -> DeviceNDArray:
        return DeviceNDArray.allocate(self.context(), shape, dtype, order)

    def device_array_like(self, ary, stream=0) -> DeviceNDArray:
        """An uninitialized device array of ary's shape, dtype and order; ary is a host or device array."""
        return self.device_array(ary.shape, ary.dtype, _order_of(ary))

    def to_device(self, obj, stream=0, copy: bool = True, to=None) -> DeviceNDArray:
        if isinstance(obj, DeviceNDArray):
            return obj
        ary = np.asarray(obj)
        if not (ary.flags.c_contiguous or ary.flags.f_contiguous):
            ary = np.ascontiguousarray(ary)
        d = to if to is not None else self.device_array_like(ary)
        if copy:
            d.copy_to_device(ary, stream)
        return d

    def pinned_array(self, shape, dtype=np.float64, order: str = "C") -> np.ndarray:
        """A numpy array in pinned host memory of the current device: copies between it and that
        device go straight through the copy engine, without the staging buffer."""
        return self.context().pinned_array(shape, dtype, order)

    def mapped_array(self, shape, dtype=np.float64, strides=None, order: str = "C", stream=0, portable=False,
                     wc=False) -> np.ndarray:
        """numba's cuda.mapped_array: a numpy array in pinned host memory of the current device that kernels
        read and write in place (no copy around a launch; wait for the kernel before reading its writes).
        `strides`, `portable` and `wc` (write-combined) are accepted and ignored."""
        return self.context().pinned_array(shape, dtype, order).view(MappedNDArray)

    def managed_array(self, shape, dtype=np.float64, strides=None, order: str = "C", stream=0,
                      attach_global=True) -> np.ndarray:
        """numba's cuda.managed_array (CUDA's managed memory): one array the host and kernels both use in place.
        lapis gives it as `mapped_array` does, in pinned host memory the device reaches over PCIe: the
        simulated driver does not migrate pages to VRAM, so kernels pay PCIe for its bytes."""
        return self.mapped_array(shape, dtype, strides, order, stream)

    def pinned_array_like(self, ary) -> np.ndarray:
        """numba's cuda.pinned_array_like: a pinned array of ary's shape, dtype and order (C unless only F fits)."""
        return self.pinned_array(ary.shape, ary.dtype, _order_of(ary))

    def mapped_array_like(self, ary, stream=0, portable=False, wc=False) -> np.ndarray:
        """numba's cuda.mapped_array_like: a mapped array of ary's shape, dtype and order."""
        return self.mapped_array(ary.shape, ary.dtype, order=_order_of(ary))

    def list_devices(self) -> list[Device]:
        """numba's cuda.list_devices(): every device of this API."""
        return [self.context(i).device for i in range(self.device_count())]

    @contextlib.contextmanager
    def pinned(self, *arrays):
        """numba's `with cuda.pinned(a, b):` (cudaHostRegister for the block): lapis cannot pin memory numpy
        already owns, so the arrays stay as they are and their copies go through the staging buffer, as any
        unpinned array's; use pinned_array for memory the copy engine reaches directly."""
        yield

    def synchronize(self) -> None:
        """Wait for the work queued on each device of this API in use. With no such GPU it raises, as
        torch.cuda.synchronize() does without one, rather than return at once: when only AMD-profile GPUs are
        simulated, framework work on 'cuda' runs through `lapis.hip` (`lapis.accelerator.synchronize()` waits
        for it whatever the vendor)."""
        if not self.device_count():
            self.context()                  # raises CudaSupportError, naming LAPIS_GPUS
        with trace.span(3, "device_synchronize", api=self.name):
            for ctx in list(self._contexts.values()):
                ctx.synchronize()

    # -- the memory pool (torch.cuda's memory_* names) ----------------------------------------
    def _pool(self, device):
        index = device if isinstance(device, int) else self._current if device is None else device.index
        return self.context(index).pool

    def memory_allocated(self, device=None) -> int:
        """Bytes of device memory in arrays that are alive (in size classes, as PyTorch counts)."""
        return self._pool(device).stats["allocated_bytes"]

    def max_memory_allocated(self, device=None) -> int:
        return self._pool(device).stats["peak_allocated_bytes"]

    def memory_reserved(self, device=None) -> int:
        """Bytes the pool holds from the driver: in use plus cached."""
        return self._pool(device).stats["reserved_bytes"]

    def memory_stats(self, device=None) -> dict:
        return dict(self._pool(device).stats)

    def memory_summary(self, device=None) -> str:
        return self._pool(device).summary()

    def empty_cache(self) -> None:
        """Give the cached blocks of every device's pool back to the driver."""
        for ctx in list(self._contexts.values()):
            ctx.pool.empty_cache()

    # -- kernels ------------------------------------------------------------------------------
    def jit(self, func=None, *, device: bool = False, **options):
        """@jit (a kernel), @jit("void(float32[:], ...)"), @jit(void(float32[:], ...)) or @jit([signature, ...]) (a
        kernel compiled now for those argument types, see `signatures.py`), or @jit(device=True) (a function
        kernels call, inlined; a device function's signature is not needed: it compiles where it is called)."""
        signatures = [func] if is_signature(func) else list(func) if isinstance(func, list | tuple) else None

        def wrap(f):
            return DeviceFunction(f) if device else Dispatcher(f, self, signatures)
        return wrap(func) if callable(func) else wrap


def _order_of(ary) -> str:
    """"F" for a host or device array that is Fortran-contiguous only, else "C" (numba's *_like arrays keep the
    layout)."""
    return "F" if ary.flags["F_CONTIGUOUS"] and not ary.flags["C_CONTIGUOUS"] else "C"
