"""Where a container may go: each placement rule once, with its named reason.

As kube-scheduler gives each filter plugin one reason code, each rule here is one `Refusal` and
says, for a container, the nodes it keeps it off and why in one line. The planner's eligibility
(`eligibility`), the review of a stored plan (`decide/review.py`), `plan --explain` and
migration preflight (`migrate/spec.ports_in_use`, the host-port rule on the live target) ask
these rules, so a rule cannot say one thing to the planner and another to the executor.

    HELD        the container's node, or the target, is held (not observed, a name running on
                two nodes, an unsettled migration): the plan leaves a held node as it is
    IMMOVABLE   the container cannot be live-migrated at all (`Container.immovable`)
    PREFLIGHT   migration preflight refuses that target (`Container.refused_on`: networks,
                shared paths, volumes, addresses, as the observer read the nodes' facts)
    HOST_PORT   another container already publishes one of its host ports on the target

A container may always stay where it is; the rules only keep it off other nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from .model import ClusterSnapshot, Container, Inventory


class Refusal(StrEnum):
    """The reason a rule keeps a container off a node; one member per rule, in the order the
    rules are asked (the first that refuses is the one named)."""

    HELD = "held"
    IMMOVABLE = "immovable"
    PREFLIGHT = "preflight"
    HOST_PORT = "host-port"


@dataclass(frozen=True)
class Refused:
    """One rule keeping a container off `node`: which, and the fact in one line."""

    rule: Refusal
    node: str
    why: str


@dataclass(frozen=True)
class Facts:
    """What the rules read, once per snapshot: the nodes, those held and why, and which nodes
    each host port is published on."""

    nodes: frozenset[str]
    held: Mapping[str, str]
    published: Mapping[str, Collection[str]]

    @classmethod
    def of(cls, inventory: Inventory, snapshot: ClusterSnapshot) -> Facts:
        published: dict[str, set[str]] = defaultdict(set)
        for c in snapshot.containers:
            for port in c.ports:
                published[port].add(c.node)
        return cls(frozenset(inventory.node_names), snapshot.held, dict(published))


def port_clashes(ports: Iterable[str], taken: Collection[str]) -> list[str]:
    """The host-port rule itself: those of `ports` ('PORT/PROTO') already published on a node
    (`taken`); a host port is published by one container per node."""
    return [p for p in ports if p in taken]


def refused_nodes(rule: Refusal, c: Container, facts: Facts) -> Collection[str]:
    """The nodes `rule` keeps `c` off (its own node may be listed: it may stay all the same)."""
    if rule is Refusal.HELD:
        return facts.nodes if c.node in facts.held else facts.held.keys()
    if rule is Refusal.IMMOVABLE:
        return facts.nodes if c.immovable is not None else ()
    if rule is Refusal.PREFLIGHT:
        return {n for n, _ in c.refused_on}
    return {n for p in c.ports for n in facts.published.get(p, ())}


def why(rule: Refusal, c: Container, node: str, facts: Facts) -> str:
    """The one-line fact behind `rule` keeping `c` off `node` (which it does)."""
    if rule is Refusal.HELD:
        held = c.node if c.node in facts.held else node
        return f"node {held} is held: {facts.held[held]}"
    if rule is Refusal.IMMOVABLE:
        return f"it cannot be live-migrated: {c.immovable}"
    if rule is Refusal.PREFLIGHT:
        return f"node {node} refuses it: {dict(c.refused_on)[node]}"
    taken = {p for p, nodes in facts.published.items() if node in nodes}
    return f"node {node} already publishes its port {', '.join(port_clashes(c.ports, taken))}"


def refusal(c: Container, node: str, facts: Facts) -> Refused | None:
    """The first rule that keeps `c` off `node` (None: it may go there, or it is there)."""
    if node == c.node:
        return None
    for rule in Refusal:
        if node in refused_nodes(rule, c, facts):
            return Refused(rule, node, why(rule, c, node, facts))
    return None


def eligibility(inventory: Inventory, snapshot: ClusterSnapshot) -> dict[str, frozenset[str]]:
    """Where each container may run, for those the rules restrict: every node no rule keeps it
    off, and its own."""
    facts = Facts.of(inventory, snapshot)
    result: dict[str, frozenset[str]] = {}
    for c in snapshot.containers:
        allowed = facts.nodes.difference(*(refused_nodes(rule, c, facts) for rule in Refusal)) | {c.node}
        if allowed != facts.nodes:
            result[c.name] = allowed
    return result


def movers_port_clashes(snapshot: ClusterSnapshot, assignment: Mapping[str, str]) -> dict[str, str]:
    """The host-port rule between the moves of one placement: containers it puts on a node where
    another container (staying, or moved there first by name) publishes one of their ports ->
    that node. Containers that stay keep their ports, so the mover yields."""
    taken: dict[str, set[str]] = defaultdict(set)  # node -> host ports published there so far
    clashes: dict[str, str] = {}
    for c in sorted(snapshot.containers, key=lambda c: (assignment[c.name] != c.node, c.name)):
        node = assignment[c.name]
        if port_clashes(c.ports, taken[node]):
            clashes[c.name] = node
        taken[node].update(c.ports)
    return clashes
