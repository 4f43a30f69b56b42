"""`peakpack plan show`, `apply` and `reject` as an operator runs them (real subprocesses, a real
SQLite file): a stored plan is shown with its status, and every plan `apply` may not run (unknown,
made for another inventory, expired, already decided) is refused in one line, exit 2, before any
node is contacted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from peakpack.db.store import Store
from peakpack.orchestrator.decide.solve import make_plan as plan_in_process
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from tests.support.paths import REPO

DEMO = REPO / "inventory" / "demo.toml"
SNAPSHOT = REPO / "inventory" / "demo-snapshot.json"


def run(*args: str, db: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PEAKPACK_DB": f"sqlite:///{db}", "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "peakpack", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)
    assert not check or proc.returncode == 0, proc.stderr
    return proc


def refused(proc: subprocess.CompletedProcess[str], text: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], proc.stderr


def make_plan(db: Path, inventory: Path = DEMO) -> dict:
    return json.loads(run("plan", "--inventory", str(inventory), "--snapshot", str(SNAPSHOT), "--policy", "ffd",
                          "--json", db=db).stdout)


def test_show_then_refusals_then_reject(tmp_path: Path) -> None:
    db = tmp_path / "pp.db"
    plan = make_plan(db)
    pid = plan["plan_id"]
    assert plan["status"] == "RECOMMENDED" and plan["actions"]
    table = run("plan", "show", str(pid), db=db).stdout
    assert f"Plan {pid} (demo, ffd): RECOMMENDED" in table and "PENDING" in table
    assert f"peakpack apply {pid} --inventory FILE" in table
    shown = json.loads(run("plan", "show", str(pid), "--json", db=db).stdout)
    assert shown["status"] == "RECOMMENDED" and len(shown["actions"]) == len(plan["actions"])
    assert shown["prediction"] == plan["prediction"]
    assert [a["prediction"] for a in shown["actions"]] == [a["prediction"] for a in plan["actions"]]

    refused(run("plan", "show", "999", db=db, check=False), "PLAN_ID: no plan 999 in this store")
    refused(run("apply", "999", "--inventory", str(DEMO), db=db, check=False), "PLAN_ID: no plan 999 in this store")
    refused(run("apply", str(pid), db=db, check=False), "Missing option '--inventory'")
    refused(run("apply", str(pid), "--inventory", str(REPO / "inventory" / "example.toml"), db=db, check=False),
            f"--inventory: plan {pid} was made for another inventory")

    run("reject", str(pid), db=db)
    refused(run("apply", str(pid), "--inventory", str(DEMO), db=db, check=False),
            f"PLAN_ID: plan {pid} is already REJECTED by cli:")
    assert json.loads(run("plan", "show", str(pid), "--json", db=db).stdout)["status"] == "REJECTED"


def test_an_expired_plan_is_refused_and_a_bad_ttl_names_its_key(tmp_path: Path) -> None:
    db = tmp_path / "pp.db"
    inventory = tmp_path / "demo.toml"
    inventory.write_text(DEMO.read_text() + "\n[review]\nplan_ttl_seconds = 0.001\n")
    pid = make_plan(db, inventory)["plan_id"]
    refused(run("apply", str(pid), "--inventory", str(inventory), db=db, check=False),
            f"PLAN_ID: plan {pid} expired at ")
    assert json.loads(run("plan", "show", str(pid), "--json", db=db).stdout)["status"] == "EXPIRED"

    inventory.write_text(DEMO.read_text() + "\n[review]\nplan_ttl_seconds = -5\n")
    refused(run("plan", "--inventory", str(inventory), "--snapshot", str(SNAPSHOT), db=db, check=False),
            "review.plan_ttl_seconds")


def test_show_explains_the_stored_plan_without_solving_again(tmp_path: Path) -> None:
    db = tmp_path / "pp.db"
    made = json.loads(run("plan", "--inventory", str(DEMO), "--snapshot", str(SNAPSHOT), "--explain", "db-1",
                          "--json", db=db).stdout)
    other = make_plan(db)  # ffd: another plan, stored after it, that moves db-1 elsewhere or not at all
    why = made["explanation"]["db-1"]
    assert why.startswith("moves ")
    shown = json.loads(run("plan", "show", str(made["plan_id"]), "--explain", "db-1", "--json", db=db).stdout)
    assert shown["explanation"] == {"db-1": why} and shown["plan_id"] == made["plan_id"]
    assert json.loads(run("plan", "show", str(other["plan_id"]), "--explain", "db-1", "--json",
                          db=db).stdout)["explanation"]["db-1"] != why
    assert f"db-1: {why}" in run("plan", "show", str(made["plan_id"]), "--explain", "db-1", db=db).stdout
    assert len(json.loads(run("history", "plans", "--json", db=db).stdout)) == 2  # nothing was planned again
    refused(run("plan", "show", str(made["plan_id"]), "--explain", "nope", db=db, check=False),
            f"--explain: plan {made['plan_id']} has no container 'nope'")


def test_show_prints_the_notes_and_refuses_to_explain_a_plan_stored_without_explanations(tmp_path: Path) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    note = "the wall-clock safety net (2 s) stopped the solver before its work limit (2 deterministic s)"
    old = replace(plan_in_process(inv, snap), explanations={}, notes=(note,))
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        pid = store.plans.save(old, inventory="demo", snapshot=snap)
    assert f"note: {note}" in run("plan", "show", str(pid), db=tmp_path / "pp.db").stdout
    refused(run("plan", "show", str(pid), "--explain", "db-1", db=tmp_path / "pp.db", check=False),
            f"--explain: plan {pid} was stored without explanations")
