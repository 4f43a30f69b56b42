"""EnginePool's decisions that need no node: API version negotiation, the SSH URL, and refusing
nodes whose host key can't be pinned before any connection is tried."""

from __future__ import annotations

from dataclasses import replace

import pytest

from peakpack.orchestrator.domain.config import demo_inventory
from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import SshConfig
from peakpack.orchestrator.domain.settings import RemoteSettings
from peakpack.orchestrator.remote.docker_api import EnginePool, negotiated_version, ssh_url


def test_negotiated_version_is_the_older_of_engine_and_sdk() -> None:
    assert negotiated_version("1.41") == "1.41"  # dockerd 20.10 refuses anything newer
    newest = negotiated_version("9.99")
    assert newest != "9.99" and negotiated_version(newest) == newest


def test_ssh_url_brackets_ipv6() -> None:
    ssh = SshConfig(user="ops", port=2222)
    assert ssh_url("192.0.2.1", ssh) == "ssh://ops@192.0.2.1:2222"
    assert ssh_url("2001:db8::1", ssh) == "ssh://ops@[2001:db8::1]:2222"


def test_nodes_that_cannot_be_pinned_are_refused_without_connecting() -> None:
    inventory = demo_inventory()
    assert all(n.ssh is None or n.ssh.known_hosts is None for n in inventory.nodes)
    pool = EnginePool(replace(inventory, remote=RemoteSettings(connect_timeout_seconds=0.1)))
    node = inventory.nodes[0].name
    with pytest.raises(NodeError, match=f"node {node}: no \\[nodes.ssh\\] known_hosts"):
        pool.run(node, lambda api: api.ping())
    with pytest.raises(NodeError, match="node ghost: not in the inventory"):
        pool.run("ghost", lambda api: api.ping())
