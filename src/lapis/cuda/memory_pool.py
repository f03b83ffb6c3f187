"""Layer 3: the stream-ordered memory pool of a context (cudaMallocAsync's pool; PyTorch's caching
allocator can sit on exactly this).

    context.pool.allocate(nbytes)     # a cached block of the size class if one is free, else the runtime's
    context.pool.release(buffer)      # back into the cache: no driver call, no waiting
    context.pool.empty_cache()        # give every cached block back to the driver (after the device is idle)

Sizes round up to a class: multiples of 512 bytes below 1 MiB, of 2 MiB above (PyTorch's small and
large pools). A released block is reused by the next request of its class at once when no other
stream has work in flight: work on the default stream follows all earlier work (CUDA's legacy
default stream), so no later kernel can start before the ones that used the block have finished.
A block released while another stream is busy waits in `parked` until the streams are idle.
Freeing to the driver waits for the GPU to be idle, which is why the pool keeps blocks instead:
`del tensor` in a training loop costs nothing and the next step's tensors reuse the same memory.
`stats` feeds `memory_allocated`, `memory_reserved` and `memory_summary`. A block new from the driver holds
zeros (the driver clears memory as it frees it), which `take_fresh` tells its caller once: a zero fill of it
can be skipped, and skipping it keeps the simulated memory's pages unwritten (no host memory for them).
"""

import threading

from lapis import runtime

SMALL, SMALL_STEP, LARGE_STEP = 1 << 20, 512, 2 << 20


def size_class(nbytes: int) -> int:
    step = SMALL_STEP if nbytes <= SMALL else LARGE_STEP
    return max(step, -(-nbytes // step) * step)


class MemoryPool:
    def __init__(self, context):
        self.context = context
        self.cached: dict[int, list] = {}         # size class -> free runtime buffers
        self.parked: list = []                    # released while another stream was busy
        self.lock = threading.RLock()             # a finalizer may release on any thread, this one included
        self.fresh = None                         # the block last taken from the driver, until another goes out
        self.stats = {"allocated_bytes": 0, "reserved_bytes": 0, "peak_allocated_bytes": 0, "allocations": 0,
                      "cache_hits": 0, "driver_allocations": 0, "driver_frees": 0}

    def _other_streams_busy(self) -> bool:
        return any(s.pending for s in list(self.context.streams) if not s.default)

    def allocate(self, nbytes: int):
        size = size_class(nbytes)
        with self.lock:
            if self.parked and not self._other_streams_busy():
                for b in self.parked:
                    self.cached.setdefault(b.size, []).append(b)
                self.parked.clear()
            free = self.cached.get(size)
            if free:                            # a cached block: one trip through the lock
                buffer = free.pop()
                self.fresh = None
                self.stats["cache_hits"] += 1
                self._count(buffer)
                return buffer
        buffer = self._from_driver(size)
        with self.lock:
            self.fresh = buffer
            self._count(buffer)
        return buffer

    def take_fresh(self, va: int) -> bool:
        """Whether the block at `va` is the one the last allocation took from the driver (so it holds zeros): true
        once, for the caller that allocated it; any allocation since, here or on another thread, makes it false."""
        with self.lock:
            if self.fresh is not None and self.fresh.va == va:
                self.fresh = None
                return True
            return False

    def _count(self, buffer) -> None:
        s = self.stats
        s["allocations"] += 1
        s["allocated_bytes"] += buffer.size
        s["peak_allocated_bytes"] = max(s["peak_allocated_bytes"], s["allocated_bytes"])

    def _from_driver(self, size: int):
        pool = self.context.rt.device_pool(self.context.agent)
        try:
            buffer = pool.allocate(size)
        except runtime.OutOfMemory:
            self.empty_cache()                      # cached blocks of other sizes go back, then retry
            buffer = pool.allocate(size)            # a second OutOfMemory reaches the caller
        with self.lock:
            self.stats["driver_allocations"] += 1
            self.stats["reserved_bytes"] += buffer.size
        return buffer

    def release(self, buffer) -> None:
        with self.lock:
            if self._other_streams_busy():
                self.parked.append(buffer)
            else:
                self.cached.setdefault(buffer.size, []).append(buffer)
            self.stats["allocated_bytes"] -= buffer.size

    def forget(self, buffer) -> None:
        """A block freed to the driver directly (cudaFree): no longer in use nor reserved."""
        with self.lock:
            self.stats["allocated_bytes"] -= buffer.size
            self.stats["reserved_bytes"] -= buffer.size

    def empty_cache(self) -> None:
        """Free every cached block to the driver, once the device has finished the work that may use them."""
        self.context.synchronize()
        with self.lock:
            blocks = [b for free in self.cached.values() for b in free] + self.parked
            self.cached.clear()
            self.parked.clear()
            self.stats["reserved_bytes"] -= sum(b.size for b in blocks)
            self.stats["driver_frees"] += len(blocks)
        for b in blocks:
            if not b.freed:
                b.free()

    def summary(self) -> str:
        s = self.stats
        mib = 1 << 20
        cached = sum(len(v) for v in self.cached.values())
        return "\n".join([
            f"memory pool of {self.context.device}",
            f"  allocated: {s['allocated_bytes'] / mib:10.2f} MiB (peak {s['peak_allocated_bytes'] / mib:.2f} MiB)",
            f"  reserved:  {s['reserved_bytes'] / mib:10.2f} MiB ({cached} cached blocks)",
            f"  requests:  {s['allocations']} ({s['cache_hits']} from the cache, {s['driver_allocations']} from "
            f"the driver, {s['driver_frees']} given back)",
        ])
