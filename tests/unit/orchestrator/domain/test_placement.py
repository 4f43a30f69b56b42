"""Where a container may go, rule by rule (domain/placement.py), table-driven as kube-scheduler
tests its filter plugins: each case names the rule that refuses, or none; the planner's
eligibility is exactly the nodes no rule refuses."""

from __future__ import annotations

import pytest

from peakpack.orchestrator.domain.model import ClusterConfig, ClusterSnapshot, Container, Inventory, NodeState
from peakpack.orchestrator.domain.placement import (
    Facts,
    Refusal,
    eligibility,
    movers_port_clashes,
    port_clashes,
    refusal,
)
from tests.support.build import node_spec

INV = Inventory(ClusterConfig("t"), tuple(node_spec(n) for n in ("n1", "n2", "n3")))


def snapshot(*containers: Container, held: dict[str, str] | None = None) -> ClusterSnapshot:
    return ClusterSnapshot(nodes=tuple(NodeState(n.name) for n in INV.nodes), containers=containers, held=held or {})


WEB = Container("web", "n1", 1.0, 100, ports=("80/tcp",))
OTHER = Container("other", "n2", 1.0, 100, ports=("80/tcp",))


@pytest.mark.parametrize(("case", "c", "snap", "target", "rule"), [
    ("free to go", WEB, snapshot(WEB), "n2", None),
    ("staying is always possible", Container("gpu", "n1", 1, 1, immovable="uses a GPU"),
     snapshot(Container("gpu", "n1", 1, 1, immovable="uses a GPU")), "n1", None),
    ("its node is held", WEB, snapshot(WEB, held={"n1": "not observed"}), "n2", Refusal.HELD),
    ("the target is held", WEB, snapshot(WEB, held={"n3": "not observed"}), "n3", Refusal.HELD),
    ("immovable", Container("gpu", "n1", 1, 1, immovable="uses a GPU"),
     snapshot(Container("gpu", "n1", 1, 1, immovable="uses a GPU")), "n2", Refusal.IMMOVABLE),
    ("preflight refuses the target", Container("v", "n1", 1, 1, refused_on=(("n3", "volume v exists there"),)),
     snapshot(Container("v", "n1", 1, 1, refused_on=(("n3", "volume v exists there"),))), "n3", Refusal.PREFLIGHT),
    ("its host port is taken there", WEB, snapshot(WEB, OTHER), "n2", Refusal.HOST_PORT),
    ("held comes first", WEB, snapshot(WEB, OTHER, held={"n2": "draining"}), "n2", Refusal.HELD),
])
def test_each_rule_names_its_refusal(case: str, c: Container, snap: ClusterSnapshot, target: str,
                                     rule: Refusal | None) -> None:
    got = refusal(c, target, Facts.of(INV, snap))
    assert (got.rule if got else None) == rule, case
    allowed = eligibility(INV, snap).get(c.name, frozenset(INV.node_names))
    assert (target in allowed) == (rule is None), case


def test_the_reasons_say_the_fact_in_one_line() -> None:
    facts = Facts.of(INV, snapshot(WEB, OTHER, held={"n3": "not observed"}))
    assert refusal(WEB, "n2", facts).why == "node n2 already publishes its port 80/tcp"  # type: ignore[union-attr]
    assert refusal(WEB, "n3", facts).why == "node n3 is held: not observed"  # type: ignore[union-attr]


def test_the_host_port_rule_is_one_rule_for_the_planner_its_movers_and_preflight() -> None:
    assert port_clashes(("80/tcp", "53/udp"), {"53/udp"}) == ["53/udp"]
    stay, mover = Container("stay", "n1", 1, 1, ports=("80/tcp",)), Container("mover", "n2", 1, 1, ports=("80/tcp",))
    assert movers_port_clashes(snapshot(stay, mover), {"stay": "n1", "mover": "n1"}) == {"mover": "n1"}
