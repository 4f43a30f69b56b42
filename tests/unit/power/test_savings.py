"""The savings ledger on stored rows: idle power x time off, minus measured migrations and wakes,
per day, per plan and in total, RAPL and DCMI apart, modelled costs never in the net; and the
recorder that writes those rows from counter readings around power actions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from peakpack.db.store import Store
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.model import ClusterConfig, Inventory
from peakpack.orchestrator.domain.savings import SavingKind, SavingRecord, headline, ledger
from peakpack.power.savings import SavingsRecorder, plan_of
from tests.support.build import node_spec

T0 = datetime(2026, 11, 24, 22, 0, tzinfo=UTC)
H = timedelta(hours=1)


def with_plans(store: Store, count: int) -> None:
    """Plans 1..count in the store (ledger rows name the plan that switched a node off)."""
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = make_plan(inv, snap, policy="noop")
    for _ in range(count):
        store.plans.save(plan, inventory="demo", snapshot=snap)


def stored(tmp_path: Path, rows: list[SavingRecord]) -> list[SavingRecord]:
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        with_plans(store, 8)
        for r in rows:
            store.savings.add(r)
        return store.savings.history()


def test_saved_is_idle_power_times_time_off_net_of_measured_costs_per_day_plan_and_total(tmp_path: Path) -> None:
    rows = stored(tmp_path, [
        SavingRecord(SavingKind.MIGRATION, None, 7, T0 - timedelta(minutes=1), T0, "rapl", energy_j=5_000.0),
        SavingRecord(SavingKind.OFF, "node-3", 7, T0, T0 + 4 * H, "rapl", idle_w=100.0),  # 22:00 to 02:00
        SavingRecord(SavingKind.BOOT, "node-3", 7, T0, T0 + 4 * H, "rapl", energy_j=20_000.0),
        SavingRecord(SavingKind.OFF, "node-4", 8, T0 + H, None, "dcmi", idle_w=200.0),  # still off
    ])
    book = ledger(rows, until=T0 + 3 * H)
    rapl, dcmi = book.total["rapl"], book.total["dcmi"]
    assert rapl.saved_j == pytest.approx(100 * 3 * 3600)  # accrued until `until`
    assert rapl.spent_j == pytest.approx(25_000) and rapl.net_j == pytest.approx(1_080_000 - 25_000)
    assert dcmi.saved_j == pytest.approx(200 * 2 * 3600) and dcmi.spent_j == 0  # never added to rapl's
    assert book.nodes_off == 1
    days = {(r["period"], r["source"]): r for r in book.rows("day")}
    assert days[("2026-11-24", "rapl")]["saved_j"] == pytest.approx(100 * 2 * 3600)  # 22:00-24:00
    assert days[("2026-11-25", "rapl")]["saved_j"] == pytest.approx(100 * 3600)
    assert days[("2026-11-24", "rapl")]["spent_j"] == pytest.approx(25_000)  # costs on the day they began
    plans = {(r["period"], r["source"]): r for r in book.rows("plan")}
    assert plans[("plan 7", "rapl")]["net_j"] == pytest.approx(1_080_000 - 25_000)
    assert plans[("plan 8", "dcmi")]["saved_j"] == pytest.approx(1_440_000)
    assert [r["period"] for r in book.rows("total")] == ["all", "all"]
    later = ledger(rows, until=T0 + 3 * H, since=T0 + 2 * H)  # a window: only what accrued in it
    assert later.total["rapl"].saved_j == pytest.approx(100 * 3600) and later.total["rapl"].spent_j == 0


def test_costs_that_were_not_measured_are_counted_apart_with_their_model(tmp_path: Path) -> None:
    rows = stored(tmp_path, [
        SavingRecord(SavingKind.OFF, "node-3", 1, T0, T0 + H, "rapl", idle_w=50.0),
        SavingRecord(SavingKind.BOOT, "node-3", None, T0, T0 + H, "rapl", model_j=45_000.0, note="RAPL restarts"),
        SavingRecord(SavingKind.OFF, "node-5", 1, T0, T0 + H, None, note="its counter could not be read"),
    ])
    book = ledger(rows, until=T0 + H)
    rapl = book.total["rapl"]
    assert (rapl.saved_j, rapl.spent_j, rapl.unmeasured, rapl.model_spent_j) == (180_000, 0, 1, 45_000)
    assert rapl.net_j == 180_000  # the model's 45 kJ are not subtracted as if measured
    assert book.plans[1]["rapl"].unmeasured == 1  # a wake counts for the plan that switched the node off
    assert book.not_measured == ["node-5: idle power not measured (its counter could not be read)"]
    line = headline(book)
    assert "180.0 kJ saved, 180.0 kJ net of migrations and wakes (rapl counters)" in line
    assert "1 cost(s) not measured (model 45.0 kJ, not in the net)" in line
    assert "1 node(s) off with their idle power not measured" in line
    assert headline(ledger([], until=T0)) == "energy saved: nothing switched off yet"


class Shell:
    """A node's READ_SCRIPT answer, changed by the test as time goes."""

    def __init__(self) -> None:
        self.text = ""

    def run(self, node: str, argv: list[str], timeout: float) -> Any:
        return SimpleNamespace(stdout=self.text)


