"""Exactly once under real faults: a live migration of a container with an in-memory counter is hit
by a fault at one of its steps (a network partition, dockerd killed, a full disk) on either node.
After healing and reconciling, the container runs on exactly one node, nothing of it is left on
the other, and its memory state went on (the same process id, a larger counter). Nothing is
mocked: the faults are lab/faults.py's, done inside the nodes' namespaces. Power cuts, a killed
controller and a stop request are in test_faults_crashes.py (two files, so that the two test
workers share them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from peakpack.lab import Lab
from peakpack.lab.faults import Fault
from tests.support.victim import NODES, STEPS, UNDO, assert_exactly_once, heal, migrate_with, settle, start_victim

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("side", sorted(NODES))
@pytest.mark.parametrize("fault", sorted(UNDO, key=lambda f: f.value))
def test_fault_at_a_step_ends_exactly_once(clean_lab: Lab, tmp_path: Path, fault: Fault, side: str,
                                           step: str) -> None:
    lab, db = clean_lab, tmp_path / "pp.db"
    before = start_victim(lab)

    async def inject(now: str) -> None:
        if now == step:
            lab.fault(NODES[side], fault)

    try:
        migrate_with(lab, db, inject)
    finally:
        heal(lab)
    settle(lab, db)
    # dockerd without live-restore stops every container when it starts again: a source killed
    # before the freeze loses the container's memory with its daemon (docs/migration.md)
    lost_with_daemon = fault is Fault.KILL_DOCKERD and side == "source" and step == "checkpointing"
    assert_exactly_once(lab, db, before, state_survives=not lost_with_daemon)
