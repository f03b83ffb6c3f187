"""Layer 0: the command processor: the packet processor behind every user-mode queue.

The driver maps a queue (a `HardwareQueue` descriptor: ring address and size, where the
read index lives, its doorbell, its VMID). When the doorbell is written, the command
processor fetches packets from the ring through the MMU, in order, until it meets a slot
whose header is still INVALID; it runs each packet, decrements the completion signal
(posting an interrupt when the signal asks for one), resets the header to INVALID and
advances the read index in memory, as the HSA packet processor does.

Kernel dispatch: reads the kernel descriptor at kernel_object, fetches and decodes the
code (decoded programs are cached by their bytes) and checks it against the descriptor
(registers, branch targets, local memory), copies the kernel arguments into
constant bank 0, places blocks on compute units by occupancy and runs them on the SIMT
core. A malformed packet, an invalid program, a ring the processor cannot write or a
faulting kernel puts only its own queue into the error state and posts a queue-error
interrupt; other queues go on. A queue in the error state runs nothing more: the packets left in
its ring, and any written there later, complete at once with their signals set to -1, so that no
waiter sleeps on a packet that will never run. A barrier packet whose dependency signal has gone
negative (its work failed) is such an error too.

Every kernel has a time limit (`Gpu.kernel_timeout_s`, LAPIS_KERNEL_TIMEOUT_S), as a driver's
timeout detection gives each job: a dispatch carries its deadline to the SIMT core, which stops
the kernel there with a fault of its queue ("the launch timed out and was terminated", as CUDA's
cudaErrorLaunchTimeout says), and the processor goes on to the other queues. The limit starts once the
SIMT core's native engine is loaded (`SimtCore.ready_engine`): numba compiling it, about a minute once per
machine, is not the first kernel's time. Destroying a queue
(or resetting the device) cancels its running kernel the same way, at the core's next look at the
deadline.

The processor runs on its own thread, as the CP firmware runs on its own microcontroller:
a doorbell write only marks the queue kicked, and returns at once. It serves the queues round
robin, one packet per queue per turn, so work from several queues interleaves (a queue alone takes up
to `PACKETS_ALONE` in its turn, and writes its read index back once); within a queue
packets run strictly in order (so the barrier bit, which asks a packet to wait for the ones
before it, always holds). A queue stopped at a barrier packet re-reads its dependency signals
every `POLL_S`, as a packet processor polls.

Python runs one thread at a time, though, and handing the interpreter from a launching thread
to the processor's and back cost about 100 us a launch (the two ran on different cores, and each
pulled its working set back through the caches). So the processor's thread leaves kicked queues
alone while doorbells keep ringing (until none has for `DEFER_S`; it looks again after DEFER_S, and
then less and less often, up to `MAX_DEFER_S`, while they keep ringing), and a host thread about to
wait for the device (in the driver's WAIT_EVENTS, or for a queue to go idle) first runs the
ready packets itself (`run_ready`): a launch still returns before its kernel runs, and the
kernel mostly runs on the thread that would otherwise sleep. When the processor's thread does wake
(to see whether the doorbells have gone quiet) while a host thread keeps launching, it would wait
for the interpreter, and every release of it by the host (numpy releases it around work on large
arrays) would wake it to no avail, at about 15 us each, until the host blocked; so a host thread
ringing a doorbell or running packets past that wake-up hands the interpreter over
(`_hand_over`), once, until the processor's thread has looked and gone back to sleep.

Anything but a packet error escaping a packet (a bug in the simulator) is a fatal device
error: the processor stops every queue and posts a `fatal` interrupt, and the driver resets
the device.

With `launch_blocking` (LAPIS_LAUNCH_BLOCKING=1, as CUDA_LAUNCH_BLOCKING), the doorbell write
runs the queue's packets itself, on the thread that rang it, until the ring is empty: one
Python stack then goes from the program's call down to the executing instruction, for a
debugger or a traceback. Everything else stays as it is (the packet is fetched through the
MMU, the signal decremented, the interrupt posted). One exception keeps it from hanging: a
barrier packet whose dependencies are not met cannot be waited out on the ringing thread,
which may be the very thread that would meet them (a host thread storing a gate signal, or
submitting the work another queue waits on), so that queue is left waiting: the processor's own
thread polls it as always, as does a host thread that comes to wait (`run_ready`), and whichever
finds it open runs what follows it. Either way one packet runs at a time per device (`_engine`),
and one thread at a time serves the queues round robin (`_serving`).
"""

import functools
import math
import struct
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from lapis import abi, trace
from lapis.hardware.mmu import MemoryFault
from lapis.hardware.perf import LaunchResourceError, model_time, occupancy
from lapis.hardware.simt import Dispatch, KernelFault
from lapis.isa import INSTRUCTION_BYTES, IsaError, decode_program, disassemble, format_instruction
from lapis.isa.verify import InvalidProgram, check_program