def counter(uj: int, boot: str = "b1") -> str:
    return f"boot {boot}\nbusy 0\nintel-rapl:0 {uj} {10**12}\n"


def test_the_recorder_measures_idle_the_way_back_and_migrations_from_one_counter(tmp_path: Path) -> None:
    inv = Inventory(ClusterConfig("lab", epoch_seconds=60),
                    tuple(node_spec(n, address=a, cpus=2, memory_mb=4096)
                          for n, a in (("node-1", "192.0.2.1"), ("node-2", "192.0.2.2"))))
    shell = Shell()
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        with_plans(store, 4)
        rec = SavingsRecorder(inv, store, shell, log=lambda _: None, probe_s=0.2)  # type: ignore[arg-type]
        # a migration batch with no baseline row: not measured, held for the plan's first power-off
        shell.text = counter(0)
        with rec.migrations(["node-1", "node-2"], 1):
            shell.text = counter(10**6)
        assert store.savings.history() == []  # nothing switched off yet: nothing to charge it to

        reads = iter([counter(5 * 10**9), counter(5 * 10**9 + 20 * 10**6)])  # 20 J over the 0.2 s probe

        def run(node: str, argv: list[str], timeout: float) -> Any:
            return SimpleNamespace(stdout=next(reads))

        shell.run = run  # type: ignore[method-assign]
        probe = rec.probe_idle("node-2")
        seconds = (probe[1].at - probe[0].at).total_seconds()
        rec.switched_off("node-2", "plan 3: emptied", probe)
        off = store.savings.open_off("node-2")
        assert off is not None and off.plan_id == 3 and off.source == "rapl"
        assert off.idle_w == pytest.approx(20 / seconds)
        [migration] = [r for r in store.savings.history() if r.kind is SavingKind.MIGRATION]
        assert migration.plan_id == 3 and migration.energy_j is None and migration.model_j == 4500.0

        shell.run = Shell.run.__get__(shell)  # type: ignore[method-assign]
        shell.text = counter(5 * 10**9 + 20 * 10**6 + 900 * 10**6)  # 900 J since: the way off and back
        rec.woke("node-2", None)
        assert store.savings.open_off("node-2") is None
        [boot] = [r for r in store.savings.history() if r.kind is SavingKind.BOOT]
        assert (boot.source, boot.energy_j, boot.model_j, boot.plan_id) == ("rapl", pytest.approx(900.0), None, 3)

        # a real machine: RAPL restarted at boot (new boot id): the wake is not measured
        shell.text = counter(10**9)
        rec.switched_off("node-1", "plan 4: emptied", rec.probe_idle("node-1"))
        shell.text = counter(10**6, boot="b2")
        rec.woke("node-1", None)
        boots = [r for r in store.savings.history() if r.kind is SavingKind.BOOT and r.node == "node-1"]
        assert boots[0].energy_j is None and boots[0].model_j == pytest.approx(180 * 250)
        assert boots[0].note and boots[0].note.startswith("not measured")


def test_plans_are_read_from_the_executors_reasons() -> None:
    assert plan_of("plan 12: emptied") == 12 and plan_of("plan 3") == 3
    assert plan_of("migration 4 of web runs nowhere and waits for node-2") is None and plan_of(None) is None


def test_the_faces_show_the_headline_and_the_counters_count_from_the_controllers_start(tmp_path: Path) -> None:
    from peakpack.orchestrator.act.metrics import ControllerMetrics
    from peakpack.orchestrator.faces.report import History, write_report
    from peakpack.orchestrator.faces.web.state import page_state

    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        store.savings.add(SavingRecord(SavingKind.OFF, "node-3", None, T0, T0 + H, "rapl", idle_w=100.0))
        state = page_state(store, None)
        rows = store.savings.history()
    assert state["savings"]["headline"].startswith("energy saved: 360.0 kJ saved, 360.0 kJ net")
    page = write_report(History(savings=ledger(rows, T0 + H).rows("day"),
                                savings_headline=state["savings"]["headline"]), tmp_path / "report").read_text()
    assert "energy saved: 360.0 kJ saved" in page and "Energy saved, per day" in page
    metrics = ControllerMetrics()
    metrics.observe_ledger(ledger(rows, T0 + H))  # the start: what was saved before is not counted
    more = [*rows, SavingRecord(SavingKind.BOOT, "node-3", None, T0 + H, T0 + H, "rapl", energy_j=1000.0)]
    metrics.observe_ledger(ledger(more, T0 + H))
    assert metrics.registry.get_sample_value("peakpack_energy_spent_joules_total", {"source": "rapl"}) == 1000.0
    assert metrics.registry.get_sample_value("peakpack_energy_saved_joules_total", {"source": "rapl"}) == 0.0
