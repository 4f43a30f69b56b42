"""The NodeOps contract (tests/support/node_ops_contract.py) against the live `JoinedOps` on the lab
(SSH, docker/CRIU, IPMI): what the unit tests' `FakeNodeOps` promises, the real nodes do. The
points are walked in sequence on one busybox container to keep the lab work short."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.image import LAB_IMAGE
from peakpack.lab.node import powered
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.plan import Action
from peakpack.orchestrator.domain.ports import NodeOps
from peakpack.orchestrator.faces.wiring import live_services
from tests.support import node_ops_contract as contract

pytestmark = pytest.mark.integration


@dataclass
class LabHarness:
    lab: Lab
    ops: NodeOps
    journal: Store

    def start(self, container: str, node: str) -> None:
        proc = self.lab.exec(node, ["docker", "run", "-d", "--name", container, "--network", "none", LAB_IMAGE,
                                    "sleep", "100000"])
        assert proc.returncode == 0, proc.stderr

    def stop(self, container: str, node: str) -> None:
        proc = self.lab.exec(node, ["docker", "stop", "-t", "0", container])
        assert proc.returncode == 0, proc.stderr

    def running_on(self, container: str) -> list[str]:
        return [n.name for n in self.lab.layout.nodes if powered(n) and self.lab.exec(
            n.name, ["docker", "ps", "-q", "--filter", f"name=^{container}$"]).stdout.strip()]

    def powered(self, node: str) -> bool:
        return powered(self.lab.node(node))

    def action_id(self, action: Action) -> int:
        return contract.journal_action(self.journal, action)


def test_live_node_ops_keep_the_contract(clean_lab: Lab, tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        services = live_services(load_inventory(clean_lab.inventory_path), store, Console(file=io.StringIO()))
        try:
            h = LabHarness(clean_lab, services.ops, store)
            contract.hosts_nothing_follows_containers(h, "node-1", "contract-c1")
            contract.a_stopped_container_starts_again_where_it_was(h, "node-1", "contract-c1")
            contract.a_container_its_guard_stopped_is_still_hosted(h, "node-1", "contract-c1")
            contract.pinning_a_busy_node_works(h, "node-1")
            contract.nothing_migrates_once_stopping(h, "contract-c1", "node-1", "node-2")
            contract.migrating_from_the_wrong_source_is_skipped(h, "contract-c1", "node-2", "node-3")
            contract.migrating_from_the_wrong_source_is_skipped(h, "gone", "node-1", "node-2")  # runs nowhere
            contract.migration_moves_a_running_container(h, "contract-c1", "node-1", "node-2")
            contract.power_off_then_on(h, "node-3")
        finally:
            services.close()
