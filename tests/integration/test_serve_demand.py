"""Demand history and honest energy on the real lab: three epochs of `peakpack serve` (the
production planner, default policy) with a container whose load changes. The stored demand
history, the forecast the plans were given and the plans agree; a node with RAPL counters gets
rows labelled rapl, split Kepler's way, and a node without a counter gets rows labelled model.
Nothing is mocked. With an 8 s epoch a migration costs 4500 J / 8 s = 560 W and no node may go
off (its break-even is longer than 1.5 epochs), so the plans leave the lab as it is."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.orchestrator.decide.demand import forecast_demand
from peakpack.orchestrator.domain.model import ClusterSnapshot, Container, NodeState
from peakpack.orchestrator.faces.cli.common import load_inventory

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
EPOCH = 8
#: idles until /tmp/busy exists, then spins: the load changes while serve runs
WORKER = "while :; do if [ -e /tmp/busy ]; then :; else sleep 0.2; fi; done"


def history(url: str, *args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "peakpack", "history", *args, "--json", "--db", url],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def wait_for_plans(url: str, n: int, proc: subprocess.Popen[str], log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        with Store.open(url) as store:
            if len(store.plans.history()) >= n:
                return
        time.sleep(0.5)
    raise AssertionError(f"serve stored fewer than {n} plans in {timeout} s:\n{log.read_text()[-3000:]}")


def test_three_epochs_of_serve_record_demand_plan_on_its_forecast_and_label_energy(clean_lab: Lab,
                                                                                     tmp_path: Path) -> None:
    lab, url, log = clean_lab, f"sqlite:///{tmp_path / 'pp.db'}", tmp_path / "serve.log"
    run = lab.exec("node-1", ["docker", "run", "-d", "--name", "worker", "--network", "none",
                              "peakpack/busybox:lab", "sh", "-c", WORKER])
    assert run.returncode == 0, run.stderr
    lab.rapl_counter("node-3", False)  # a node without an energy counter
    try:
        with log.open("w") as out:
            serve = subprocess.Popen([sys.executable, "-m", "peakpack", "serve", "--inventory",
                                      str(lab.inventory_path), "--db", url, "--epoch-seconds", str(EPOCH)],
                                     stdout=out, stderr=subprocess.STDOUT, text=True, cwd=REPO)
            try:
                wait_for_plans(url, 2, serve, log)  # two epochs idle: the second plans on an idle delta
                busy_from = datetime.now().astimezone()
                assert lab.exec("node-1", ["docker", "exec", "worker", "touch", "/tmp/busy"]).returncode == 0
                wait_for_plans(url, 3, serve, log)
            finally:
                serve.send_signal(signal.SIGTERM)
                serve.wait(timeout=120)
        assert serve.returncode == 0, log.read_text()
        assert "epoch failed" not in log.read_text(), log.read_text()
    finally:
        lab.rapl_counter("node-3", True)

    # the demand history: counter deltas, low while idle, high once the loop spins
    rows = history(url, "demand", "--container", "worker")
    deltas = [r for r in rows if r["source"] == "cgroup"]
    # one observation per epoch (the energy after a plan is closed without observing again): the
    # first a one-second sample, each later one a counter delta
    assert rows[0]["source"] == "stats" and len(deltas) >= 2, rows
    assert all(r["node"] == "node-1" and r["cpu"] >= 0 and r["interval_s"] > 0 for r in deltas)
    idle = [r["cpu"] for r in deltas if datetime.fromisoformat(r["at"]) < busy_from]
    busy = [r["cpu"] for r in deltas if datetime.fromisoformat(r["at"]) > busy_from]
    assert idle and busy and max(idle) < 0.1 and max(busy) > 0.2, (idle, busy)

    # the production planner made every plan, and (from the second on, once a counter delta is
    # stored) on the forecast of the history stored before it; history shows what each used
    settings = load_inventory(lab.inventory_path).planner.forecast
    with Store.open(url) as store:
        stored = store.demand.history()
        plans = store.plans.history()
        snapshots = [store.plans.snapshot(p.plan_id) for p in plans]
    assert all(p.policy == "peakpack" for p in plans), [p.policy for p in plans]
    shown = {r["plan_id"]: r["forecast"] for r in rows if r["plan_id"] is not None}
    used = [next(c["cpu"] for c in snap["containers"] if c["name"] == "worker") for snap in snapshots]
    sources = []
    for plan, snap, cpu in zip(plans, snapshots, used):
        observed = ClusterSnapshot(nodes=(NodeState("node-1"),), containers=(Container("worker", "node-1", -1.0, 0),),
                                   taken_at=datetime.fromisoformat(snap["taken_at"]))
        again, forecasts = forecast_demand(observed, stored, settings, EPOCH)
        sources.append(forecasts["worker"].source)
        if forecasts["worker"].source == "forecast":
            assert cpu == pytest.approx(again.container("worker").cpu), (plan.plan_id, cpu)
        assert shown[plan.plan_id] == pytest.approx(cpu), (plan.plan_id, shown)
    assert sources[1:3] == ["forecast", "forecast"], sources
    assert used[-1] > used[0]  # the plan follows the load

    # energy: RAPL rows say rapl and are split; the node without a counter gets model rows
    energy = history(url, "energy")
    sources = {e["node"]: {x["source"] for x in energy if x["node"] == e["node"]} for e in energy}
    assert sources["node-1"] == {"rapl"} and sources["node-2"] == {"rapl"} and sources["node-3"] == {"model"}
    assert all(e["measured"] == (e["source"] == "rapl") for e in energy)
    split = [e for e in energy if e["node"] == "node-1" and "idle_j" in e]
    assert split and all(e["idle_j"] > 0 and e["residual_j"] >= 0 and e["idle_j"] + e["residual_j"] <= e["energy_j"]
                         + 1e-6 for e in split)
    by_container = {(e["container"], e["source"]): e["energy_j"] for e in history(url, "energy", "--by", "container")}
    assert by_container.get(("worker", "rapl"), 0) > 0
