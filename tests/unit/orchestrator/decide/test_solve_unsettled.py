"""Commands by hand (`migrate`, `pin`, `apply`, `compose up`) keep off a container or node that an
unsettled migration holds, by the rule the planner holds them by (`solve.held_by_unsettled`); the
real-lab case (an IN_DOUBT migration, then `peakpack migrate` of its container) is
tests/integration/test_unsettled_by_hand.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.orchestrator.act.apply import apply_plan
from peakpack.orchestrator.decide.review import inventory_digest
from peakpack.orchestrator.decide.solve import held_by_unsettled, make_plan
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.errors import PlanError
from peakpack.orchestrator.domain.states import PlanStatus
from tests.support.fakes import fake_services
from tests.support.paths import REPO

DEMO = REPO / "inventory" / "demo.toml"


def in_doubt(store: Store, container: str, source: str, target: str) -> int:
    mid = store.migrations.begin(container, source, target)
    store.migrations.step_finished(store.migrations.step_started(mid, "in_doubt"), ok=False,
                                   detail=f"{source} does not answer")
    return mid


def test_the_rule_holds_the_container_and_both_nodes_of_every_unsettled_migration(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        in_doubt(store, "web", "node-1", "node-2")
        open_ = store.migrations.unfinished()
    why = "migration 1 of web (node-1 -> node-2) is not settled"
    assert held_by_unsettled(open_, containers=["web"]) == why
    assert held_by_unsettled(open_, nodes=["node-2"]) == held_by_unsettled(open_, nodes=["node-1"]) == why
    assert held_by_unsettled(open_, containers=["db"], nodes=["node-3"]) is None
    assert held_by_unsettled([], containers=["web"], nodes=["node-1"]) is None


def peakpack(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PEAKPACK_DB": f"sqlite:///{db}", "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "peakpack", *args, "--inventory", str(DEMO)], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)


@pytest.mark.parametrize(("args", "line"), [
    (("migrate", "web", "--to", "node-3"), "error: CONTAINER: web is held: migration 1 of web (node-1 -> node-2)"),
    (("migrate", "db", "--to", "node-2"), "error: --to: node-2 is held: migration 1 of web (node-1 -> node-2)"),
    (("pin", "node-1"), "error: NODE: node-1 is held: migration 1 of web (node-1 -> node-2)"),
])
def test_migrate_and_pin_refuse_what_an_unsettled_migration_holds_before_reaching_a_node(
        tmp_path: Path, args: tuple[str, ...], line: str) -> None:
    """The demo's nodes do not exist: a command that got as far as SSH would fail otherwise."""
    db = tmp_path / "pp.db"
    with Store.open(f"sqlite:///{db}") as store:
        in_doubt(store, "web", "node-1", "node-2")
    proc = peakpack(db, *args)
    assert proc.returncode == 2, proc.stderr
    [said] = proc.stderr.splitlines()
    assert said.startswith(line) and said.endswith("settle it first with `peakpack reconcile --inventory FILE` "
                                                   "(it waits until both its nodes answer), then retry"), said
    with Store.open(f"sqlite:///{db}") as store:
        assert len(store.migrations.history()) == 1 and store.pinning.history() == []


def test_apply_refuses_a_plan_touching_a_node_an_unsettled_migration_holds(tmp_path: Path) -> None:
    """`apply` settles what it can first (here the migration stays IN_DOUBT), then re-checks the
    plan on the view the planner uses, where both nodes are held: refused in one line, nothing run."""
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = make_plan(inv, snap, time_limit_s=5)
    move = plan.migrations[0]
    assert move.source and move.target and move.container
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        plan_id = store.plans.save(plan, inv.cluster.name, snap, inventory_digest=inventory_digest(inv))
        in_doubt(store, "other", move.source, "node-9" if move.source != "node-9" else "node-8")
        services = fake_services(store, snap)
        with pytest.raises(PlanError, match=rf"^PLAN_ID: plan {plan_id} no longer holds: .*node {move.source} is "
                                            r"held: migration 1 of other .* is not settled"):
            apply_plan(store, inv, plan_id, partial=False, decided_by="cli:test", services=services)
        assert store.plans.get(plan_id).status is PlanStatus.RECOMMENDED
        assert services.ops.calls == []  # type: ignore[attr-defined]
