"""Commands by hand keep off what an unsettled migration holds, on the real lab: a migration of
the victim (node-1 -> node-2) loses node-1 to a partition as it settles, so it is IN_DOUBT with
the container running on node-2 and its dumped copy still on node-1. Moving the container on
(`peakpack migrate victim --to node-3`) would leave settling to resume node-1's copy beside the
one on node-3; so it, and pinning either held node, are refused in one line (exit 2) with nothing
changed. `peakpack reconcile` is how the migration gets settled once node-1 answers again: it
runs exactly once afterwards. The victim and "exactly once" are tests/support/victim.py's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.faults import Fault
from peakpack.orchestrator.domain.states import MigrationState
from tests.support.victim import NAME, REPO, assert_exactly_once, copies, heal, migrate_with, start_victim

pytestmark = pytest.mark.integration


def peakpack(lab: Lab, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "peakpack", *args, "--inventory", str(lab.inventory_path),
                           "--db", f"sqlite:///{db}"], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_an_in_doubt_migration_holds_its_container_and_nodes_from_commands_by_hand(clean_lab: Lab,
                                                                                   tmp_path: Path) -> None:
    lab, db = clean_lab, tmp_path / "pp.db"
    before = start_victim(lab)

    async def cut_source(step: str) -> None:
        if step == "settling":
            lab.fault("node-1", Fault.PARTITION)

    try:
        assert migrate_with(lab, db, cut_source) is MigrationState.IN_DOUBT
        assert copies(lab) == {"node-2": "running"}  # node-1 is cut off: its dumped copy cannot be seen

        refusals = {args: peakpack(lab, db, *args) for args in (("migrate", NAME, "--to", "node-3"),
                                                                 ("pin", "node-1"), ("pin", "node-2"))}
        for args, proc in refusals.items():
            assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
            [line] = proc.stderr.strip().splitlines()  # one line, no traceback
            assert "migration 1 of victim (node-1 -> node-2) is not settled" in line, line
            assert "peakpack reconcile" in line, line
        assert refusals[("migrate", NAME, "--to", "node-3")].stderr.startswith("error: CONTAINER: victim is held")

        # nothing changed: the one copy runs on node-2, none on node-3, the migration still open
        assert copies(lab) == {"node-2": "running"}
        assert lab.exec("node-3", ["docker", "ps", "-aq", "--filter", f"name=^{NAME}$"]).stdout.strip() == ""
        with Store.open(f"sqlite:///{db}") as store:
            assert [(m.id, m.state) for m in store.migrations.history()] == [(1, MigrationState.IN_DOUBT)]
            assert store.pinning.history() == []  # pin wrote no cpuset
    finally:
        heal(lab)

    settled = peakpack(lab, db, "reconcile")  # by hand: settles what is open, and nothing else
    assert settled.returncode == 0, settled.stderr
    assert "did: migration 1 (victim node-1 -> node-2): SUCCEEDED" in settled.stdout, settled.stdout
    assert_exactly_once(lab, db, before)
