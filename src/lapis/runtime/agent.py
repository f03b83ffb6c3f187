"""Layer 2: agents, the HSA name for the processors a runtime can use (the CPU and each GPU)."""

from dataclasses import dataclass, field


@dataclass
class Agent:
    name: str
    kind: str                      # "cpu" or "gpu"
    gpu_id: int | None = None
    properties: dict = field(default_factory=dict)

    @property
    def vendor(self) -> str:
        return self.properties.get("vendor", "host")

    @property
    def warp_size(self) -> int:
        return self.properties["warp_size"]

    @property
    def profile(self) -> str:
        return self.properties["name"]

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, {self.kind})"
