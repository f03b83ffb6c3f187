"""Layer 0: power, temperature and clocks: the sensors and the clock governor of one GPU.

Energy comes from the work the device did, counted by the SIMT core: a cost per warp
instruction (fetch, decode, register file), per FLOP by precision, per byte moved through
L2 and per byte of DRAM traffic, plus idle power for as long as anything runs. Power is
energy over time. Temperature follows a first-order thermal model (one thermal resistance
to ambient, one time constant), evolved in simulated time while the device works and in
host time while it idles, so it cools between runs.

The governor picks the shader clock for each kernel, as the board's firmware does under
the driver's power limit: if the kernel would draw more than the limit at full clock, the
clock drops until it would not (dynamic power taken to scale with the cube of the clock,
voltage following frequency), never below `MIN_CLOCK_RATIO`; at the temperature limit the
clock drops to `THERMAL_CLOCK_RATIO` until the device cools. The memory clock stays fixed.
The performance model then times the kernel at that clock.
"""

import math
import threading
import time
from collections import deque
from dataclasses import dataclass

from lapis.hardware.profiles import DeviceProfile

MIN_CLOCK_RATIO = 0.3
THERMAL_CLOCK_RATIO = 0.7
RECENT_S = 1.0            # host seconds over which telemetry reports power and utilisation


@dataclass(frozen=True)
class Throttle:
    clock_ratio: float
    reasons: tuple[str, ...]      # "power limit", "temperature limit"


FULL_CLOCK = Throttle(1.0, ())


@dataclass(frozen=True)
class Telemetry:
    power_watts: float
    power_limit_watts: float
    temperature_c: float
    sm_clock_mhz: float
    memory_clock_mhz: float
    utilisation: float            # fraction of the last RECENT_S host seconds with a packet running
    energy_joules: float
    throttle_reasons: tuple[str, ...]


def kernel_energy_j(profile: DeviceProfile, c) -> float:
    """Dynamic energy of a kernel's counted work at full clock (idle power excluded)."""
    pj = (c.total_warp_instructions * profile.pj_per_warp_instruction
          + c.flops_by_precision.get("fp32", 0) * profile.pj_per_fp32_flop
          + c.flops_by_precision.get("fp64", 0) * profile.pj_per_fp64_flop
          + c.flops_by_precision.get("fp16", 0) * profile.pj_per_fp16_flop
          + c.flops_by_precision.get("matrix", 0) * profile.pj_per_matrix_flop
          + (c.global_sectors * 32 + c.local_bytes) * profile.pj_per_l2_byte
          + c.dram_bytes * profile.pj_per_dram_byte)
    return pj * 1e-12


class PowerModel:
    def __init__(self, profile: DeviceProfile):
        self.profile = profile
        self.power_limit = profile.tdp_watts
        self._idle_c = profile.ambient_c + profile.idle_watts * profile.thermal_resistance_c_per_w
        self.temperature = self._idle_c
        self.energy = 0.0
        self.clock_ratio = 1.0
        self.reasons: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self._last_host = time.monotonic()
        self._busy: deque[tuple[float, float, float]] = deque()   # (host start, host end, watts) of recent work

    @property
    def min_power_limit(self) -> float:
        return self.profile.idle_watts + (self.profile.tdp_watts - self.profile.idle_watts) * MIN_CLOCK_RATIO ** 3

    def set_power_limit(self, watts: float) -> None:
        if not self.min_power_limit <= watts <= self.profile.tdp_watts:
            raise ValueError(f"power limit {watts:.0f} W is outside {self.min_power_limit:.0f}-"
                             f"{self.profile.tdp_watts:.0f} W for {self.profile.name}")
        self.power_limit = watts

    def _cool(self, now: float) -> None:
        """Relax toward the idle temperature for the host time since the device last worked."""
        idle_s = max(0.0, now - self._last_host)
        self._relax(self._idle_c, idle_s)
        self._last_host = now

    def _relax(self, target: float, seconds: float) -> None:
        self.temperature = target + (self.temperature - target) * math.exp(
            -seconds / self.profile.thermal_time_constant_s)

    def throttle(self, energy_j: float, duration_ns: float) -> Throttle:
        """The clock for a kernel that needs `energy_j` over `duration_ns` at full clock."""
        with self._lock:
            self._cool(time.monotonic())
            p = self.profile
            dynamic = energy_j / (duration_ns * 1e-9) if duration_ns > 0 else 0.0
            budget = self.power_limit - p.idle_watts
            if dynamic <= budget and self.temperature < p.temperature_limit_c:     # the common case, once per launch
                self.clock_ratio, self.reasons = 1.0, ()
                return FULL_CLOCK
            ratio, reasons = 1.0, []
            if dynamic > budget:
                ratio = max(MIN_CLOCK_RATIO, (max(budget, 0.0) / dynamic) ** (1 / 3))
                reasons.append("power limit")
            if self.temperature >= p.temperature_limit_c:
                ratio = min(ratio, THERMAL_CLOCK_RATIO)
                reasons.append("temperature limit")
            self.clock_ratio, self.reasons = ratio, tuple(reasons)
            return Throttle(ratio, self.reasons)

    def record(self, energy_j: float, duration_ns: float, host_start: float, host_end: float) -> float:
        """Account a kernel run at the throttled clock; returns its average power in watts."""
        with self._lock:
            seconds = duration_ns * 1e-9
            total = energy_j * self.clock_ratio ** 2 + self.profile.idle_watts * seconds   # V^2 follows the clock
            watts = total / seconds if seconds > 0 else self.profile.idle_watts
            self.energy += total
            p = self.profile
            self._relax(p.ambient_c + watts * p.thermal_resistance_c_per_w, seconds)
            self._last_host = host_end
            self._busy.append((host_start, host_end, watts))
            cutoff = host_end - RECENT_S
            while self._busy[0][1] < cutoff:           # kernels end in order: the oldest are on the left
                self._busy.popleft()
            return watts

    def telemetry(self) -> Telemetry:
        with self._lock:
            now = time.monotonic()
            self._cool(now)
            recent = [b for b in self._busy if b[1] >= now - RECENT_S]
            busy_s = sum(min(end, now) - max(start, now - RECENT_S) for start, end, _ in recent)
            utilisation = min(1.0, busy_s / RECENT_S)
            watts = max((w for *_, w in recent), default=self.profile.idle_watts)
            p = self.profile
            return Telemetry(watts, self.power_limit, self.temperature, p.clock_ghz * 1e3 * self.clock_ratio,
                             p.memory_clock_mhz, utilisation, self.energy, self.reasons)

    def reset(self) -> None:
        with self._lock:
            self.clock_ratio, self.reasons = 1.0, ()
            self._busy.clear()
