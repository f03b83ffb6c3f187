"""Layer 2, `lapis.runtime`: the system runtime (ROCr / the CUDA driver API of the stack).

Owns: agents and their memory pools, user-mode AQL queues and the packets in them,
signals, asynchronous copies through the copy engine, and loading code objects into
executables. It reaches the device only through the driver (`lapis.driver`).

    rt = runtime.init()
    gpu = rt.gpu_agents[0]
    queue = rt.create_queue(gpu)
    done = rt.create_signal(1)
    queue.submit(abi.KernelDispatchPacket(header=..., completion_signal=done.handle, ...))
    done.wait(Condition.EQ, 0)
"""

import threading

import numpy as np

from lapis import abi, driver, trace
from lapis.runtime.agent import Agent
from lapis.runtime.code_object import CodeObject, CodeObjectError, Executable, KernelCode, KernelSymbol
from lapis.runtime.errors import HsaError, OutOfMemory
from lapis.runtime.memory import Buffer, MemoryPool
from lapis.runtime.queue import AqlQueue, QueueError, QueueFull, describe_packet
from lapis.runtime.signal import Condition, Signal, SignalDestroyed, SignalPool

# A copy between pageable host memory and the GPU goes through a pinned staging buffer this large at most, a piece
# at a time, as a CUDA driver pipelines one: a copy as large as the GPU costs the host no second buffer of its size.
STAGING_BYTES = 64 << 20


