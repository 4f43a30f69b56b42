"""One actor at a time, with two `serve` controllers on one store and the web page: a plan
approved on the standby's page runs once, under the leader, between its epochs; the standby's
page executes nothing and the standby acts on nothing. The controllers are real (their loops,
leases and stores); their node operations are recordings."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from rich.console import Console
from starlette.testclient import TestClient

from peakpack.db.store import Store
from peakpack.orchestrator.act.apply import hand_to_leader
from peakpack.orchestrator.act.controller import Controller, ControllerSettings
from peakpack.orchestrator.domain.config import demo_snapshot
from peakpack.orchestrator.domain.model import ClusterSnapshot, Inventory
from peakpack.orchestrator.domain.plan import Action
from peakpack.orchestrator.domain.ports import Observation, Services
from peakpack.orchestrator.domain.records import ApprovalState
from peakpack.orchestrator.domain.states import ActionState, PlanStatus
from peakpack.orchestrator.faces.web.app import create_app
from tests.unit.orchestrator.faces.web.test_app import TOKEN, inventory_with_token

TTL = 2.0


class RecordingOps:
    """Node operations that succeed, journal like the real batch, and remember who ran them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.migrated: list[int] = []
        self.powered: list[tuple[str, str]] = []

    def power_on(self, node: str, reason: str) -> None:
        self.powered.append(("on", node))

    def power_off(self, node: str, reason: str) -> None:
        self.powered.append(("off", node))

    def migrate(self, actions: Sequence[tuple[int, Action]], stop_requested: Callable[[], bool]
                ) -> dict[int, ActionState]:
        for aid, _ in actions:
            self.migrated.append(aid)
            self.store.plans.set_action_state(aid, ActionState.SUCCEEDED)
        return {aid: ActionState.SUCCEEDED for aid, _ in actions}

    def pin(self, node: str) -> None: ...

    def hosts_nothing(self, node: str, stopped: Collection[str] = ()) -> bool:
        return True


def services(ops: RecordingOps, snap: ClusterSnapshot) -> Services:
    return Services(observe=lambda: Observation(snap), ops=ops, settle=lambda: [],  # type: ignore[arg-type]
                    adjust_plan=lambda plan, _s: plan, account_energy=lambda _s, _p: [])


def wait_for(check: Callable[[], object], seconds: float) -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    return None


def controller(inv: Inventory, store: Store, ops: RecordingOps, log: io.StringIO) -> Controller:
    settings = ControllerSettings(dry_run=False, approve=True, time_limit_s=2, epoch_seconds=3600, lease_ttl_s=TTL)
    return Controller(inv, store, settings, console=Console(file=log, width=300),
                      services=services(ops, demo_snapshot(inv)))


def test_a_plan_approved_on_the_standbys_page_runs_once_under_the_leader(tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    with Store.open(url) as a, Store.open(url) as b, Store.open(url) as page_store:
        logs = {"leader": io.StringIO(), "standby": io.StringIO()}
        ops = {"leader": RecordingOps(a), "standby": RecordingOps(b)}
        leader = controller(inv, a, ops["leader"], logs["leader"])
        threads = [threading.Thread(target=leader.run_forever)]
        threads[0].start()
        assert wait_for(lambda: a.plans.history(), 60), logs["leader"].getvalue()  # it leads, plans
        standby = controller(inv, b, ops["standby"], logs["standby"])
        threads.append(threading.Thread(target=standby.run_forever))
        threads[1].start()
        try:
            assert wait_for(lambda: "standby: serve@" in logs["standby"].getvalue(), 30)
            [plan] = a.plans.history()
            assert plan.status is PlanStatus.RECOMMENDED and plan.actions
            # the standby's page, wired as `serve --http-port` wires it
            page = create_app(page_store, inv, applier=lambda pid, partial, by: hand_to_leader(
                page_store, pid, partial, by, wait_s=60, stop_requested=standby.stopped))
            client = TestClient(page, base_url="http://127.0.0.1")
            answer = client.post(f"/plans/{plan.plan_id}/approve", data={"token": TOKEN, "by": "ana"})
            assert answer.status_code == 200, answer.text
            assert f"plan {plan.plan_id}: APPLIED" in answer.text and f"run by {leader.owner}" in answer.text
            again = client.post(f"/plans/{plan.plan_id}/approve", data={"token": TOKEN, "by": "bob"})
            assert again.status_code == 409 and "already APPLIED" in again.text
        finally:
            standby.stop()
            leader.stop()
            for t in threads:
                t.join(60)
        record = page_store.plans.get(plan.plan_id)
        assert record.status is PlanStatus.APPLIED and record.decided_by == "web:ana"
        migrations = [a.id for a in page_store.plans.actions(plan_id=plan.plan_id) if a.kind == "migrate"]
        assert ops["leader"].migrated == migrations  # each once, by the leader
        assert ops["standby"].migrated == [] and ops["standby"].powered == []  # the standby acted on nothing
        assert f"approved plan {plan.plan_id} (web:ana): APPLIED" in logs["leader"].getvalue()
        assert "approved plan" not in logs["standby"].getvalue()


def test_the_leader_refuses_an_approval_it_cannot_run_and_the_page_says_why(tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        log = io.StringIO()
        leader = controller(inv, store, RecordingOps(store), log)
        leader.run_epoch()  # a RECOMMENDED plan
        [plan] = store.plans.history()
        store.plans.set_status(plan.plan_id, PlanStatus.REJECTED, only_from=[PlanStatus.RECOMMENDED],
                               decided_by="cli:bob")  # decided elsewhere after the approval was queued
        approval = store.approvals.request(plan.plan_id, False, "web:ana")
        leader.run_approved()
        got = store.approvals.get(approval)
        assert got.state is ApprovalState.REFUSED and "already REJECTED by cli:bob" in (got.outcome or "")
        assert got.applied_by == leader.owner
        leader.finish()


def test_a_page_waits_a_while_then_says_the_plan_was_handed_over(tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        leader = controller(inv, store, RecordingOps(store), io.StringIO())
        leader.run_epoch()
        leader.finish()  # no controller leads now: nobody takes the approval
        [plan] = store.plans.history()
        page = create_app(store, inv, applier=lambda pid, partial, by: hand_to_leader(store, pid, partial, by,
                                                                                     wait_s=0.5))
        answer = TestClient(page, base_url="http://127.0.0.1").post(f"/plans/{plan.plan_id}/approve",
                                                                     data={"token": TOKEN})
        assert answer.status_code == 202 and "handed to the controller that leads" in answer.text
        assert [a.state for a in store.approvals.pending()] == [ApprovalState.PENDING]
        assert store.plans.get(plan.plan_id).status is PlanStatus.RECOMMENDED  # nothing ran here
