"""Pressure fed back to the planner (orchestrator/decide/pressure.py): stall shares from counter
deltas, the lower cap of a node whose latency-sensitive containers stalled (with its hysteresis and
its explanation), suspected devils, and which stopped containers start again; the inventory's
`[qos]` and `[planner.qos]`, and the `peakpack.qos` label."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from peakpack.orchestrator.decide.planner.rules import Remembered
from peakpack.orchestrator.decide.pressure import (
    EVICTED,
    RESTART_FAILED,
    RESTARTED,
    LoweredCap,
    Reading,
    lowered_caps,
    node_stalls,
    pressure_records,
    restarts,
    suspected_devils,
)
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.capacity import node_capacity, over_cap_nodes
from peakpack.orchestrator.domain.config import parse_snapshot
from peakpack.orchestrator.domain.model import (
    ClusterConfig,
    ClusterSnapshot,
    Container,
    Inventory,
    NodeState,
    PowerCurve,
    QosClass,
)
from peakpack.orchestrator.domain.records import DemandRecord, PressureRecord, QosEventRecord
from peakpack.orchestrator.domain.settings import PlannerSettings, QosCapSettings
from peakpack.orchestrator.faces.cli.plan import qos_rows
from peakpack.orchestrator.observe.pressure import qos_of
from tests.support.build import node_spec

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
EPOCH = timedelta(seconds=60)


def at(i: int) -> datetime:
    return T0 + i * EPOCH


def row(i: int, container: str, stall: float | None, node: str = "w0", qos: str = "ls") -> PressureRecord:
    return PressureRecord(at(i), container, node, qos, 60.0, stall, None, None, None)


def test_stall_shares_are_counter_deltas_over_the_interval() -> None:
    before = pressure_records([Reading("web", "w0", QosClass.LS, 1_000_000, 0, 0, 5 * 10**9)], {}, at(0))
    assert before[0].cpu_stall is None and before[0].interval_s is None  # nothing to subtract yet
    now = pressure_records([Reading("web", "w0", QosClass.LS, 7_000_000, 600_000, 60_000, 11 * 10**9)],
                           {"web": before[0]}, at(1))
    r = now[0]
    assert r.interval_s == 60.0 and r.qos == "ls"
    assert (r.cpu_stall, r.memory_some, r.memory_full, r.wait) == pytest.approx((0.1, 0.01, 0.001, 0.1))
    assert r.stall == pytest.approx(0.1)


def test_a_counter_that_went_back_or_a_move_gives_no_share() -> None:
    previous = {"web": PressureRecord(at(0), "web", "w0", "ls", None, None, None, None, None, 9_000_000, 0, 0, 10)}
    restarted = pressure_records([Reading("web", "w0", QosClass.LS, 1_000, 0, 0, 5)], previous, at(1))[0]
    assert restarted.cpu_stall is None and restarted.wait is None
    moved = pressure_records([Reading("web", "w1", QosClass.LS, 9_500_000, 0, 0, 20)], previous, at(1))[0]
    assert moved.cpu_stall is None and moved.interval_s is None
    no_psi = pressure_records([Reading("web", "w0", QosClass.LS, None, None, None, 70)], previous, at(1))[0]
    assert no_psi.cpu_stall is None and no_psi.stall == pytest.approx(60 / 1e9 / 60)  # run-queue wait instead


def test_a_nodes_stall_is_its_most_stalled_latency_sensitive_container() -> None:
    rows = [row(0, "web", 0.05), row(0, "db", 0.3), row(0, "hog", 0.9, qos="be"), row(0, "api", 0.4, node="w1")]
    stalls = node_stalls(rows)
    assert [(s.container, s.share) for s in stalls["w0"]] == [("db", 0.3)]
    assert [(s.container, s.share) for s in stalls["w1"]] == [("api", 0.4)]


def caps(series: list[float], settings: PlannerSettings | None = None) -> float | None:
    lowered = lowered_caps([row(i, "web", s) for i, s in enumerate(series)], settings or PlannerSettings())
    return lowered["w0"].cap if "w0" in lowered else None


def test_the_cap_is_lowered_at_once_and_raised_after_clear_epochs_hysteresis() -> None:
    assert caps([0.02, 0.05]) is None
    assert caps([0.2]) == pytest.approx(0.60)  # one stalled interval: one step lower at once
    assert caps([0.2, 0.3, 0.25]) == pytest.approx(0.40)  # one more step each, down to min_cap
    assert caps([0.2] * 6) == pytest.approx(0.40)
    assert caps([0.2, 0.0, 0.0]) == pytest.approx(0.60)  # two clear intervals are not yet three
    assert caps([0.2, 0.0, 0.0, 0.0]) is None  # three clear ones give the step back
    assert caps([0.2, 0.2, 0.0, 0.0, 0.0]) == pytest.approx(0.60)  # one step per three clear
    assert caps([0.2, 0.0, 0.0, 0.2, 0.0]) == pytest.approx(0.50)  # the clear count starts again
    slow = PlannerSettings(qos=QosCapSettings(stall_share=0.5, cap_step=0.05, min_cap=0.5, clear_epochs=1))
    assert caps([0.6, 0.6, 0.6, 0.6], slow) == pytest.approx(0.50)
    assert caps([0.6, 0.1], slow) is None


def test_the_why_names_the_container_the_share_and_the_way_back() -> None:
    [why] = [c.why for c in lowered_caps([row(0, "web", 0.23), row(1, "web", 0.01)], PlannerSettings()).values()]
    assert why == ("cap lowered from 70% to 60%: latency-sensitive web stalled 23% of the interval ending "
                   "2026-01-01 12:00:00 UTC (over 10%); 1 of 3 clear intervals before a step back")


def two_nodes() -> tuple[Inventory, ClusterSnapshot]:
    nodes = tuple(node_spec(f"w{i}", address=f"10.0.0.{i + 1}", cpus=10, memory_mb=16384,
                            curve=PowerCurve.linear(100, 200)) for i in range(2))
    inv = Inventory(ClusterConfig("t", epoch_seconds=600), nodes)
    snap = ClusterSnapshot(nodes=(NodeState("w0"), NodeState("w1")), taken_at=T0, containers=(
        Container("web", "w0", 2.0, 512), Container("batch", "w0", 4.0, 512, qos=QosClass.BE),
        Container("other", "w1", 3.0, 512)))
    return inv, snap


def test_a_lowered_cap_goes_through_the_one_capacity_rule() -> None:
    inv, snap = two_nodes()
    lowered = replace(inv, nodes=(replace(inv.nodes[0], cap=0.5), inv.nodes[1]))
    assert node_capacity(lowered.nodes[0], lowered.cluster) == (5.0, 0.95 * 16384)
    assert node_capacity(lowered.nodes[0], lowered.cluster, cap=0.95) == (5.0, 0.95 * 16384)  # never above
    assert node_capacity(lowered.nodes[0], lowered.cluster, cap=0.4)[0] == 4.0
    assert over_cap_nodes(inv, snap.containers) == set() and over_cap_nodes(lowered, snap.containers) == {"w0"}


def test_a_node_under_a_lowered_cap_sheds_load_and_plan_explain_says_why() -> None:
    inv, snap = two_nodes()
    why = "cap lowered from 70% to 50%: latency-sensitive web stalled 30% of the interval ..."
    facts = Remembered(lowered={"w0": LoweredCap("w0", 0.5, why)})
    plan = make_plan(inv, snap, facts=facts, time_limit_s=5)
    moved = {a.container for a in plan.migrations}
    assert moved and all(a.source == "w0" for a in plan.migrations)
    load = sum(c.cpu for c in snap.containers if c.node == "w0" and c.name not in moved)
    assert load <= 0.5 * 10
    for name in moved:
        assert plan.explanations[name].startswith("moves w0 -> w1: w0 is over its 50% CPU cap")
        assert plan.explanations[name].endswith(f"(w0: {why})")
    assert f"w0: {why}" in plan.notes
    unchanged = make_plan(inv, snap, time_limit_s=5)
    assert not unchanged.migrations and not unchanged.explanations["web"].endswith(")")


def test_a_container_whose_co_runners_stall_when_it_is_busy_is_a_suspected_devil() -> None:
    pressure, demand = [], []
    for i in range(8):
        busy = i % 2 == 0
        pressure += [row(i, "web", 0.3 if busy else 0.02), row(i, "noisy", None, qos="be"), row(i, "calm", 0.01)]
        demand += [DemandRecord(at(i), "noisy", "w0", 60.0, 0.9 if busy else 0.1, None, 100.0, "cgroup"),
                   DemandRecord(at(i), "web", "w0", 60.0, 0.2, None, 100.0, "cgroup"),
                   DemandRecord(at(i), "calm", "w0", 60.0, 0.3 if busy else 0.31, None, 100.0, "cgroup")]
    suspects = suspected_devils(pressure, demand, PlannerSettings())
    assert set(suspects) == {"noisy"}
    assert suspects["noisy"] == ("suspected devil: its co-runners stalled 30% when it used more than 0.50 cores, "
                                 "2% otherwise (8 observations on w0)")
    assert suspected_devils(pressure[:9], demand[:9], PlannerSettings()) == {}  # too few observations


def evicted(container: str, i: int, kind: str = EVICTED, node: str = "w0") -> QosEventRecord:
    return QosEventRecord(node, "abc", i, at(i), kind, container, "available 40 MiB < 10% of 512 MiB")


def test_a_stopped_container_starts_again_when_its_node_has_room_for_its_usual_memory() -> None:
    inv, snap = two_nodes()
    demand = [DemandRecord(at(i), "batch2", "w0", 60.0, 0.5, None, mb, "cgroup")
              for i, mb in enumerate((100, 120, 9000))]
    [r] = restarts([evicted("batch2", 3)], snap, inv, demand, per_hour=3, now=at(4))
    assert r.now and r.node == "w0" and r.why.endswith("w0 has room for its usual 120 MB again")
    full = replace(snap, containers=(*snap.containers, Container("fat", "w0", 0.1, 14500)))
    [r] = restarts([evicted("batch2", 3)], full, inv, demand, per_hour=3, now=at(4))
    assert not r.now and r.why == "w0 has 41 MB of its memory cap free, batch2 usually uses 120 MB"


def test_a_container_is_not_restarted_once_started_failed_running_or_too_often() -> None:
    inv, snap = two_nodes()
    assert restarts([evicted("batch2", 1), evicted("batch2", 2, RESTARTED)], snap, inv, [], 3, at(3)) == []
    assert restarts([evicted("batch2", 1), evicted("batch2", 2, RESTART_FAILED)], snap, inv, [], 3, at(3)) == []
    assert restarts([evicted("batch", 1)], snap, inv, [], 3, at(3)) == []  # it runs (someone started it)
    churn = [evicted("batch2", i, EVICTED if i % 2 else RESTARTED) for i in range(1, 8)]
    [r] = restarts(churn, snap, inv, [], per_hour=3, now=at(8))
    assert not r.now and r.why.startswith("restarted 3 times in the last hour")
    off = replace(snap, nodes=(NodeState("w0", powered=False), NodeState("w1")),
                  containers=tuple(c for c in snap.containers if c.node != "w0"))
    [r] = restarts([evicted("batch2", 1)], off, inv, [], 3, at(2))
    assert not r.now and r.why == "w0 is off or held"


# -- labels and the inventory ---------------------------------------------------------------------

def test_the_qos_label_by_the_guards_rule() -> None:
    assert qos_of({"peakpack.qos": "be"}) == (QosClass.BE, None)
    assert qos_of({}) == (QosClass.LS, None)
    assert qos_of({"peakpack.qos": "best-effort"}) == (
        QosClass.LS, "label peakpack.qos='best-effort': use ls or be; treated as ls")


def test_plan_lists_bad_labels_and_suspected_devils_next_to_their_labels() -> None:
    snap = ClusterSnapshot(nodes=(NodeState("w0"),), containers=(
        Container("typo", "w0", 1.0, 64, qos_problem="label peakpack.qos='BE': use ls or be; treated as ls"),
        Container("fine", "w0", 1.0, 64, qos=QosClass.BE), Container("noisy", "w0", 1.0, 64)))
    assert qos_rows(snap, {"noisy": "suspected devil: ..."}) == [
        {"container": "noisy", "node": "w0", "class": "turtle", "qos": "ls", "note": "suspected devil: ..."},
        {"container": "typo", "node": "w0", "class": "turtle", "qos": "ls",
         "note": "label peakpack.qos='BE': use ls or be; treated as ls"}]


def test_a_snapshot_file_carries_the_qos_class() -> None:
    inv, _ = two_nodes()
    snap = parse_snapshot({"containers": [{"name": "b1", "node": "w0", "cpu": 1, "memory_mb": 10, "qos": "be"},
                                          {"name": "l1", "node": "w0", "cpu": 1, "memory_mb": 10}]}, inv)
    assert [c.qos for c in snap.containers] == [QosClass.BE, QosClass.LS]
    assert snap.to_json()["containers"][0]["qos"] == "be" and "qos" not in snap.to_json()["containers"][1]
