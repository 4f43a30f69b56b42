"""Small builders of domain values for tests: every field by its name, defaults for the rest."""

from __future__ import annotations

from peakpack.orchestrator.domain.model import NodeRole, NodeSpec, PowerCurve


def node_spec(name: str, *, address: str = "192.0.2.1", cpus: int = 4, memory_mb: int = 8192,
              curve: PowerCurve | None = None, head: bool = False, power_managed: bool | None = None) -> NodeSpec:
    """An inventory node: a worker drawing 100-250 W unless said otherwise; a head node is never
    power-managed."""
    return NodeSpec(name=name, address=address, cpus=cpus, memory_mb=memory_mb,
                    power=curve or PowerCurve.linear(100, 250), role=NodeRole.HEAD if head else NodeRole.WORKER,
                    power_managed=not head if power_managed is None else power_managed)
