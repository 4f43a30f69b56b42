"""`apply_plan` and the controller's plan statuses over fake node operations: auto mode applies at
once, `--approve` leaves the plan RECOMMENDED and runs nothing, a drifted plan is refused whole
with nothing run, or with `partial` run without the actions that no longer hold."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.orchestrator.act.apply import apply_plan
from peakpack.orchestrator.act.controller import Controller, ControllerSettings
from peakpack.orchestrator.act.epoch import settle_plans
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.errors import PlanError
from peakpack.orchestrator.domain.model import ClusterSnapshot
from peakpack.orchestrator.domain.plan import ActionKind
from peakpack.orchestrator.domain.states import ActionState, PlanStatus
from tests.support.fakes import fake_services

INV = demo_inventory()
SNAP = demo_snapshot(INV)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as s:
        yield s


def recommended(store: Store) -> int:
    """A plan the controller made under --approve: stored RECOMMENDED, nothing run."""
    services = fake_services(store, SNAP, [])
    plan = Controller(INV, store, ControllerSettings(dry_run=False, approve=True, time_limit_s=5),
                      services=services).run_once()
    assert services.ops.calls == []  # type: ignore[attr-defined]
    assert store.plans.get(plan.plan_id).status is PlanStatus.RECOMMENDED
    assert {a.state for a in store.plans.actions(plan_id=plan.plan_id)} == {ActionState.PENDING}
    return plan.plan_id  # type: ignore[return-value]


def test_auto_mode_applies_at_once(store: Store) -> None:
    plan = Controller(INV, store, ControllerSettings(dry_run=False, time_limit_s=5),
                      services=fake_services(store, SNAP, [])).run_once()
    assert store.plans.get(plan.plan_id).status is PlanStatus.APPLIED


def test_an_approved_plan_runs_exactly_as_stored(store: Store) -> None:
    pid = recommended(store)
    services = fake_services(store, SNAP, [])
    result = apply_plan(store, INV, pid, partial=False, decided_by="cli:test", services=services)
    assert result.status is PlanStatus.APPLIED and not result.review.drifted
    stored = store.plans.actions(plan_id=pid)
    moved = [c for kind, c in services.ops.calls if kind == "migrate"]  # type: ignore[attr-defined]
    assert moved == [a.container for a in stored if a.kind == ActionKind.MIGRATE.value]
    assert {a.state for a in stored} == {ActionState.SUCCEEDED}
    rec = store.plans.get(pid)
    assert rec.status is PlanStatus.APPLIED and rec.decided_by == "cli:test"
    with pytest.raises(PlanError, match=f"plan {pid} is already APPLIED by cli:test"):
        apply_plan(store, INV, pid, partial=False, decided_by="cli:test", services=services)


def drifted(store: Store, pid: int) -> tuple[str, ClusterSnapshot]:
    """The fresh cluster without the container the plan moves first."""
    first = next(a for a in store.plans.actions(plan_id=pid) if a.kind == ActionKind.MIGRATE.value)
    assert first.container is not None
    return first.container, replace(SNAP, containers=tuple(c for c in SNAP.containers if c.name != first.container))


def test_a_drifted_plan_is_refused_whole_and_nothing_runs(store: Store) -> None:
    pid = recommended(store)
    gone, fresh = drifted(store, pid)
    services = fake_services(store, fresh, [])
    with pytest.raises(PlanError, match=rf"^PLAN_ID: plan {pid} no longer holds: #\d+ migrate {gone}: .*--partial"):
        apply_plan(store, INV, pid, partial=False, decided_by="cli:test", services=services)
    assert services.ops.calls == []  # type: ignore[attr-defined]
    assert store.plans.get(pid).status is PlanStatus.RECOMMENDED
    assert {a.state for a in store.plans.actions(plan_id=pid)} == {ActionState.PENDING}


def test_partial_runs_the_rest_and_journals_what_it_skipped(store: Store) -> None:
    pid = recommended(store)
    gone, fresh = drifted(store, pid)
    services = fake_services(store, fresh, [])
    result = apply_plan(store, INV, pid, partial=True, decided_by="web", services=services)
    assert result.status is PlanStatus.PARTIAL
    assert [c.action.container for c in result.review.skipped] == [gone]
    moved = [c for kind, c in services.ops.calls if kind == "migrate"]  # type: ignore[attr-defined]
    assert gone not in moved and moved
    skipped = [a for a in store.plans.actions(plan_id=pid) if a.state is ActionState.SKIPPED]
    assert [(a.container, a.detail) for a in skipped] == [(gone, "apply --partial: no such container in the snapshot")]
    assert store.plans.get(pid).status is PlanStatus.PARTIAL


def test_a_plan_left_applying_by_a_crash_is_settled_from_its_journal(store: Store) -> None:
    pid = recommended(store)
    assert store.plans.set_status(pid, PlanStatus.APPLYING, only_from=[PlanStatus.RECOMMENDED], decided_by="cli:x")
    first, *_ = store.plans.actions(plan_id=pid)
    store.plans.set_action_state(first.id, ActionState.ONGOING)
    assert settle_plans(store) == []  # in doubt: reconcile must settle the action first
    store.plans.set_action_state(first.id, ActionState.SUCCEEDED)
    assert settle_plans(store) == [f"plan {pid}: left APPLYING by a stopped applier, now PARTIAL"]
    assert {a.state for a in store.plans.actions(plan_id=pid)[1:]} == {ActionState.SKIPPED}
    assert store.plans.get(pid).status is PlanStatus.PARTIAL
