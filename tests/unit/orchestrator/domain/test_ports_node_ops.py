"""The NodeOps contract (tests/support/node_ops_contract.py) against `FakeNodeOps`: the fake the
unit tests act through promises what the live node operations do."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.orchestrator.domain.plan import Action
from tests.support import node_ops_contract as contract
from tests.support.fakes import FakeNodeOps, FakeWorld


@dataclass
class FakeHarness:
    ops: FakeNodeOps
    journal: Store

    def start(self, container: str, node: str) -> None:
        assert node in self.ops.world.powered
        self.ops.world.running[container] = node

    def stop(self, container: str, node: str) -> None:
        assert self.ops.world.running.pop(container) == node
        self.ops.world.stopped[container] = node

    def running_on(self, container: str) -> list[str]:
        node = self.ops.world.running.get(container)
        return [] if node is None else [node]

    def powered(self, node: str) -> bool:
        return node in self.ops.world.powered

    def action_id(self, action: Action) -> int:
        return contract.journal_action(self.journal, action)


@pytest.fixture()
def h(tmp_path: Path) -> Iterator[FakeHarness]:
    """Three empty powered nodes."""
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        yield FakeHarness(FakeNodeOps(store, FakeWorld(powered={"node-1", "node-2", "node-3"})), store)


def test_hosts_nothing_follows_containers(h: FakeHarness) -> None:
    contract.hosts_nothing_follows_containers(h, "node-1", "c1")


def test_a_stopped_container_starts_again_where_it_was(h: FakeHarness) -> None:
    h.start("c1", "node-1")
    contract.a_stopped_container_starts_again_where_it_was(h, "node-1", "c1")


def test_a_container_its_guard_stopped_is_still_hosted(h: FakeHarness) -> None:
    h.start("c1", "node-1")
    contract.a_container_its_guard_stopped_is_still_hosted(h, "node-1", "c1")


def test_pinning_a_busy_node_works(h: FakeHarness) -> None:
    h.start("c1", "node-1")
    contract.pinning_a_busy_node_works(h, "node-1")


def test_nothing_migrates_once_stopping(h: FakeHarness) -> None:
    h.start("c1", "node-1")
    contract.nothing_migrates_once_stopping(h, "c1", "node-1", "node-2")


def test_migrating_from_the_wrong_source_is_skipped(h: FakeHarness) -> None:
    h.start("c1", "node-1")
    contract.migrating_from_the_wrong_source_is_skipped(h, "c1", "node-2", "node-3")
    contract.migrating_from_the_wrong_source_is_skipped(h, "gone", "node-1", "node-2")  # runs nowhere


def test_migration_moves_a_running_container(h: FakeHarness) -> None:
    h.start("c1", "node-1")
    contract.migration_moves_a_running_container(h, "c1", "node-1", "node-2")


def test_power_off_then_on(h: FakeHarness) -> None:
    contract.power_off_then_on(h, "node-3")
