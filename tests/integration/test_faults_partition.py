"""Exactly once under a network partition (the node's link down) on either node at each step of a
live migration, done for real inside the node's namespace
(tests/support/victim.py: fault_at_a_step_ends_exactly_once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from peakpack.lab import Lab
from peakpack.lab.faults import Fault
from tests.support.victim import NODES, STEPS, fault_at_a_step_ends_exactly_once

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("side", sorted(NODES))
def test_partition_at_a_step_ends_exactly_once(clean_lab: Lab, tmp_path: Path, side: str, step: str) -> None:
    fault_at_a_step_ends_exactly_once(clean_lab, tmp_path / "pp.db", Fault.PARTITION, side, step)
