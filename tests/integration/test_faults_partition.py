"""Exactly once under a network partition (the node's link down) on either node at each step of a
live migration, done for real inside the node's namespace
(tests/support/victim.py: fault_test)."""

from __future__ import annotations

import pytest

from peakpack.lab.faults import Fault
from tests.support.victim import fault_test

pytestmark = pytest.mark.integration

test_partition_at_a_step_ends_exactly_once = fault_test(Fault.PARTITION)
