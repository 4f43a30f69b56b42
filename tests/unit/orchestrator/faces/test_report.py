"""`peakpack report` from a real store: an HTML page with the plots inlined and the key figures."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from peakpack.db.store import Store
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.records import EnergyRow
from peakpack.orchestrator.domain.states import MigrationState
from tests.support.paths import REPO


def test_report_page_has_every_plot_and_the_totals(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    t0 = datetime.now(UTC) - timedelta(minutes=30)
    with Store.open(url) as store:
        store.plans.save(make_plan(inv, snap, policy="noop"), inventory="demo", snapshot=snap)
        for frozen in (800.0, 1200.0, 5000.0):
            mid = store.migrations.begin("web-1", "node-1", "node-2")
            store.migrations.finish(mid, MigrationState.SUCCEEDED, frozen_ms=frozen, total_ms=frozen * 2)
        store.energy.add([EnergyRow("node-1", t0, t0 + timedelta(minutes=10), 60_000.0, "rapl"),
                          EnergyRow("node-2", t0, t0 + timedelta(minutes=10), 30_000.0, "rapl")])
        ev = store.power.begin("node-3", "power_off")
        store.power.finish(ev, "SUCCEEDED")
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "peakpack", "report", "--out", str(out), "--db", url],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    page = (out / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 5
    for name in ("nodes_on", "power", "energy", "migrations", "downtime"):
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert "3 migrations" in page and "median downtime 1200 ms" in page and "90.0 kJ measured" in page
    assert "node-3" in page and "power_off" in page


def test_modelled_energy_is_never_reported_as_measured(tmp_path: Path) -> None:
    from peakpack.orchestrator.faces.report import History, energy_split, write_report

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 9_000.0, "rapl", idle_j=6_000.0, residual_j=1_000.0),
            EnergyRow("node-1", t0, t0 + timedelta(seconds=60), 3_000.0, "rapl", container="web-1"),
            EnergyRow("node-2", t0, t0 + timedelta(seconds=60), 7_000.0, "model", idle_j=6_000.0, residual_j=1_000.0)]
    h = History(energy=[r.to_json() for r in rows])
    split = energy_split(h)
    assert split["rapl"] == {"total": 9.0, "idle": 6.0, "residual": 1.0, "containers": 2.0}
    assert split["model"]["total"] == 7.0
    page = write_report(h, tmp_path).read_text()
    assert "9.0 kJ measured" in page and "7.0 kJ modelled" in page and "model (power curve, not measured)" in page
