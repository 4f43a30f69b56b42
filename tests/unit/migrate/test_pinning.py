"""Core pinning (migrate/pinning.py), pure: devils apart on distinct caches, turtles together,
stable under wobbling demand; lscpu and cpuset syntax."""

from __future__ import annotations

import pytest

from peakpack.migrate.pinning import Cpu, cpuset, parse_lscpu, plan_cpusets
from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import Container, ContainerClass


def test_pinning_gives_devils_their_own_cores_on_distinct_caches() -> None:
    # two sockets, each with its own L3, two cores each
    cpus = [Cpu(i, i, i // 2, i // 2) for i in range(4)]
    cs = [Container("d1", "n", 1, 0, cls=ContainerClass.DEVIL), Container("d2", "n", 1, 0, cls=ContainerClass.DEVIL),
          Container("t1", "n", 0.2, 0), Container("t2", "n", 0.2, 0)]
    plan = plan_cpusets(cpus, cs)
    socket = {c.id: c.socket for c in cpus}
    d1, d2 = int(plan["d1"]), int(plan["d2"])
    assert socket[d1] != socket[d2]
    assert plan["t1"] == plan["t2"] and not {d1, d2} & {int(x) for x in plan["t1"].split(",")}
    assert plan_cpusets(cpus, cs) == plan  # deterministic



def test_lscpu_and_cpuset_syntax() -> None:
    cpus = parse_lscpu("n", "# comment\n0,0,0,0:0:0:0\n1,1,0,1:1:1:0\n")
    assert [c.llc for c in cpus] == [0, 0]
    assert cpuset([5, 0, 1, 2]) == "0-2,5" and cpuset([3]) == "3"
    with pytest.raises(NodeError):
        parse_lscpu("n", "")



def test_pinning_is_stable_when_measured_demand_wobbles() -> None:
    cpus = [Cpu(i, i, 0, 0) for i in range(2)]
    first = plan_cpusets(cpus, [Container("b", "n", 0.9, 0, cls=ContainerClass.DEVIL),
                                Container("a", "n", 0.4, 0, cls=ContainerClass.DEVIL)])
    again = plan_cpusets(cpus, [Container("b", "n", 0.3, 0, cls=ContainerClass.DEVIL),
                                Container("a", "n", 1.0, 0, cls=ContainerClass.DEVIL)], current=first)
    assert again == first and first["a"] != first["b"]
