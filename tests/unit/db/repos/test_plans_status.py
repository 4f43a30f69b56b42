"""A plan's status in the store (SQLite and PostgreSQL): RECOMMENDED -> APPLYING -> APPLIED /
PARTIAL / FAILED by conditional UPDATEs (two appliers: one wins), expiry, rejection, and the
one-line refusals `apply` gives for a plan it may not run."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from peakpack.db.store import Store
from peakpack.orchestrator.act.apply import check_applicable, reject_plan, stored_plan
from peakpack.orchestrator.decide.review import inventory_digest
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.errors import PlanError, StoreError
from peakpack.orchestrator.domain.model import ClusterMetrics
from peakpack.orchestrator.domain.plan import Action, Plan, SolverReport
from peakpack.orchestrator.domain.states import PlanStatus

INV = demo_inventory()
ACTIONS = (Action.migrate("web-1", "node-1", "node-2"), Action.power_off("node-1"))


def save(store: Store, expires_in: float = 3600.0) -> int:
    m = ClusterMetrics(2, 300.0, 0.5)
    plan = Plan("peakpack", ACTIONS, m, m, SolverReport("OPTIMAL", 0.1, 1.0, 1.0))
    return store.plans.save(plan, inventory="demo", snapshot=demo_snapshot(INV),
                           expires_at=datetime.now(UTC) + timedelta(seconds=expires_in),
                           inventory_digest=inventory_digest(INV), prediction={"energy_saved_j": 5.0},
                           action_predictions=[{"frozen_ms": 1.0}, None])


def test_a_stored_plan_is_recommended_with_its_prediction_and_replays_as_stored(store: Store) -> None:
    pid = save(store)
    rec = store.plans.get(pid)
    assert rec.status is PlanStatus.RECOMMENDED and rec.prediction == {"energy_saved_j": 5.0}
    assert rec.inventory_digest == inventory_digest(INV)
    assert [a.prediction for a in store.plans.actions(plan_id=pid)] == [{"frozen_ms": 1.0}, None]
    assert stored_plan(store, rec).actions == ACTIONS
    check_applicable(rec, INV)  # may be applied


def test_status_moves_only_from_the_states_named(store: Store) -> None:
    pid = save(store)
    assert store.plans.set_status(pid, PlanStatus.APPLYING, only_from=[PlanStatus.RECOMMENDED], decided_by="cli:a")
    assert not store.plans.set_status(pid, PlanStatus.APPLYING, only_from=[PlanStatus.RECOMMENDED], decided_by="b")
    assert store.plans.set_status(pid, PlanStatus.PARTIAL, only_from=[PlanStatus.APPLYING])
    rec = store.plans.get(pid)
    assert rec.status is PlanStatus.PARTIAL and rec.decided_by == "cli:a" and rec.decided_at is not None
    with pytest.raises(PlanError, match=f"^PLAN_ID: plan {pid} is already PARTIAL by cli:a;"):
        check_applicable(rec, INV)


def test_of_two_concurrent_appliers_exactly_one_wins(store: Store) -> None:
    pid = save(store)
    barrier = threading.Barrier(8)
    won: list[bool] = []

    def claim(who: int) -> None:
        barrier.wait()
        won.append(store.plans.set_status(pid, PlanStatus.APPLYING, only_from=[PlanStatus.RECOMMENDED],
                                         decided_by=f"t{who}"))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]


def test_old_plans_expire_and_are_refused(store: Store) -> None:
    old, fresh = save(store, expires_in=-1), save(store)
    assert store.plans.expire() == 1
    assert store.plans.get(old).status is PlanStatus.EXPIRED
    assert store.plans.get(fresh).status is PlanStatus.RECOMMENDED
    with pytest.raises(PlanError, match=f"^PLAN_ID: plan {old} expired at .*`peakpack plan --inventory FILE`$"):
        check_applicable(store.plans.get(old), INV)


def test_unknown_ids_and_other_inventories_are_refused_by_name(store: Store) -> None:
    with pytest.raises(StoreError, match=r"^PLAN_ID: no plan 42 in this store"):
        store.plans.get(42)
    pid = save(store)
    other = type(INV)(cluster=type(INV.cluster)("elsewhere"), nodes=INV.nodes)
    with pytest.raises(PlanError, match=f"^--inventory: plan {pid} was made for another inventory"):
        check_applicable(store.plans.get(pid), other)


def test_a_rejected_plan_cannot_be_applied_or_rejected_again(store: Store) -> None:
    pid = save(store)
    reject_plan(store, pid, "web")
    assert store.plans.get(pid).status is PlanStatus.REJECTED
    with pytest.raises(PlanError, match="is REJECTED, not RECOMMENDED"):
        reject_plan(store, pid, "web")
    with pytest.raises(PlanError, match="already REJECTED by web"):
        check_applicable(store.plans.get(pid), INV)
