"""Review then apply on the real lab: `peakpack plan` stores a plan RECOMMENDED, the cluster drifts
(a container the plan moves is removed), `peakpack apply` refuses the plan with the reason and
runs nothing, then `apply --partial` runs the rest and lists what it skipped. Nothing is mocked."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from peakpack.lab import Lab
from peakpack.lab.node import powered

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
COUNTER = "i=0; while :; do i=$((i+1)); echo $i; sleep 0.1; done"


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "peakpack", *args, "--db", f"sqlite:///{db}"],
                          capture_output=True, text=True, cwd=REPO, timeout=900)


def running(lab: Lab) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for n in lab.layout.nodes:
        if powered(n):
            for name in lab.exec(n.name, ["docker", "ps", "--format", "{{.Names}}"]).stdout.split():
                found.setdefault(name, []).append(n.name)
    return found


def test_plan_drift_refuse_then_apply_in_part(clean_lab: Lab, tmp_path: Path) -> None:
    lab, db, inv = clean_lab, tmp_path / "pp.db", str(clean_lab.inventory_path)
    for i in (1, 2, 3):
        proc = lab.exec(f"node-{i}", ["docker", "run", "-d", "--name", f"app-{i}", "--network", "none",
                                      "--label", "peakpack.cpu=0.3", "--label", "peakpack.memory_mb=64",
                                      "peakpack/busybox:lab", "sh", "-c", COUNTER])
        assert proc.returncode == 0, proc.stderr
    time.sleep(2)

    made = cli(db, "plan", "--inventory", inv, "--time-limit", "5", "--json")
    assert made.returncode == 0, made.stderr
    plan = json.loads(made.stdout)
    pid, moves = plan["plan_id"], [a for a in plan["actions"] if a["kind"] == "migrate"]
    assert plan["status"] == "RECOMMENDED" and len(moves) == 2  # three thin containers onto one node
    assert plan["prediction"]["frozen_source"] == "default"  # no migration history yet
    assert all(a["prediction"]["frozen_ms"] > 0 for a in moves)
    assert running(lab) == {f"app-{i}": [f"node-{i}"] for i in (1, 2, 3)}  # planning changed nothing

    gone = moves[0]["container"]
    lab.exec(moves[0]["source"], ["docker", "rm", "-f", gone])

    refused = cli(db, "apply", str(pid), "--inventory", inv)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0, refused.stderr  # one line
    assert f"plan {pid} no longer holds: #1 migrate {gone}" in refused.stderr and "--partial" in refused.stderr
    shown = json.loads(cli(db, "plan", "show", str(pid), "--json").stdout)
    assert shown["status"] == "RECOMMENDED" and {a["state"] for a in shown["actions"]} == {"PENDING"}
    assert gone not in running(lab) and len(running(lab)) == 2  # nothing executed

    applied = cli(db, "apply", str(pid), "--inventory", inv, "--partial", "--json")
    assert applied.returncode == 0, applied.stderr
    result = json.loads(applied.stdout)
    assert result["status"] == "PARTIAL"
    assert [s["action"] for s in result["skipped"]] == [f"migrate {gone}: {moves[0]['source']} -> {moves[0]['target']}"]
    assert result["skipped"][0]["reason"] == "no such container in the snapshot"
    states = {a["action"]: a["state"] for a in result["actions"]}
    assert states[f"migrate {moves[1]['container']}: {moves[1]['source']} -> {moves[1]['target']}"] == "SUCCEEDED"
    placement = running(lab)
    assert placement[moves[1]["container"]] == [moves[1]["target"]]  # moved, and runs exactly once
    assert all(len(nodes) == 1 for nodes in placement.values())

    shown = json.loads(cli(db, "plan", "show", str(pid), "--json").stdout)
    assert shown["status"] == "PARTIAL" and shown["decided_by"].startswith("cli:")
    assert shown["actions"][0]["state"] == "SKIPPED"
    assert shown["actions"][0]["detail"] == "apply --partial: no such container in the snapshot"

    again = cli(db, "apply", str(pid), "--inventory", inv)
    assert again.returncode == 2 and f"plan {pid} is already PARTIAL" in again.stderr

    ledger = {p["plan_id"]: p["ledger"] for p in json.loads(cli(db, "history", "plans", "--json").stdout)}
    assert ledger[pid]["measured_frozen_ms"] > 0  # the one migration that ran
    assert ledger[pid]["measured_energy_j"] > 0 and "rapl" in ledger[pid]["measured_source"]
    assert ledger[pid]["predicted_energy_j"] > 0  # the plan's "after" power over the same seconds
