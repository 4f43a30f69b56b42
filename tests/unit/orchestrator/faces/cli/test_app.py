"""The CLI end to end: real subprocesses, a real SQLite file, exact JSON shapes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.paths import REPO

PEAKPACK = [sys.executable, "-m", "peakpack"]


def run(*args: str, db: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PEAKPACK_DB": f"sqlite:///{db}", "COLUMNS": "200"}
    proc = subprocess.run([*PEAKPACK, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_plan_json_shape_and_history(tmp_path: Path) -> None:
    db = tmp_path / "pp.db"
    proc = run("plan", "--json", "--time-limit", "5", db=db)
    plan = json.loads(proc.stdout)
    assert set(plan) == {"plan_id", "dry_run", "policy", "actions", "before", "after", "solver", "immovable", "held",
                         "status", "expires_at", "prediction", "qos", "lowered_caps"}
    assert plan["status"] == "RECOMMENDED"
    assert plan["held"] == {}
    assert plan["immovable"] == []  # the demo's containers can all move
    assert plan["dry_run"] is True and plan["policy"] == "peakpack"
    assert isinstance(plan["plan_id"], int)
    for side in ("before", "after"):
        assert set(plan[side]) == {"nodes_on", "power_w", "max_cpu_util"}
        assert 0 <= plan[side]["max_cpu_util"] <= 1
    assert set(plan["solver"]) == {"status", "seconds", "objective", "bound", "work", "stopped_by_clock"}
    assert plan["solver"]["bound"] <= plan["solver"]["objective"] + 1e-6
    # the demo's workers are spread thinly: the plan consolidates and switches nodes off
    assert plan["after"]["nodes_on"] < plan["before"]["nodes_on"]
    assert plan["after"]["power_w"] < plan["before"]["power_w"]
    assert plan["after"]["max_cpu_util"] <= 0.70 + 1e-9
    kinds = [a["kind"] for a in plan["actions"]]
    assert "migrate" in kinds and "power_off" in kinds
    assert kinds.index("power_off") > max(i for i, k in enumerate(kinds) if k == "migrate")
    for a in plan["actions"]:
        keys = {"kind", "container", "source", "target", "clients"} if a["kind"] == "migrate" else {"kind", "node"}
        assert set(a) == keys | {"prediction"}
        # the demo snapshot says nothing of its networks: every mover's clients must reconnect elsewhere
        assert a.get("clients", "reconnect-elsewhere") == "reconnect-elsewhere"
    # the prediction's total is the sum of its actions' parts; migrations are frozen, power actions not
    total = plan["prediction"]
    assert total["frozen_source"] == "default" and total["horizon_s"] > 0
    assert abs(total["energy_saved_j"] - sum(a["prediction"]["energy_saved_j"] for a in plan["actions"])) <= 1
    assert all(("frozen_ms" in a["prediction"]) == (a["kind"] == "migrate") for a in plan["actions"])

    plans = json.loads(run("history", "plans", "--json", db=db).stdout)
    assert [p["plan_id"] for p in plans] == [plan["plan_id"]]
    actions = json.loads(run("history", "actions", "--since", "1h", "--json", db=db).stdout)
    assert len(actions) == len(plan["actions"])
    table = run("history", "actions", db=db).stdout
    assert "migrate" in table


def test_plan_table_and_baseline_policy(tmp_path: Path) -> None:
    db = tmp_path / "pp.db"
    out = run("plan", "--policy", "noop", db=db).stdout
    assert "noop" in out and "nodes on" in out
    proc = run("plan", "--policy", "magic", db=db, check=False)
    assert proc.returncode == 2 and "magic" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_inventory_is_one_line_without_traceback(tmp_path: Path) -> None:
    inv = tmp_path / "inv.toml"
    inv.write_text((REPO / "inventory" / "demo.toml").read_text().replace("cpus = 16", "cpus = 0", 1))
    proc = run("plan", "--inventory", str(inv), "--snapshot", str(REPO / "inventory" / "demo-snapshot.json"),
               db=tmp_path / "pp.db", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "nodes[1].cpus: must be >= 1" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "pp.db").exists() or json.loads(
        run("history", "plans", "--json", db=tmp_path / "pp.db").stdout) == []


def test_bad_flags_fail_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "pp.db"
    proc = run("history", "plans", "--since", "yesterday", db=db, check=False)
    assert proc.returncode == 2 and "--since" in proc.stderr and "Traceback" not in proc.stderr
    proc = run("plan", "--snapshot", str(REPO / "inventory" / "demo-snapshot.json"), db=db, check=False)
    assert proc.returncode == 2 and "--inventory" in proc.stderr
    proc = run("plan", "--snapshot", "x.json", db=db, check=False)
    assert proc.returncode == 2 and "--snapshot" in proc.stderr and proc.stderr.count("\n") == 1


def test_serve_dry_run_plans_each_epoch_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "pp.db"
    env = {**os.environ, "PEAKPACK_DB": f"sqlite:///{db}"}
    args = ["serve", "--inventory", str(REPO / "inventory" / "demo.toml"),
            "--snapshot", str(REPO / "inventory" / "demo-snapshot.json"),
            "--dry-run", "--epoch-seconds", "1", "--time-limit", "1"]
    proc = subprocess.Popen([*PEAKPACK, *args], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        count = 0
        while time.monotonic() < deadline and count < 2:
            time.sleep(0.5)
            if db.exists():
                probe = run("history", "plans", "--json", db=db, check=False)
                if probe.returncode == 0:
                    count = len(json.loads(probe.stdout))
        assert count >= 2, "serve should store one plan per epoch"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "stopped" in stderr
    plans = json.loads(run("history", "plans", "--json", db=db).stdout)
    assert all(p["dry_run"] for p in plans)


def test_power_status_and_clear_hand_a_quarantined_node_back(tmp_path: Path) -> None:
    from peakpack.db.store import Store

    db = tmp_path / "pp.db"
    with Store.open(f"sqlite:///{db}") as store:
        store.power.quarantine("n2", "failed to wake: BMC timeout")
    assert json.loads(run("power", "status", "--json", db=db).stdout) == {"n2": "failed to wake: BMC timeout"}
    assert "BMC timeout" in run("power", "status", db=db).stdout
    bad = run("power", "clear", "n1", db=db, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "n1 is not quarantined (quarantined: n2)" in bad.stderr
    assert "n2: cleared" in run("power", "clear", "n2", db=db).stdout
    assert json.loads(run("power", "status", "--json", db=db).stdout) == {}
    with Store.open(f"sqlite:///{db}") as store:
        assert store.power.quarantined() == {}
