"""The migration's copies and its preflight room check on a real lab:

- one failed copy stops its siblings: when one rsync of a migration fails, the others (still
  writing into the target) are stopped on the source and have ended by the time the failure is
  raised, so settling can remove the target's folders without a copy writing into them again;
- preflight refuses a target whose docker disk cannot hold the container, before anything changes
  on either node."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.faults import Fault
from peakpack.migrate.copy import copy_all
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.errors import PeakpackError
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.power.ipmi import power_probe

pytestmark = pytest.mark.integration
IMAGE = "peakpack/busybox:lab"


def size(lab: Lab, node: str, folder: str) -> int:
    out = lab.exec(node, ["sh", "-c", f"du -sb {folder} 2>/dev/null | cut -f1"]).stdout.strip()
    return int(out or 0)


def test_a_failed_copy_stops_its_siblings_before_it_is_raised(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    big, copy = f"/tmp/pp-big-{time.time_ns()}", f"/tmp/pp-copy-{time.time_ns()}"
    # many files: a copy that takes seconds, whatever the disk's speed
    made = lab.exec("node-1", ["sh", "-c", f"mkdir -p {big} && for i in $(seq 400); do "
                                           f"head -c 2000000 /dev/urandom > {big}/f$i; done"])
    assert made.returncode == 0, made.stderr
    inv = load_inventory(lab.inventory_path)
    try:
        with RemoteShell(inv) as shell:
            with pytest.raises(PeakpackError):
                # the second copy cannot write its destination (below a file): it fails at once
                shell.call(copy_all(shell.pool, "node-1", [(big + "/", copy + "/"),
                                                           (big + "/", "/etc/hostname/nope/")], inv.node("node-2")))
            stopped_at = size(lab, "node-2", copy)
            running = lab.exec("node-1", ["sh", "-c", f"ps -eo args | grep -v grep | grep -c 'rsync.*{copy}' || true"])
            assert running.stdout.strip() == "0", running.stdout
            time.sleep(2)
            assert size(lab, "node-2", copy) == stopped_at  # nothing writes there any more
            assert stopped_at < size(lab, "node-1", big)  # it was stopped, not finished
    finally:
        lab.exec("node-1", ["rm", "-rf", big, copy])


def test_preflight_refuses_a_target_without_disk_for_the_container(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    made = lab.exec("node-1", ["docker", "run", "-d", "--name", "roomy", "--network", "none", IMAGE,
                               "sh", "-c", "head -c 50000000 /dev/urandom > /blob; sleep 100000"])
    assert made.returncode == 0, made.stderr
    time.sleep(2)
    lab.fault("node-2", Fault.FILL_DISK)
    inv = load_inventory(lab.inventory_path)
    try:
        with RemoteShell(inv) as shell, Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
            result = shell.call(Migration(shell.pool, shell.engines, store, inv, "roomy", "node-1", "node-2",
                                          bmc_power=power_probe(inv)).run())
    finally:
        lab.fault("node-2", Fault.FREE_DISK)
    assert result.refused and "free for docker" in (result.reason or ""), result
    assert lab.exec("node-2", ["docker", "inspect", "roomy"]).returncode != 0  # nothing made on the target
    running = lab.exec("node-1", ["docker", "inspect", "-f", "{{.State.Running}}", "roomy"]).stdout.strip()
    assert running == "true"
