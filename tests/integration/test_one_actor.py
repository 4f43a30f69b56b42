"""Trust under faults and bad input, on the real lab (nothing mocked):

- a NaN memory label on a container: the epoch goes on, the container stays put and the label
  is listed with its fix (by `plan` and on the web page);
- Ctrl-C (or SIGTERM) of `peakpack migrate` after the freeze: the migration in flight is settled,
  the command says how it ended and exits 128 + the signal, and the container runs exactly once
  with its memory state;
- two `serve` processes on one store, each with its web page: a plan approved on the standby's
  page runs once, under the leader, which journals it; the standby acts on nothing."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.faces.web.app import create_app
from tests.integration.test_service import REPO, spread_thinly, where
from tests.integration.test_web_page import TOKEN, web_inventory

pytestmark = pytest.mark.integration
IMAGE = "peakpack/busybox:lab"
#: the counter and 40 MB of memory to dump: the freeze lasts long enough to be interrupted in
COUNTER = ('head -c 40000000 /dev/urandom > /dev/shm/ballast; id=$RANDOM; i=0; '
           'while :; do i=$((i+1)); echo "$id $i"; sleep 0.1; done')
FROZEN = {MigrationState.CHECKPOINTING, MigrationState.TRANSFERRING, MigrationState.RESTORING}


def peakpack(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "peakpack", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def test_a_nan_label_leaves_its_container_in_place_and_the_epoch_goes_on(clean_lab: Lab, tmp_path: Path) -> None:
    lab, db = clean_lab, tmp_path / "pp.db"
    spread_thinly(lab)
    made = lab.exec("node-1", ["docker", "run", "-d", "--name", "odd", "--network", "none", "--label",
                               "peakpack.memory_mb=nan", "--label", "peakpack.cpu=0.2", IMAGE, "sleep", "100000"])
    assert made.returncode == 0, made.stderr
    plan = peakpack("plan", "--inventory", str(lab.inventory_path), "--db", f"sqlite:///{db}", "--time-limit", "5",
                    "--json")
    assert plan.returncode == 0 and "Traceback" not in plan.stderr, plan.stderr
    staying = {s["container"]: s for s in json.loads(plan.stdout)["immovable"]}
    assert staying["odd"]["node"] == "node-1"
    assert staying["odd"]["reason"].startswith("label peakpack.memory_mb: 'nan' is not a finite number; give ")
    table = peakpack("plan", "--inventory", str(lab.inventory_path), "--db", f"sqlite:///{db}", "--time-limit", "5")
    assert table.returncode == 0 and "label peakpack.memory_mb" in table.stdout, table.stderr
    served = peakpack("serve", "--once", "--inventory", str(lab.inventory_path), "--db", f"sqlite:///{db}",
                      "--time-limit", "5")
    assert served.returncode == 0 and "epoch: plan" in served.stderr, served.stderr
    assert where(lab)["odd"] == ["node-1"]  # it stays, whatever else the epoch did
    with Store.open(f"sqlite:///{db}") as store:
        from starlette.testclient import TestClient

        html = TestClient(create_app(store), base_url="http://127.0.0.1").get("/").text
    assert '<tr class="staying" data-container="odd">' in html and "label peakpack.memory_mb: &#39;nan&#39;" in html


def counter(lab: Lab, node: str) -> tuple[int, int]:
    ident, count = lab.exec(node, ["docker", "logs", "--tail", "1", "victim"]).stdout.split()
    return int(ident), int(count)


def copies(lab: Lab) -> dict[str, str]:
    found = {}
    for node in ("node-1", "node-2", "node-3"):
        state = lab.exec(node, ["docker", "inspect", "-f", "{{.State.Running}}", "victim"])
        if state.returncode == 0:
            found[node] = "running" if state.stdout.strip() == "true" else "stopped"
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_migrate_after_the_freeze_settles_it(clean_lab: Lab, tmp_path: Path, sig: signal.Signals) -> None:
    lab, db = clean_lab, tmp_path / "pp.db"
    made = lab.exec("node-1", ["docker", "run", "-d", "--name", "victim", "--network", "none", "--stop-timeout", "1",
                               IMAGE, "sh", "-c", COUNTER])
    assert made.returncode == 0, made.stderr
    deadline = time.monotonic() + 60
    while not lab.exec("node-1", ["docker", "logs", "--tail", "1", "victim"]).stdout.strip():
        assert time.monotonic() < deadline
        time.sleep(0.3)
    before = counter(lab, "node-1")
    proc = subprocess.Popen([sys.executable, "-m", "peakpack", "migrate", "victim", "--to", "node-2", "--inventory",
                             str(lab.inventory_path), "--db", f"sqlite:///{db}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        with Store.open(f"sqlite:///{db}") as store:
            deadline = time.monotonic() + 300
            while not any(m.state in FROZEN for m in store.migrations.history()):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.02)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, (proc.returncode, out, err)
    assert "Traceback" not in err and f"{sig.name}: settling what is in flight" in err
    assert re.search(r"victim: node-1 -> node-2: (SUCCEEDED|ROLLED_BACK)", out), (out, err)
    assert err.rstrip().endswith(f"stopped ({sig.name})"), err
    where_now = copies(lab)
    assert list(where_now.values()) == ["running"], where_now  # one copy, nothing left stopped
    ident, count = counter(lab, next(iter(where_now)))
    assert ident == before[0] and count > before[1]  # the same process: its memory came along
    with Store.open(f"sqlite:///{db}") as store:
        [m] = store.migrations.history()
        assert m.state in (MigrationState.SUCCEEDED, MigrationState.ROLLED_BACK) and store.lease.holder() is None


def serve_with_page(lab: Lab, db: Path, inventory: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "peakpack", "serve", "--inventory", str(inventory),
                                 "--db", f"sqlite:///{db}", "--time-limit", "5", "--epoch-seconds", "3600",
                                 "--approve", "--http-port", "0", "--lease-ttl", "6"],
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


def page_of(log: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = re.search(r"web page: (http://\S+/)", log.read_text())
        if found:
            return found.group(1)
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    raise AssertionError(log.read_text())


def test_a_plan_approved_on_the_standbys_page_runs_once_under_the_leader(clean_lab: Lab, tmp_path: Path) -> None:
    lab, db = clean_lab, tmp_path / "pp.db"
    spread_thinly(lab)
    inventory = web_inventory(lab)
    logs = {"leader": tmp_path / "leader.log", "standby": tmp_path / "standby.log"}
    leader = serve_with_page(lab, db, inventory, logs["leader"])
    procs = [leader]
    try:
        page_of(logs["leader"], leader)
        with Store.open(f"sqlite:///{db}") as store:
            deadline = time.monotonic() + 300
            while not store.plans.history():
                assert time.monotonic() < deadline, logs["leader"].read_text()
                time.sleep(0.5)
            [plan] = store.plans.history()
        assert plan.status.value == "RECOMMENDED" and plan.migrations, logs["leader"].read_text()
        standby = serve_with_page(lab, db, inventory, logs["standby"])
        procs.append(standby)
        url = page_of(logs["standby"], standby)
        deadline = time.monotonic() + 60
        while "standby: serve@" not in logs["standby"].read_text():
            assert "leading" not in logs["standby"].read_text(), logs["standby"].read_text()  # one leader
            assert time.monotonic() < deadline, logs["standby"].read_text()
            time.sleep(0.2)
        form = urllib.parse.urlencode({"token": TOKEN, "by": "lab-test"}).encode()
        request = urllib.request.Request(f"{url}plans/{plan.plan_id}/approve", data=form, method="POST")
        with urllib.request.urlopen(request, timeout=600) as answer:
            text = answer.read().decode()
        assert f"plan {plan.plan_id}: APPLIED" in text, text
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(300)
    leader_log, standby_log = logs["leader"].read_text(), logs["standby"].read_text()
    assert f"approved plan {plan.plan_id} (web:lab-test): APPLIED" in leader_log, leader_log
    assert "approved plan" not in standby_log and "migrating" not in standby_log, standby_log
    with Store.open(f"sqlite:///{db}") as store:
        migrations = store.migrations.history()
        runs = Counter(m.action_id for m in migrations)
        assert runs and all(n == 1 for n in runs.values()), runs  # each action ran once
        assert all(m.state is MigrationState.SUCCEEDED for m in migrations), migrations
        approval = store.approvals.get(1)
        assert approval.applied_by is not None and "leading " not in standby_log
        assert f"as {approval.applied_by} (lease token" in leader_log  # the one that ran it is the leader
    assert len({nodes[0] for nodes in where(lab).values()}) < 3  # consolidated, by the leader alone
