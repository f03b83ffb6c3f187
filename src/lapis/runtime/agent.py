"""Layer 2: agents, the HSA name for the processors a runtime can use (the CPU and each GPU)."""

from dataclasses import dataclass

from lapis.driver import NodeProperties


@dataclass
class Agent:
    name: str
    kind: str                      # "cpu" or "gpu"
    gpu_id: int | None = None
    properties: NodeProperties | None = None      # a GPU's, from the driver's topology

    @property
    def vendor(self) -> str:
        return self.properties.vendor if self.properties else "host"

    @property
    def warp_size(self) -> int:
        return self.properties.warp_size

    @property
    def profile(self) -> str:
        return self.properties.profile

    def info(self) -> dict:
        """What hsa_agent_get_info reports, by attribute name."""
        if self.kind == "cpu":
            return {"name": self.name, "device": "cpu", "vendor_name": "host"}
        p = self.properties
        return {"name": self.name, "device": "gpu", "vendor_name": p.vendor, "product_name": p.marketing_name,
                "profile": p.profile, "node": self.gpu_id, "wavefront_size": p.warp_size,
                "compute_unit_count": p.compute_units, "max_clock_frequency_mhz": p.clock_ghz * 1e3,
                "workgroup_max_size": p.max_threads_per_block, "max_waves_per_cu": p.max_threads_per_unit
                // p.warp_size, "group_segment_size": p.shared_per_block, "memory_size": p.memory_bytes,
                "l2_cache_size": p.reported_l2_bytes}

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, {self.kind})"
