"""Updating a node's QoS guard on the real lab: a guard.pyz cut short on the node (what a copy
whose connection dropped left before the sha256 check: `cat` ends as at the end of its input, and
the part that arrived replaced the file) cannot report; the next observation treats it as
outdated and installs it whole, and a copy cut short now is refused on the node, leaving the
guard there as it was. The guard is installed on node-3 only and removed afterwards."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.orchestrator.act.epoch import install_guards
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.model import ClusterSnapshot, NodeState
from peakpack.orchestrator.domain.ports import Observation, Services
from peakpack.orchestrator.observe.pressure import read_qos
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.qos import deploy
from peakpack.qos import report as guard_report

pytestmark = pytest.mark.integration
NODE = "node-3"
GUARD = '"$PEAKPACK_QOS_DIR/guard.pyz"'


@pytest.fixture()
def guarded(clean_lab: Lab) -> Iterator[Lab]:
    inv = load_inventory(clean_lab.inventory_path)
    with RemoteShell(inv) as shell:
        shell.call(deploy.install(shell.pool, inv.node(NODE), inv.qos.guard))
    try:
        yield clean_lab
    finally:  # what `qos install` left on the node: its process, its boot hook, its folder
        clean_lab.exec(NODE, ["sh", "-c", f'python3 {GUARD} stop --state-dir "$PEAKPACK_QOS_DIR"; '
                                          'rm -rf "$PEAKPACK_QOS_DIR" "$PEAKPACK_BOOT_DIR/50-peakpack-guard"'])


def on_node(lab: Lab) -> str:
    return lab.exec(NODE, ["sh", "-c", f"sha256sum {GUARD}"]).stdout.split()[0]


def test_a_guard_cut_short_on_its_node_is_installed_whole_at_the_next_observation(guarded: Lab,
                                                                                  tmp_path: Path) -> None:
    lab = guarded
    whole = hashlib.sha256(guard_report.guard_archive()).hexdigest()
    assert on_node(lab) == whole
    cut = lab.exec(NODE, ["sh", "-c", f"head -c 3000 {GUARD} > /tmp/g.part && mv -f /tmp/g.part {GUARD}"])
    assert cut.returncode == 0 and on_node(lab) != whole, cut.stderr
    broken = lab.exec(NODE, guard_report.report_argv(None))
    assert broken.returncode != 0 and "Error" in broken.stderr  # it cannot report any more

    inv = load_inventory(lab.inventory_path)
    said: list[str] = []
    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{tmp_path}/pp.db") as store:
        snapshot = ClusterSnapshot(nodes=(NodeState(NODE),), containers=())  # node-3 only: the others have none
        read = read_qos(inv, store, shell.pool, shell.call, snapshot)
        seen = Observation(snapshot, outdated_guards=tuple(read.outdated), notes=tuple(read.notes))
        services = Services(observe=lambda: seen, ops=None, settle=list, adjust_plan=lambda p, _: p,  # type: ignore[arg-type]
                            account_energy=lambda _s, _p: [], install_guard=deploy.GuardInstaller(inv, shell))
        said += install_guards(store, services, seen)
        [installed] = store.qos.events(kinds=("guard_install",))
        assert installed.node == NODE and (installed.reason or "").startswith("the guard fails to report"), said
        assert on_node(lab) == whole
        deadline = time.monotonic() + 60
        report = guard_report.GuardReport.parse(NODE, lab.exec(NODE, guard_report.report_argv(None)).stdout)
        while not report.running and time.monotonic() < deadline:
            time.sleep(1)
            report = guard_report.GuardReport.parse(NODE, lab.exec(NODE, guard_report.report_argv(None)).stdout)
        assert report.outdated(inv.node(NODE), inv.qos.guard) is None  # runs, this build, these settings

        # a copy cut short now: refused on the node, the guard there stays whole
        archive = guard_report.guard_archive()
        refused = shell.run(NODE, ["sh", "-c", deploy.COPY, "sh", guard_report.ARCHIVE, guard_report.sha256(archive)],
                            input=base64.b64encode(archive[:3000]).decode(), check=False)
        assert refused.exit_status == 1 and "arrived incomplete" in refused.stderr, refused
        assert on_node(lab) == whole
