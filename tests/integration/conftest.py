"""The real lab for integration tests: one 3-node lab per test session (network namespaces, each
node with its own sshd, dockerd --experimental + CRIU, IPMI BMC and RAPL counter), brought up by
the project's own code and removed at the end. Nothing here is mocked.

Fixtures:
- `lab`: the session's `lab.Lab` (3 nodes, 2 CPUs each); `lab.inventory_path` is its
  inventory, `lab.exec(node, argv)` runs a command on a node over SSH.
- `clean_lab`: the same lab, with every node powered on, every fault undone (links up, dockerd
  running, disks freed) and no containers, volumes or user-defined networks, for tests that need a
  known starting point (but for the lab's own segment network, `labnet`, on every node).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from peakpack.lab import Lab
from peakpack.lab.node import docker, powered, start_node
from tests.support.labs import lab_up


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    with lab_up(nodes=3, cpus=2) as lab:
        yield lab


@pytest.fixture()
def clean_lab(lab: Lab) -> Lab:
    lab.clear_faults()
    for node in lab.layout.nodes:
        if not powered(node):
            start_node(node)
        ids = docker(node, "ps", "-aq").stdout.split()
        if ids:
            docker(node, "rm", "-f", *ids)
        volumes = docker(node, "volume", "ls", "-q").stdout.split()
        if volumes:
            docker(node, "volume", "rm", "-f", *volumes)
        docker(node, "network", "prune", "-f")
    lab.ensure_segment_network()
    return lab