@dataclass
class HardwareQueue:
    queue_id: int
    vmid: int
    kind: str                 # "compute" (AQL) or "copy"
    ring_va: int
    ring_packets: int         # power of two
    read_index_va: int        # u64 the processor advances
    doorbell: int
    read_index: int = 0
    state: str = "active"     # "active", "error", "destroyed", "reset"
    waiting: bool = False     # stopped at a barrier packet whose dependencies are not met
    kicked: bool = False      # the doorbell rang (or a packet ran) since the ring was last seen empty
    busy: bool = False        # one of its packets is executing


@dataclass
class Interrupt:
    """An entry the device posts to the host's interrupt handler (like an IH ring entry)."""
    source: str                     # "signal", "queue_error" or "fatal"
    vmid: int
    queue_id: int | None = None
    event_id: int | None = None
    detail: dict = field(default_factory=dict)


class PacketError(Exception):
    """A packet the processor cannot run; its queue goes into the error state."""


class CommandProcessor:
    POLL_S = 0.0005           # how often a queue stopped at a barrier packet re-reads its dependencies
    # How long the processor's thread leaves a kicked queue to a host thread that comes to wait for
    # the device (`run_ready`): Python runs one thread at a time, and handing the interpreter from the
    # launching thread to this one and back cost about 100 us a launch. Python's default switch interval.
    DEFER_S = 0.005
    MAX_DEFER_S = 0.08        # the longest between its looks while doorbells keep ringing
    HAND_OVER_S = 0.01        # the longest a host thread waits for the processor's thread to look (`_hand_over`)
    # Packets a lone ready queue runs in one turn (several queues take one each, so their work interleaves):
    # the turn's locks and read-index write cost a tiny kernel about a tenth of its launch.
    PACKETS_ALONE = 32

    def __init__(self, gpu, launch_blocking: bool = False):
        self.gpu = gpu
        self.launch_blocking = launch_blocking     # packets run on the thread that rings the doorbell
        self.queues: dict[int, HardwareQueue] = {}
        self.by_doorbell: dict[int, HardwareQueue] = {}
        self.halted = False       # after a fatal error, until the driver resets the device
        lock = threading.RLock()
        self._cond = threading.Condition(lock)     # a queue's state changed (its packet finished, it stopped)
        self._work = threading.Condition(lock)     # the processor's thread has a queue to run (a doorbell)
        # Held while a packet runs, by whichever thread runs it: the executor and its caches serve one
        # packet at a time. A packet's run is bounded (a kernel's by its time limit), and so is this wait.
        self._engine = threading.Lock()
        self._running: tuple[HardwareQueue, Dispatch] | None = None     # the kernel executing, to cancel
        # Held by the thread serving the queues round robin (the processor's, or a host thread in
        # `run_ready`), so that one order of turns interleaves the queues.
        self._serving = threading.Lock()
        self._thread: threading.Thread | None = None
        self._timed_wait = False       # the processor's thread sleeps until kicked queues are due
        self._host_active_at = 0.0     # time.monotonic() of the last doorbell, or round of a host thread's
        self._looks = 0                # times the processor's thread has looked for due queues
        self._wakes_at = math.inf      # time.monotonic() it next wakes to look (0: now; inf: when kicked)
        self._cbank = np.zeros(abi.CBANK_BYTES // 4, np.uint32)     # see `_constant_bank`
        self._cbank_bytes = memoryview(self._cbank).cast("B")
        self._cbank_used = abi.CBANK_BYTES                          # bytes the last dispatch wrote
        self._cbank_headers: dict[tuple, bytes] = {}                 # (block, grid) -> the bank's first words
        self._occupancies: dict[tuple, object] = {}
        self._programs: dict[tuple, tuple] = {}     # (vmid, kernel object, registers) -> (its code, the program)

    def map_queue(self, queue: HardwareQueue) -> None:
        if queue.ring_packets & (queue.ring_packets - 1) or queue.ring_packets < 1:
            raise ValueError(f"queue size {queue.ring_packets} is not a power of two")
        with self._cond:
            self.queues[queue.queue_id] = queue
            self.by_doorbell[queue.doorbell] = queue
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"{self.gpu.name} command processor",
                                                daemon=True)
                self._thread.start()

    def unmap_queue(self, queue_id: int) -> None:
        """Stop serving a queue (hsa_queue_destroy): a kernel of it executing is cancelled (it stops at the
        SIMT core's next look at its deadline, and fails), the packets left in its ring do not run and their
        completion signals are set to -1, so no waiter hangs."""
        with self._cond:
            queue = self.queues.pop(queue_id, None)
            if queue is None:
                return
            self.by_doorbell.pop(queue.doorbell, None)
            queue.state = "destroyed"
            self._cancel(queue, "cancelled: its queue was destroyed")
            while queue.busy:
                self._cond.wait()
        self._abandon(queue)

    def _cancel(self, q: HardwareQueue, reason: str) -> None:
        """Stop the kernel of `q` executing, if one is (the caller holds the lock and has set the queue's state:
        a dispatch starting meanwhile sees that state, and stops itself)."""
        running = self._running
        if running is not None and running[0] is q:
            running[1].stop(reason)

    def _abandon(self, q: HardwareQueue) -> None:
        """Fail the packets in a queue that runs no more (in the error state, destroyed, or reset): each one's
        completion signal is set to -1, its header reset and the read index moved past it, so each fails once.
        The newest fails first: a host waits for its packets in order, and once it sees one fail it may free the
        signals of those behind it, which the device must not write after that."""
        slots = []
        while len(slots) < q.ring_packets:
            slot_va = q.ring_va + ((q.read_index + len(slots)) & (q.ring_packets - 1)) * abi.PACKET_BYTES
            try:
                packet = self.gpu.read_virtual(q.vmid, slot_va, abi.PACKET_BYTES, "abandoned packet")
            except MemoryFault:
                break
            if packet[0] == abi.PACKET_TYPE_INVALID:
                break
            slots.append((slot_va, struct.unpack_from("<Q", packet, 56)[0]))
        invalid = struct.pack("<H", abi.make_header(abi.PACKET_TYPE_INVALID))
        for slot_va, signal in reversed(slots):
            self._fail_signal(q, signal)
            try:
                self.gpu.write_virtual(q.vmid, slot_va, invalid, "packet header reset")
            except MemoryFault:
                pass              # a read-only ring: the read index alone keeps the packet from failing twice
        if slots:
            q.read_index += len(slots)
            try:
                self.gpu.write_virtual(q.vmid, q.read_index_va, struct.pack("<Q", q.read_index), "read index update")
            except MemoryFault:
                pass              # the host cannot reuse the slots, but every waiter has its answer

    def doorbell(self, doorbell: int, value: int) -> None:
        with self._cond:
            queue = self.by_doorbell.get(doorbell)
            if queue is None:
                return              # a write to an unmapped doorbell is dropped, as on hardware
            if not self.launch_blocking:
                if not queue.kicked:
                    queue.kicked = True
                    if not self._timed_wait:           # else it wakes to a deadline no later than this one's
                        self._wakes_at = 0.0
                        self._work.notify()
                self._host_at_work()
                return
        # Launch blocking: run the ring dry here. A queue that stops at an unmet barrier is left
        # waiting, and the processor's thread (woken by the turn) polls it from there.
        while self._turn(queue) == "ran":
            pass

    def idle(self, vmid: int) -> bool:
        """Whether no queue of the address space `vmid` has a packet running or waiting to run."""
        with self._cond:
            return not any(q.vmid == vmid and (q.busy or (q.state == "active" and self._pending(q)))
                           for q in self.queues.values())

    def wait_idle(self, vmid: int, timeout_s: float) -> bool:
        self.run_ready(vmid)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self.idle(vmid):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, self.POLL_S * 10))
            return True

    def _pending(self, q: HardwareQueue) -> bool:
        slot_va = q.ring_va + (q.read_index & (q.ring_packets - 1)) * abi.PACKET_BYTES
        try:
            return self.gpu.read_virtual(q.vmid, slot_va, 1, "packet header peek")[0] != abi.PACKET_TYPE_INVALID
        except MemoryFault:
            return False

    def run_ready(self, vmid: int) -> None:
        """Run the queues of address space `vmid` on the calling thread, round robin, until none has a
        packet it can run: a host thread about to wait for the device does the device's work instead of
        sleeping while the processor's thread does it. A barrier packet whose dependencies are not met
        is only polled, never waited out (the caller may be the thread that would meet them); nor does
        the caller wait for the processor's thread when that is serving: it returns, to sleep."""
        if not self._serving.acquire(blocking=False):
            return
        try:
            while True:
                with self._cond:
                    if self.halted:
                        return
                    self._host_at_work()
                    ready = [q for q in self._runnable() if q.vmid == vmid]
                if not ready or self._round(ready):
                    return
        finally:
            self._serving.release()

    def _round(self, queues: list[HardwareQueue]) -> bool:
        """One turn of each queue; a queue that ran a packet stays kicked for the next round. Returns
        whether every queue was blocked at a barrier or stopped (not whether any was empty)."""
        all_blocked = True
        packets = self.PACKETS_ALONE if len(queues) == 1 else 1
        for q in queues:
            with self._cond:
                q.kicked = False
            outcome = self._turn(q, packets)
            if outcome == "ran":
                with self._cond:
                    q.kicked = True          # come back for the next packet on the next round
            all_blocked &= outcome in ("blocked", "stopped")
        return all_blocked

    def _runnable(self) -> list[HardwareQueue]:
        """The queues with something to do: active ones kicked by a doorbell or waiting at a barrier, and kicked
        ones in the error state (packets written after the error, to fail)."""
        return [q for q in self.queues.values()
                if (q.state == "active" and (q.kicked or q.waiting)) or (q.state == "error" and q.kicked)]

    # -- the processor's own thread -----------------------------------------------------------------
    def _due(self) -> tuple[list[HardwareQueue], float | None]:
        """The queues this thread should serve now, and how long until kicked ones are due (None: none is
        waiting to be). A queue waiting at a barrier is due at once; kicked ones once no doorbell has rung,
        nor a host thread run the queues, for DEFER_S (until then the host is still at work on them, and will
        run them when it waits)."""
        active = self._runnable()
        quiet_in = self._host_active_at + self.DEFER_S - time.monotonic()
        due = [q for q in active if q.waiting or quiet_in <= 0]
        return due, (quiet_in if len(due) < len(active) else None)

    def _run(self) -> None:
        ringing = 0                                  # looks in a row that found the host launching
        while True:
            with self._cond:
                due, soonest = self._look()
                while not due or self.halted:
                    timeout = None if self.halted else self._next_look(soonest, ringing)
                    ringing = 0 if timeout is None else ringing + 1
                    self._timed_wait = timeout is not None
                    self._sleep(timeout)
                    self._timed_wait = False
                    due, soonest = self._look()
            ringing = 0
            with self._serving:
                all_blocked = self._round(due)
            if all_blocked:
                with self._cond:
                    self._sleep(self.POLL_S)

    def _next_look(self, soonest: float | None, ringing: int) -> float | None:
        """How long the processor's thread sleeps before it looks again (None: until a doorbell) when kicked
        queues wait for the doorbells to go quiet (due in `soonest` seconds), or none does but one rang in the
        last DEFER_S (the host is launching; a doorbell does not wake a thread that will look anyway): DEFER_S
        at first, and then longer, up to MAX_DEFER_S, while the host goes on (each look costs it a hand-over)."""
        if soonest is None and time.monotonic() - self._host_active_at > self.DEFER_S:
            return None
        return max(soonest or 0.0, min(self.DEFER_S * 2 ** ringing, self.MAX_DEFER_S))

    def _sleep(self, timeout: float | None) -> None:
        """The processor's thread waits for a doorbell, or `timeout` seconds (None: no limit)."""
        self._wakes_at = math.inf if timeout is None else time.monotonic() + timeout
        self._work.wait(timeout)

    def _look(self) -> tuple[list[HardwareQueue], float | None]:
        """The processor's thread, awake, finds the due queues (`_due`), and tells a host thread that handed
        it the interpreter (`_hand_over`) that it has."""
        self._looks += 1
        self._wakes_at = math.inf                 # until it sleeps again
        self._cond.notify_all()
        return self._due()

    def _host_at_work(self) -> None:
        """A host thread (holding the lock) rings a doorbell or runs the queues: it stamps the time, and hands
        the interpreter over if the processor's thread is past its wake-up."""
        self._host_active_at = time.monotonic()
        if self._host_active_at >= self._wakes_at:
            self._hand_over()

    def _hand_over(self) -> None:
        """A host thread (holding the lock) lets the processor's thread, awake and waiting for the interpreter,
        look for due queues now (see the module docstring), waiting at most HAND_OVER_S."""
        looks = self._looks
        self._cond.wait_for(lambda: self._looks != looks, self.HAND_OVER_S)

    def _turn(self, q: HardwareQueue, packets: int = 1) -> str:
        """Run up to `packets` packets at the head of a queue on the calling thread (the processor's own, or
        with launch blocking the one that rang the doorbell), then write its read index: "ran" (the last
        ran), "empty", "blocked" (at a barrier packet) or "stopped" (the queue or the device is not running).
        In a queue in the error state, the packets written since are failed instead."""
        with self._engine:
            with self._cond:
                if q.state not in ("active", "error") or self.halted:
                    return "stopped"
                q.busy = True
            outcome, start = "empty", q.read_index
            try:
                if q.state == "error":
                    outcome = "stopped"
                    self._abandon(q)
                else:
                    for _ in range(packets):
                        outcome = self._step(q)
                        if outcome != "ran" or q.state != "active" or self.halted:
                            break
            except Exception as e:       # noqa: BLE001 - a simulator bug must not hang every waiter
                self._fatal(q, e)
            finally:
                if q.read_index != start:
                    self._advance_read_index(q)
                with self._cond:
                    q.busy = False
                    self._cond.notify_all()
                    if q.waiting:                # at a barrier: the processor's thread polls it
                        self._work.notify()
            return outcome

    def _advance_read_index(self, q: HardwareQueue) -> None:
        """Write the queue's read index to its memory, once per turn (as a CP writes its read pointer back
        periodically, not per packet): the host reuses a slot only once the index has passed it."""
        try:
            self.gpu.write_virtual(q.vmid, q.read_index_va, struct.pack("<Q", q.read_index), "read index update")
        except MemoryFault as e:
            self._queue_error(q, f"cannot write the read index: {e}", {"address": e.va})

    def _fatal(self, q: HardwareQueue, error: Exception) -> None:
        with self._cond:
            self.halted = True
        trace.emit(0, "fatal_error", device=self.gpu.name, queue=q.queue_id, error=repr(error))
        self.gpu.post_interrupt(Interrupt("fatal", q.vmid, q.queue_id,
                                          detail={"reason": f"fatal device error: {error!r}"}))

    def reset(self) -> None:
        """Forget every queue and the decoded programs and run again (the driver's device reset).
        Packets still in the rings never run: their completion signals are set to -1."""
        with self._cond:
            queues = list(self.queues.values())
            for q in queues:
                q.state = "reset"
                self._cancel(q, "cancelled: the GPU was reset")
            while any(q.busy for q in queues):
                self._cond.wait()
            for q in queues:
                self._abandon(q)
            self.queues.clear()
            self.by_doorbell.clear()
            self.gpu.simt.caches.forget_programs()
            self._programs.clear()
            self.halted = False
            self._cond.notify_all()

    def _step(self, q: HardwareQueue) -> str:
        """Run the packet at the queue's read index: "ran", "empty" or "blocked" (at a barrier)."""
        gpu = self.gpu
        slot_va = q.ring_va + (q.read_index & (q.ring_packets - 1)) * abi.PACKET_BYTES
        try:
            packet = gpu.read_virtual(q.vmid, slot_va, abi.PACKET_BYTES, f"packet fetch, queue {q.queue_id}")
        except MemoryFault as e:
            self._queue_error(q, f"cannot fetch packet: {e}", {"address": e.va})
            return "empty"
        header = struct.unpack_from("<H", packet)[0]
        kind = header & 0xFF
        if kind == abi.PACKET_TYPE_INVALID:
            q.waiting = False
            return "empty"
        try:
            done = self._run_packet(q, kind, packet)
        except PacketError as e:
            self._queue_error(q, str(e), getattr(e, "detail", {}))
            return "empty"
        except KeyboardInterrupt:
            # The program's thread runs packets under launch blocking and while it waits for the device, and
            # Ctrl-C interrupts it there. The packet stopped part-way, so its queue stops as on a fault
            # (nobody waits for it forever), and the interrupt goes on up to the program.
            self._queue_error(q, "interrupted: the host thread running the packet got a KeyboardInterrupt", {})
            raise
        if not done:
            q.waiting = True
            return "blocked"
        q.waiting = False
        q.read_index += 1                 # before an error below fails the packets from the read index on
        try:
            gpu.write_virtual(q.vmid, slot_va, struct.pack("<H", abi.make_header(abi.PACKET_TYPE_INVALID)),
                              "packet header reset")
        except MemoryFault as e:          # a read-only ring, or one unmapped while its packet ran
            self._queue_error(q, f"cannot reset the packet header: {e}", {"address": e.va})
        return "ran"

    def _queue_error(self, q: HardwareQueue, reason: str, detail: dict) -> None:
        """Stop the queue, report why, then fail the packets from its read index on (the one that failed, if it
        did, and those behind it), so that a waiter that sees its packet fail finds the queue's error reported.
        A queue already stopped (on an error, destroyed, or reset) keeps the state and reason it has."""
        with self._cond:
            if q.state != "active":
                return
            q.state = "error"
            q.waiting = False
        trace.emit(0, "queue_error", device=self.gpu.name, queue=q.queue_id, reason=reason, **detail)
        self.gpu.post_interrupt(Interrupt("queue_error", q.vmid, q.queue_id, detail={"reason": reason, **detail}))
        self._abandon(q)

    def _run_packet(self, q: HardwareQueue, kind: int, packet: bytes) -> bool:
        if kind == abi.PACKET_TYPE_KERNEL_DISPATCH and q.kind == "compute":
            p = abi.KernelDispatchPacket.unpack(packet)
            start = self._dispatch(q, p)
            self._complete(q, p.completion_signal, start_ns=start)
        elif kind in (abi.PACKET_TYPE_BARRIER_AND, abi.PACKET_TYPE_BARRIER_OR):
            p = abi.BarrierPacket.unpack(packet)
            deps = [s for s in (p.dep_signal0, p.dep_signal1, p.dep_signal2, p.dep_signal3, p.dep_signal4) if s]
            values = [self._signal_value(q, s) for s in deps]
            for handle, value in zip(deps, values, strict=True):
                if value < 0:          # its packet failed, or never ran behind a failure: the barrier never opens
                    err = PacketError(f"barrier dependency signal {handle:#x} is {value}: the work it waits for failed")
                    err.detail = {"signal": handle}
                    raise err
            met = [value == 0 for value in values]
            ready = all(met) if kind == abi.PACKET_TYPE_BARRIER_AND else (any(met) or not deps)
            if not ready:
                return False
            self._complete(q, p.completion_signal)
        elif kind == abi.PACKET_TYPE_VENDOR_SPECIFIC and q.kind == "copy":     # SDMA's, as dispatches are the CP's
            p = abi.CopyPacket.unpack(packet)
            if p.format != abi.VENDOR_FORMAT_LINEAR_COPY:
                raise PacketError(f"unknown vendor packet format {p.format}")
            start = self.gpu.clock.now_ns
            try:
                self.gpu.copy_engine.copy(q.vmid, p.src, p.dst, p.size)
            except MemoryFault as e:
                err = PacketError(f"copy faulted: {e}")
                err.detail = {"address": e.va}
                raise err from None
            self._complete(q, p.completion_signal, start_ns=start)
        else:
            name = abi.PACKET_TYPE_NAMES.get(kind, f"type {kind}")
            raise PacketError(f"packet {name} is not supported on a {q.kind} queue")
        return True

    def _signal_value(self, q: HardwareQueue, handle: int) -> int:
        try:
            raw = self.gpu.read_virtual(q.vmid, handle + abi.SIGNAL_VALUE_OFFSET, 8, "signal read")
        except MemoryFault as e:
            raise PacketError(f"dependency signal {handle:#x} is not mapped") from e
        return struct.unpack("<q", raw)[0]

    def _complete(self, q: HardwareQueue, handle: int, failed: bool = False, start_ns: float | None = None) -> None:
        """Decrement the completion signal (or, for a failed packet, make it -1) and stamp it with
        the device clock: `start_ns` (when the packet began; now if not given) and now, as the CP
        writes amd_signal_t's start_ts and end_ts. Post an interrupt if the signal has an event."""
        if not handle:
            return
        gpu = self.gpu
        end_ns = gpu.clock.now_ns
        start_ns = end_ns if start_ns is None else start_ns
        try:
            obj = abi.SignalObject.unpack(gpu.read_virtual(q.vmid, handle, abi.SIGNAL_BYTES, "signal read"))
            value = -1 if failed else obj.value - 1
            # One burst from the value to end_ts (the mailbox and event id rewritten unchanged): one PCIe
            # transaction, and a host that sees the new value also sees the timestamps.
            tail = struct.pack("<qQI4xQQ", value, obj.event_mailbox_ptr, obj.event_id, int(start_ns), int(end_ns))
            gpu.write_virtual(q.vmid, handle + abi.SIGNAL_VALUE_OFFSET, tail,
                              "signal store (failure)" if failed else "signal decrement (atomic)")
            if obj.event_mailbox_ptr:
                gpu.write_virtual(q.vmid, obj.event_mailbox_ptr, struct.pack("<Q", obj.event_id), "event mailbox")
        except MemoryFault as e:
            raise PacketError(f"completion signal {handle:#x} is not mapped: {e}") from None
        if obj.event_mailbox_ptr:
            gpu.post_interrupt(Interrupt("signal", q.vmid, q.queue_id, event_id=obj.event_id))

    def _fail_signal(self, q: HardwareQueue, handle: int) -> None:
        try:
            self._complete(q, handle, failed=True)
        except PacketError:
            pass          # the signal itself is unreachable: the queue error is all there is to report

    def _program(self, vmid: int, code: bytes, kernel_object: int, registers: int):
        """The kernel's instructions, decoded once per distinct code (the SIMT core's caches keep them) and checked
        once per register count (`isa.verify`): a program that names a register past the `registers` its
        descriptor declares, or branches to no instruction of its own, is refused before any of it runs, as the
        runtime's loader refuses it; this one reached the device another way (hand-written code, a raw packet).
        The program a kernel object last gave is kept with its code, and taken again while the code fetched for
        it is byte for byte the same: comparing costs a memcmp, where finding decoded code by its bytes hashes
        them all (7 us for a gemm's 17 KB, at every launch)."""
        caches, warp_size = self.gpu.simt.caches, self.gpu.profile.warp_size
        key = (vmid, kernel_object, registers)
        kept = self._programs.get(key)
        if kept is not None and kept[0] == code and caches.enabled:
            return kept[1]
        try:
            program = caches.program(code, decode_program)
            caches.per_program(program, f"valid with {registers} registers",
                               lambda decoded: check_program(decoded, registers, warp_size))
        except InvalidProgram as e:
            err = PacketError(f"kernel at {kernel_object:#x} is not a valid program: {e}")
            err.detail = {"kernel_object": kernel_object, "pc": e.pc, "instruction": e.instruction, "fault": e.reason}
            raise err from None
        except IsaError as e:
            err = PacketError(f"kernel at {kernel_object:#x} holds an invalid instruction: {e}")
            err.detail = {"kernel_object": kernel_object}
            raise err from None
        if len(self._programs) >= 256:
            self._programs.clear()
        self._programs[key] = (code, program)
        return program

    def _constant_bank(self, block: tuple, grid: tuple, kernargs: bytes) -> np.ndarray:
        """Constant bank 0 for a dispatch: the launch dimensions, the warp size, then the kernel arguments,
        zero elsewhere. One buffer, rewritten for each dispatch (one runs at a time: the engine lock) in
        one copy of its header and arguments, and zeroed past them only as far as the last dispatch wrote:
        zeroing a fresh bank, or writing it field by field, cost more than a tiny kernel's run."""
        header = self._cbank_headers.get((block, grid))
        if header is None:
            words = np.zeros(abi.KERNARG_CBANK_OFFSET // 4, np.uint32)
            words[abi.CBANK_BLOCK_DIM // 4:abi.CBANK_BLOCK_DIM // 4 + 3] = block
            words[abi.CBANK_GRID_DIM // 4:abi.CBANK_GRID_DIM // 4 + 3] = grid
            words[abi.CBANK_WARP_SIZE // 4] = self.gpu.profile.warp_size
            if len(self._cbank_headers) >= 256:
                self._cbank_headers.clear()
            header = self._cbank_headers[(block, grid)] = words.tobytes()
        written = header + kernargs
        used = len(written)
        raw = self._cbank_bytes
        raw[:used] = written
        if used < self._cbank_used:
            raw[used:self._cbank_used] = bytes(self._cbank_used - used)
        self._cbank_used = used
        return self._cbank

    def _occupancy(self, threads_per_block: int, registers: int, shared: int):
        """The kernel's occupancy (kept by resources: frameworks launch the same kernels over and over)."""
        key = (threads_per_block, registers, shared)
        occ = self._occupancies.get(key)
        if occ is None:
            try:
                occ = self._occupancies[key] = occupancy(self.gpu.profile, threads_per_block, registers, shared)
            except LaunchResourceError as e:
                raise PacketError(str(e)) from None
        return occ

    def _check_resources(self, kd: abi.KernelDescriptor, local: int) -> None:
        """Refuse a dispatch whose descriptor or packet asks a thread for more than the device gives one (registers,
        `local` memory, the larger of the two's), passes more kernel arguments than constant bank 0 holds or claims
        more code than a kernel may have, before anything is read for it."""
        profile = self.gpu.profile
        if kd.code_size > abi.MAX_CODE_BYTES:
            raise PacketError(f"code of {kd.code_size} bytes exceeds the {abi.MAX_CODE_BYTES} a kernel may have")
        if kd.registers > profile.max_registers_per_thread:
            raise PacketError(f"kernel declares {kd.registers} registers per thread; the device allows "
                              f"{profile.max_registers_per_thread}")
        if local > profile.max_local_per_thread:
            raise PacketError(f"private segment of {local} bytes per work-item exceeds the device limit of "
                              f"{profile.max_local_per_thread}")
        if kd.kernarg_size > abi.MAX_KERNARG_BYTES:
            raise PacketError(f"kernel arguments of {kd.kernarg_size} bytes exceed {abi.MAX_KERNARG_BYTES}")

    def _dispatch(self, q: HardwareQueue, p: abi.KernelDispatchPacket) -> float:
        """Run a kernel; returns the device time it started."""
        gpu, profile = self.gpu, self.gpu.profile
        block = (p.workgroup_size_x, p.workgroup_size_y, p.workgroup_size_z)
        size = (p.grid_size_x, p.grid_size_y, p.grid_size_z)
        if not 1 <= p.setup & 3 <= 3:
            raise PacketError(f"dispatch packet has {p.setup & 3} dimensions; expected 1 to 3")
        if min(block) < 1 or min(size) < 1 or size[0] % block[0] or size[1] % block[1] or size[2] % block[2]:
            raise PacketError(f"dispatch grid {size} is not a whole number of workgroups {block}")
        grid = (size[0] // block[0], size[1] // block[1], size[2] // block[2])
        try:
            kd = abi.KernelDescriptor.unpack(gpu.read_virtual(q.vmid, p.kernel_object, abi.KERNEL_DESCRIPTOR_BYTES,
                                                              "kernel descriptor fetch"))
            if kd.code_size <= 0 or kd.code_size % INSTRUCTION_BYTES or not 0 < kd.registers:
                raise PacketError(f"kernel_object {p.kernel_object:#x} does not point at a kernel descriptor")
            local = max(kd.private_segment_fixed_size, p.private_segment_size)
            self._check_resources(kd, local)
            entry = (p.kernel_object + kd.kernel_code_entry_byte_offset) % 2**64     # a 64-bit address adder
            code = gpu.read_virtual(q.vmid, entry, kd.code_size, "instruction fetch", execute=True)
            kernargs = (gpu.read_virtual(q.vmid, p.kernarg_address, kd.kernarg_size, "kernel argument fetch")
                        if kd.kernarg_size else b"")
        except MemoryFault as e:
            err = PacketError(f"dispatch cannot read its kernel: {e}")
            err.detail = {"address": e.va, "kernel_object": p.kernel_object}
            raise err from None
        program = self._program(q.vmid, code, p.kernel_object, kd.registers)
        cbank = self._constant_bank(block, grid, kernargs)
        shared = max(kd.group_segment_fixed_size, p.group_segment_size)
        occ = self._occupancy(block[0] * block[1] * block[2], kd.registers, shared)
        cooperative = bool(p.setup & abi.SETUP_COOPERATIVE)
        blocks = grid[0] * grid[1] * grid[2]
        if cooperative and blocks > occ.resident_blocks:
            raise PacketError(f"cooperative dispatch of {blocks} workgroups exceeds the {occ.resident_blocks} that can "
                              "be resident at once")
        if cooperative and blocks * block[0] * block[1] * block[2] > gpu.simt.MAX_COOPERATIVE_LANES:
            raise PacketError(f"cooperative dispatch of {blocks} workgroups exceeds the "
                              f"{gpu.simt.MAX_COOPERATIVE_LANES} threads the simulator runs together")
        if cooperative and blocks * block[0] * block[1] * block[2] * local > gpu.simt.MAX_LOCAL_BYTES:
            raise PacketError(f"cooperative dispatch of {blocks} workgroups needs {local} bytes of local memory per "
                              f"thread, more than the {gpu.simt.MAX_LOCAL_BYTES} the simulator holds for the threads "
                              "it runs together")
        if not gpu.simt.engine_ready:
            gpu.simt.ready_engine()            # compiling the engine (once per machine) is not the kernel's time
        wall, host_start = time.perf_counter(), time.monotonic()
        limit = gpu.kernel_timeout_s
        d = Dispatch(program, block, grid, kd.registers, shared, cbank, q.vmid, gpu.watchdog_steps, local, cooperative,
                     host_start + limit, _timeout_reason(limit))
        self._running = (q, d)
        if q.state != "active":                # destroyed or reset as it was fetched (see `_cancel`)
            d.stop(f"cancelled: its queue was {q.state}")
        try:
            counters = gpu.simt.run(d, occ.resident_blocks)
        except KernelFault as e:
            err = PacketError(f"kernel faulted: {e}")
            err.detail = {"kernel_object": p.kernel_object, "pc": e.pc, "instruction": e.instruction,
                          "address": e.address, "fault": e.reason}
            raise err from None
        finally:
            self._running = None
        wall = time.perf_counter() - wall
        counted, per_pc = gpu.simt.per_pc                 # the counts' bytes the core hashed already
        per_pc = per_pc if counted is counters else None
        timing = model_time(profile, counters, occ, program, per_pc=per_pc)
        energy = timing.energy_j
        throttle = gpu.power.throttle(energy, timing.duration_ns)
        if throttle.clock_ratio < 1:
            timing = model_time(profile, counters, occ, program, throttle.clock_ratio, per_pc)
        watts = gpu.power.record(energy, timing.duration_ns, host_start, time.monotonic())
        start, end = gpu.clock.advance(timing.total_ns)
        if trace.enabled():
            trace.emit(0, "kernel", sim_start_ns=start, sim_end_ns=end, device=gpu.name, profile=profile.name,
                       queue=q.queue_id, packet_index=q.read_index,
                       kernel_object=p.kernel_object, grid=grid, block=block, registers=kd.registers,
                       shared_bytes=shared, warp_size=profile.warp_size,
                       local_bytes=local, warp_instructions=counters.total_warp_instructions,
                       thread_instructions=counters.total_thread_instructions, flops=counters.flops,
                       flops_by_precision=dict(counters.flops_by_precision),
                       warp_instructions_by_pipe=dict(counters.warp_instructions_by_pipe),
                       global_bytes=counters.global_bytes, global_sectors=counters.global_sectors,
                       l1_hits=counters.l1_hits, l2_hits=counters.l2_hits, l2_misses=counters.l2_misses,
                       far_hits=counters.far_hits, dram_bytes=counters.dram_bytes,
                       shared_wavefronts=counters.shared_wavefronts, bank_conflicts=counters.bank_conflicts,
                       average_active_lanes=counters.average_active_lanes,
                       blocks=counters.blocks, waves=counters.waves,
                       blocks_per_unit=occ.blocks_per_unit, occupancy_limiter=occ.limiter,
                       theoretical_occupancy=occ.theoretical, achieved_occupancy=timing.achieved_occupancy,
                       time_ns=timing.total_ns, duration_ns=timing.duration_ns, limiter=timing.limiter,
                       model_terms_ns=dict(timing.terms), simulation_wall_s=wall,
                       clock_mhz=profile.clock_ghz * 1e3 * throttle.clock_ratio, power_watts=watts,
                       throttle_reasons=throttle.reasons, temperature_c=gpu.power.temperature,
                       **{k: v for k, v in abi.header_fields(p.header).items() if k != "type"},
                       disassembly=disassemble(program[:8], indent=""),
                       per_instruction=_per_instruction(program, counters, timing))
        return start


@functools.cache
def _timeout_reason(limit_s: float) -> str:
    """The fault of a kernel stopped at its time limit (kept per limit: formatting it per launch would cost a tiny
    kernel more than its deadline's checks do)."""
    return (f"the launch timed out and was terminated: it ran longer than the device's {limit_s:g} s limit for one "
            "kernel (LAPIS_KERNEL_TIMEOUT_S)")


def _per_instruction(program, counters, timing) -> dict:
    """What Nsight Compute's source view shows per instruction: its text, how many times warps and
    threads executed it, and the cycles a warp waited on its operands each time, with the reason."""
    return {"text": [format_instruction(inst, pc * INSTRUCTION_BYTES) for pc, inst in enumerate(program)],
            "warp_executions": counters.warp_instructions.tolist(),
            "thread_executions": counters.thread_instructions.tolist(),
            "stall_cycles": [round(wait, 2) for wait, _ in timing.stalls],
            "stall_reasons": [why for _, why in timing.stalls]}
