"""Layer 1: the driver's published device state, for tools in other processes (amdgpu's sysfs files,
which rocm-smi reads; NVML's view, which nvidia-smi reads).

Each lapis process simulates its own GPUs, so a monitor started from a shell cannot look inside
them. Instead, while a process has the driver loaded, a daemon thread writes one JSON file for the
process every `PUBLISH_INTERVAL_S` to `$LAPIS_SYSFS_DIR` (default `<tmp>/lapis-<uid>/sysfs`; `off`
disables it): per GPU, what GET_DEVICE_INFO and GET_TELEMETRY report, and the memory each driver
client holds. The file is replaced atomically and removed at exit; `read_all` skips files whose
process has gone. `lapis smi` is the reader.
"""

import atexit
import json
import os
import sys
import tempfile
import threading
import time

PUBLISH_INTERVAL_S = 0.5
STALE_S = 10.0


def directory() -> str | None:
    """Where the files go, or None when publishing is off."""
    where = os.environ.get("LAPIS_SYSFS_DIR", "")
    if where.lower() == "off":
        return None
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return where or os.path.join(tempfile.gettempdir(), f"lapis-{uid}", "sysfs")


def snapshot(system) -> dict:
    """This process's GPUs as the driver sees them now."""
    gpus = []
    for index, node in enumerate(system.nodes):
        p, t = node.gpu.profile, system.telemetry(index)
        gpus.append({"index": index, "name": node.gpu.name, "marketing_name": p.marketing_name, "profile": p.name,
                     "vendor": p.vendor, "memory_used": t.memory_used, "memory_total": t.memory_total,
                     "power_watts": t.power_watts, "power_limit_watts": t.power_limit_watts,
                     "temperature_c": t.temperature_c, "sm_clock_mhz": t.sm_clock_mhz,
                     "memory_clock_mhz": t.memory_clock_mhz, "utilisation": t.utilisation,
                     "energy_joules": t.energy_joules, "throttle_reasons": list(t.throttle_reasons),
                     "resets": node.resets,
                     "clients": [{"client": m.pid, "memory": m.memory_bytes} for m in t.processes]})
    return {"pid": os.getpid(), "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "time": time.time(), "gpus": gpus}


class Publisher:
    """The daemon thread that keeps this process's file current."""

    def __init__(self, system, where: str):
        self.system, self.path = system, os.path.join(where, f"{os.getpid()}.json")
        os.makedirs(where, exist_ok=True)
        self._stop = threading.Event()
        self.publish()
        threading.Thread(target=self._run, name="lapis sysfs", daemon=True).start()
        atexit.register(self.close)

    def publish(self) -> None:
        data = json.dumps(snapshot(self.system))
        tmp = f"{self.path}.{threading.get_ident()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(data)
        os.replace(tmp, self.path)

    def _run(self) -> None:
        while not self._stop.wait(PUBLISH_INTERVAL_S):
            try:
                self.publish()
            except OSError:                  # the directory went away: publishing is best effort
                pass

    def close(self) -> None:
        self._stop.set()
        try:
            os.remove(self.path)
        except OSError:
            pass


def start(system) -> Publisher | None:
    where = directory()
    if where is None:
        return None
    try:
        return Publisher(system, where)
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


NUMBER = (int, float)
# A GPU's entry in a state file (what `snapshot` writes) and its fields' types: what `lapis smi` reads of it.
GPU_FIELDS = {"index": int, "name": str, "marketing_name": str, "profile": str, "vendor": str, "memory_used": NUMBER,
              "memory_total": NUMBER, "power_watts": NUMBER, "power_limit_watts": NUMBER, "temperature_c": NUMBER,
              "sm_clock_mhz": NUMBER, "memory_clock_mhz": NUMBER, "utilisation": NUMBER, "energy_joules": NUMBER,
              "throttle_reasons": list, "resets": int, "clients": list}


def _is_state(state) -> bool:
    """Whether `state` is what `snapshot` writes (any other file in the directory is skipped, not trusted)."""
    if not (isinstance(state, dict) and isinstance(state.get("pid"), int) and 0 < state["pid"] < 2**31
            and isinstance(state.get("time"), NUMBER) and isinstance(state.get("command"), str)
            and isinstance(state.get("gpus"), list)):
        return False
    return all(isinstance(gpu, dict) and all(isinstance(gpu.get(k), t) for k, t in GPU_FIELDS.items())
               and all(isinstance(r, str) for r in gpu["throttle_reasons"])
               and all(isinstance(c, dict) and isinstance(c.get("client"), int) and isinstance(c.get("memory"), int)
                       for c in gpu["clients"])
               for gpu in state["gpus"])


def read_all(exclude_pid: int | None = None) -> list[dict]:
    """Every live lapis process's published state, oldest process first."""
    where = directory()
    if where is None or not os.path.isdir(where):
        return []
    found = []
    for name in os.listdir(where):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(where, name), encoding="utf-8") as f:
                state = json.load(f)
        except (OSError, ValueError):
            continue
        if not _is_state(state):
            continue                # not a state file a lapis process wrote
        if state["pid"] == exclude_pid or not _alive(state["pid"]) or time.time() - state["time"] > STALE_S:
            continue
        found.append(state)
    return sorted(found, key=lambda s: s["pid"])
