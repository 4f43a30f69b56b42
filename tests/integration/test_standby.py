"""A hot standby on PostgreSQL takes over from a leader killed with SIGKILL in the middle of a live
migration: within two epochs it settles that migration (finished or rolled back from the facts),
no action runs twice, and every container runs exactly once with its state. Real lab, real
PostgreSQL server, real `peakpack serve` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.orchestrator.domain.states import MigrationState
from tests.support.postgres import postgres_server

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
IMAGE = "peakpack/busybox:lab"
COUNTER = 'id=$RANDOM; i=0; while :; do i=$((i+1)); echo "$id $i"; sleep 0.1; done'
#: serve's epoch sets the migrations' weights and the break-even horizon: with epochs under ~45 s
#: consolidating these three containers does not pay, and the leader would migrate nothing
EPOCH = 60
IN_FLIGHT = {MigrationState.CREATING, MigrationState.PRECOPY, MigrationState.CHECKPOINTING,
             MigrationState.TRANSFERRING, MigrationState.RESTORING}


def serve(lab: Lab, url: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "peakpack", "serve", "--inventory",
                                 str(lab.inventory_path), "--epoch-seconds", str(EPOCH), "--lease-ttl", "6",
                                 "--time-limit", "2", "--db", url], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


def counters(lab: Lab, names: list[str]) -> dict[str, tuple[str, int, int]]:
    """name -> (node, process id, count) for every running copy; fails on two running copies."""
    found: dict[str, tuple[str, int, int]] = {}
    for n in lab.layout.nodes:
        for name in names:
            if lab.exec(n.name, ["docker", "inspect", "-f", "{{.State.Running}}", name]).stdout.strip() != "true":
                continue
            assert name not in found, f"{name} runs on {found[name][0]} and {n.name}"
            ident, count = lab.exec(n.name, ["docker", "logs", "--tail", "1", name]).stdout.split()
            found[name] = (n.name, int(ident), int(count))
    return found


def test_standby_settles_the_migration_a_killed_leader_left(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    names = [f"app-{i}" for i in (1, 2, 3)]
    for i, name in enumerate(names, 1):  # spread thinly: the plan consolidates them
        proc = lab.exec(f"node-{i}", ["docker", "run", "-d", "--name", name, "--network", "none", "--stop-timeout",
                                      "1", "--label", "peakpack.cpu=0.3", "--label", "peakpack.memory_mb=64",
                                      IMAGE, "sh", "-c", COUNTER])
        assert proc.returncode == 0, proc.stderr
    time.sleep(1.5)
    before = counters(lab, names)
    with postgres_server() as url:
        leader = serve(lab, url, tmp_path / "leader.log")
        time.sleep(3)  # the leader takes the lease first
        standby = serve(lab, url, tmp_path / "standby.log")
        try:
            with Store.open(url) as store:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and not any(m.state in IN_FLIGHT for m in store.migrations.history()):
                    time.sleep(0.05)
                caught = [m for m in store.migrations.history() if m.state in IN_FLIGHT]
                assert caught, (tmp_path / "leader.log").read_text()
                os.kill(leader.pid, signal.SIGKILL)
                killed_at = time.monotonic()
                leader.wait(10)
                settled = False
                while time.monotonic() < killed_at + 2 * EPOCH + 6:
                    m = next(x for x in store.migrations.history() if x.id == caught[0].id)
                    if m.state.terminal:
                        settled = True
                        break
                    time.sleep(0.5)
                log = (tmp_path / "standby.log").read_text()
                assert settled, f"migration {caught[0].id} still {m.state.value} two epochs after the kill:\n{log}"
                # forward, back, or (killed before the freeze) the source never stopped: all settled
                assert m.state in (MigrationState.SUCCEEDED, MigrationState.ROLLED_BACK, MigrationState.FAILED), m
                # the standby logs what it settled once settling returns, a moment after the store shows it
                while f"migration {caught[0].id}" not in log and time.monotonic() < killed_at + 2 * EPOCH + 36:
                    time.sleep(0.5)
                    log = (tmp_path / "standby.log").read_text()
                assert "took over" in log and f"migration {caught[0].id}" in log, log
                time.sleep(2)
                runs = Counter(m.action_id for m in store.migrations.history() if m.action_id is not None)
                assert all(n == 1 for n in runs.values()), runs  # no action ran twice
        finally:
            for proc in (leader, standby):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
    after = counters(lab, names)
    assert set(after) == set(names)  # every container runs, exactly once (counters() checks)
    for name in names:
        assert after[name][1] == before[name][1] and after[name][2] > before[name][2], (name, before, after)