class Runtime:
    """One process's view of the runtime: its driver handle, agents, pools, signals and queues."""

    def __init__(self):
        self.kfd = driver.open()
        self.cpu_agent = Agent("cpu", "cpu")
        self.gpu_agents = [Agent(f"gpu{n.gpu_id}:{n.profile}", "gpu", n.gpu_id, n)
                           for n in driver.system().topology()]
        self._pools = {(a.gpu_id, kind): MemoryPool(self, a, kind)
                       for a in self.gpu_agents for kind in ("device", "host", "kernarg")}
        self._signals: SignalPool | None = None
        self._copy: dict[int, tuple[AqlQueue, Buffer | None]] = {}
        self._lock = threading.RLock()
        self._error_event: int | None = None
        self._error_thread: threading.Thread | None = None
        self._watched: list[AqlQueue] = []
        self._closing = False

    @property
    def agents(self) -> list[Agent]:
        return [self.cpu_agent, *self.gpu_agents]

    def device_pool(self, agent: Agent) -> MemoryPool:
        return self._pools[(agent.gpu_id, "device")]

    def host_pool(self, agent: Agent) -> MemoryPool:
        return self._pools[(agent.gpu_id, "host")]

    def kernarg_pool(self, agent: Agent) -> MemoryPool:
        return self._pools[(agent.gpu_id, "kernarg")]

    def host_pool_any(self) -> MemoryPool:
        return self.host_pool(self.gpu_agents[0])

    # -- signals and queues -------------------------------------------------------------------
    def create_signal(self, initial: int, interrupt: bool = True) -> Signal:
        with self._lock:
            if self._signals is None:
                self._signals = SignalPool(self)
        return self._signals.create(initial, interrupt)

    def create_queue(self, agent: Agent, packets: int = 256, kind: str = "compute",
                     error_callback=None) -> AqlQueue:
        queue = AqlQueue(self, agent, packets, kind, error_callback)
        if error_callback is not None:
            with self._lock:
                self._watched.append(queue)
        return queue

    # -- the event thread: queue errors reach their callbacks (ROCr's async event handler) ----
    def queue_error_event(self) -> int:
        """The driver event every queue with an error callback names; a thread waits on it."""
        with self._lock:
            if self._error_event is None:
                self._error_event = self.kfd.ioctl(driver.Ioctl.CREATE_EVENT, driver.CreateEventArgs()).event_id
                self._error_thread = threading.Thread(target=self._watch_errors, name="runtime event thread",
                                                      daemon=True)
                self._error_thread.start()
            return self._error_event

    def _watch_errors(self) -> None:
        reported: set[int] = set()
        while not self._closing:
            self.kfd.ioctl(driver.Ioctl.WAIT_EVENTS, driver.WaitEventsArgs([self._error_event]))
            with self._lock:
                watched = [q for q in self._watched if not q.destroyed and q.queue_id not in reported]
            for queue in watched:
                state, error = queue.status()
                if state != "active":
                    reported.add(queue.queue_id)
                    queue.error_callback(queue, queue.error(state, error))

    # -- copies through the copy engine -------------------------------------------------------
    def _copy_queue(self, agent: Agent, staging_bytes: int) -> tuple[AqlQueue, Buffer]:
        with self._lock:
            queue, staging = self._copy.get(agent.gpu_id, (None, None))
            if queue is not None and queue.status()[0] != "active":   # stopped by a reset or an error
                queue.destroy()
                queue = None
            if queue is None:
                queue = self.create_queue(agent, 64, "copy")
            if staging is None or staging.size < staging_bytes:
                if staging is not None:
                    staging.free()
                staging = self.host_pool(agent).allocate(max(staging_bytes, 1 << 20), internal=True)
            self._copy[agent.gpu_id] = (queue, staging)
            return queue, staging

    def async_copy(self, agent: Agent, dst: int, src: int, size: int, completion: Signal,
                   deps: tuple[Signal, ...] = ()) -> None:
        """Queue a copy of `size` bytes between GPU addresses on the agent's copy engine; it starts
        once every signal in `deps` is 0 (hsa_amd_memory_async_copy's dependency signals)."""
        queue, _ = self._copy_queue(agent, 0)
        for first in range(0, len(deps), 5):
            handles = [d.handle for d in deps[first:first + 5]] + [0] * 5
            queue.submit(abi.BarrierPacket(header=abi.make_header(abi.PACKET_TYPE_BARRIER_AND),
                                           dep_signal0=handles[0], dep_signal1=handles[1], dep_signal2=handles[2],
                                           dep_signal3=handles[3], dep_signal4=handles[4]))
        queue.submit(abi.CopyPacket(header=abi.make_header(abi.PACKET_TYPE_VENDOR_SPECIFIC), src=src, dst=dst,
                                    size=size, completion_signal=completion.handle))

    def _copy_and_wait(self, agent: Agent, dst: int, src: int, size: int) -> None:
        done = self.create_signal(1)
        try:
            self.async_copy(agent, dst, src, size, done)
            if done.wait(Condition.EQ, 0) != 0:
                queue, _ = self._copy_queue(agent, 0)
                queue.check()
                raise QueueError(f"copy of {size} bytes from {src:#x} to {dst:#x} failed")
        finally:
            done.destroy()

    def copy_to_device(self, agent: Agent, dst: int, data: bytes | np.ndarray) -> None:
        """Copy host bytes to a GPU address: through a pinned staging buffer, as for pageable memory."""
        buf = np.frombuffer(data, np.uint8) if isinstance(data, bytes | bytearray) else \
            np.ascontiguousarray(data).view(np.uint8).ravel()
        with self._lock:
            _, staging = self._copy_queue(agent, min(buf.size, STAGING_BYTES))
            with trace.span(2, "memory_copy", kind="host_to_device", agent=agent.name, dst=dst, bytes=buf.size):
                for offset in range(0, buf.size, STAGING_BYTES):
                    piece = buf[offset:offset + STAGING_BYTES]
                    staging.host[:piece.size] = piece
                    self._copy_and_wait(agent, dst + offset, staging.va, piece.size)

    def copy_to_host(self, agent: Agent, src: int, size: int) -> np.ndarray:
        out = np.empty(size, np.uint8)
        with self._lock:
            _, staging = self._copy_queue(agent, min(size, STAGING_BYTES))
            with trace.span(2, "memory_copy", kind="device_to_host", agent=agent.name, src=src, bytes=size):
                for offset in range(0, size, STAGING_BYTES):
                    n = min(STAGING_BYTES, size - offset)
                    self._copy_and_wait(agent, staging.va, src + offset, n)
                    out[offset:offset + n] = staging.host[:n]
        return out

    def copy_on_device(self, agent: Agent, dst: int, src: int, size: int, kind: str = "device_to_device") -> None:
        """Copy between GPU addresses, waiting for it. Either side may be host memory mapped for the GPU
        (pinned memory): the copy engine reaches it over PCIe, with no staging; `kind` names the
        direction in the trace."""
        with trace.span(2, "memory_copy", kind=kind, agent=agent.name, src=src, dst=dst, bytes=size):
            self._copy_and_wait(agent, dst, src, size)

    def memory_info(self, agent: Agent) -> tuple[int, int]:
        """(free, total) bytes of the GPU's memory, every process's allocations counted (what
        HSA_AMD_AGENT_INFO_MEMORY_AVAIL and cuMemGetInfo report)."""
        t = self.kfd.ioctl(driver.Ioctl.GET_TELEMETRY, driver.GpuArgs(agent.gpu_id))
        return t.memory_total - t.memory_used, t.memory_total

    def clock_ns(self, agent: Agent) -> int:
        return self.kfd.ioctl(driver.Ioctl.GET_CLOCK_COUNTERS, driver.GetClockCountersArgs(agent.gpu_id)) \
            .gpu_clock_counter

    def shutdown(self) -> None:
        for queue, _ in self._copy.values():
            queue.destroy()
        self._copy.clear()
        if self._error_thread is not None:
            self._closing = True
            self.kfd.ioctl(driver.Ioctl.SET_EVENT, driver.EventArgs(self._error_event))
            self._error_thread.join(timeout=5)
        self.kfd.close()


_default: Runtime | None = None
_default_lock = threading.Lock()


def init() -> Runtime:
    """The process's runtime, opened on first call (hsa_init)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Runtime()
        return _default


def shutdown() -> None:
    global _default
    with _default_lock:
        if _default is not None:
            _default.shutdown()
            _default = None


__all__ = ["AqlQueue", "Agent", "Buffer", "CodeObject", "CodeObjectError", "Condition", "Executable", "HsaError",
           "KernelCode", "KernelSymbol", "MemoryPool", "OutOfMemory", "QueueError", "QueueFull", "Runtime",
           "Signal", "SignalDestroyed", "describe_packet", "init", "shutdown"]
