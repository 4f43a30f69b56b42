"""Who a node is and how to log in to it, refused before any connection when there is no pinned
host key to check it against: both transports (asyncssh in `ssh`, the docker SDK's paramiko in
`docker_api`) start here."""

from __future__ import annotations

from ..domain.errors import NodeError
from ..domain.model import Inventory, NodeSpec, SshConfig


def pinned_login(inventory: Inventory, node: str) -> tuple[NodeSpec, SshConfig]:
    """The node and its SSH settings, refused before any connection when there is no pinned host
    key to check it against (both transports, asyncssh and the docker SDK's, start here)."""
    try:
        spec = inventory.node(node)
    except KeyError:
        raise NodeError(node, "not in the inventory") from None
    if spec.ssh is None or spec.ssh.known_hosts is None:
        raise NodeError(node, "no [nodes.ssh] known_hosts in the inventory; add the node's pinned host key")
    return spec, spec.ssh
