"""A container a node's QoS guard stopped keeps its node on, on the real lab: node-3 runs nothing
but holds `batch`, which its guard stopped for memory (stopped there, its `mem_evict` event
journaled as the controller journals the guard's report). Switched off, node-3 would never start
it again (`epoch.restart_stopped` starts it where it was, on a powered node). `peakpack plan`
switches the empty node-2 off, not node-3."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.orchestrator.domain.records import QosEventRecord

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
IMAGE = "peakpack/busybox:lab"


def test_a_node_holding_a_container_its_guard_stopped_is_not_planned_off(clean_lab: Lab, tmp_path: Path) -> None:
    lab, url = clean_lab, f"sqlite:///{tmp_path / 'pp.db'}"
    for node, name, labels in (("node-1", "web", []), ("node-3", "batch", ["--label", "peakpack.qos=be"])):
        run = lab.exec(node, ["docker", "run", "-d", "--name", name, "--network", "none", *labels, IMAGE,
                              "sleep", "100000"])
        assert run.returncode == 0, run.stderr
    assert lab.exec("node-3", ["docker", "stop", "-t", "0", "batch"]).returncode == 0  # what the guard does
    with Store.open(url) as store:
        store.qos.add([QosEventRecord("node-3", "a1b2c3", 1, datetime.now(UTC), "mem_evict", "batch",
                                      "available 40 MiB < 10% of 512 MiB")])
    proc = subprocess.run([sys.executable, "-m", "peakpack", "plan", "--inventory", str(lab.inventory_path),
                           "--db", url, "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    offs = {a["node"] for a in json.loads(proc.stdout)["actions"] if a["kind"] == "power_off"}
    assert "node-3" not in offs, proc.stdout
    assert "node-2" in offs, proc.stdout  # empty, nothing stopped there: switched off as before
    assert lab.exec("node-3", ["docker", "inspect", "-f", "{{.State.Status}}", "batch"]).stdout.strip() == "exited"
