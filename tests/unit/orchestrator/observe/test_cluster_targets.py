"""The observer tells the planner which nodes preflight would refuse each movable container, by
the rule preflight applies (`spec.why_not_onto`), from what it reads on every node; shared paths
are looked for on the other nodes only when some container has them. The nodes are a fake SSH
pool answering the observer's three reads."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from peakpack.db.store import Store
from peakpack.migrate import spec
from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.observe.cluster import (
    INSPECT_ALL,
    SWITCHED_OFF_LOOKBACK,
    USAGE_SCRIPT,
    observe_nodes,
    switched_off,
)
from peakpack.orchestrator.remote import CommandResult

APPNET = {"Name": "appnet", "Driver": "bridge", "IPAM": {"Config": [{"Subnet": "172.30.0.0/24"}]}}


def container(name: str, *, volume: str | None = None, shared: str | None = None) -> dict[str, Any]:
    mounts = [{"Type": "volume", "Name": volume, "Destination": "/data", "Driver": "local"}] if volume else []
    if shared:
        mounts.append({"Type": "bind", "Source": shared, "Destination": "/srv"})
    return {"Id": name * 12, "Name": f"/{name}", "State": {"Running": True}, "Mounts": mounts,
            "Config": {"Image": "img", "Labels": {spec.SHARED_PATHS_LABEL: "true"} if shared else {}},
            "HostConfig": {"NetworkMode": "appnet"}, "NetworkSettings": {"Networks": {"appnet": {}}},
            "GraphDriver": {"Name": "overlay2"}}


class Nodes:
    """Answers each node's reads: its containers, no usage, and its facts (paths that exist)."""

    def __init__(self, containers: dict[str, list[dict[str, Any]]], volumes: dict[str, list[str]],
                 networks: dict[str, dict[str, Any]], paths: dict[str, set[str]], down: Sequence[str] = ()) -> None:
        self.containers, self.volumes, self.networks, self.paths, self.down = containers, volumes, networks, paths, down
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    async def run(self, node: str, argv: Sequence[str], **_: Any) -> CommandResult:
        if node in self.down:
            raise NodeError(node, "connection refused")
        if list(argv) == ["sh", "-c", INSPECT_ALL]:
            return CommandResult(0, json.dumps(self.containers.get(node, [])), "")
        if list(argv) == ["sh", "-c", USAGE_SCRIPT]:
            return CommandResult(0, "", "")
        asked = tuple(argv[4:])
        self.asked.append((node, asked))
        lines = ["flags : fpu sse2", *(f"volume {v}" for v in self.volumes.get(node, [])),
                 *(f"path {p}" for p in asked if p in self.paths.get(node, set())), "networks",
                 json.dumps([self.networks.get(node, APPNET)])]
        return CommandResult(0, "\n".join(lines), "")

    def observe(self, nodes: Sequence[str]) -> dict[str, tuple[tuple[str, str], ...]]:
        views = asyncio.run(observe_nodes(self, nodes, lambda _: None))  # type: ignore[arg-type]
        return {c.name: c.refused_on for v in views for c in v.containers}


def test_each_container_learns_which_nodes_preflight_would_refuse() -> None:
    nodes = Nodes({"node-1": [container("shop", volume="data")], "node-2": [container("other")]},
                  volumes={"node-1": ["data"], "node-3": ["data"]},
                  networks={"node-2": {**APPNET, "IPAM": {"Config": [{"Subnet": "10.1.0.0/16"}]}}}, paths={})
    refused = nodes.observe(["node-1", "node-2", "node-3"])
    assert [t for t, _ in refused["shop"]] == ["node-2", "node-3"]
    assert "network appnet on node-2 has subnet 10.1.0.0/16" in refused["shop"][0][1]
    assert "volume data already exists on node-3" in refused["shop"][1][1]
    assert [t for t, _ in refused["other"]] == ["node-1", "node-3"]  # its appnet is the odd one out
    assert all(not paths for _, paths in nodes.asked)  # no shared paths: one read per node


def test_shared_paths_are_looked_for_on_every_node_and_a_silent_node_is_refused() -> None:
    nodes = Nodes({"node-1": [container("shop", shared="/srv/shop")]}, volumes={}, networks={},
                  paths={"node-1": {"/srv/shop"}, "node-2": {"/srv/shop"}})
    assert [t for t, _ in nodes.observe(["node-1", "node-2", "node-3"])["shop"]] == ["node-3"]
    assert {n for n, paths in nodes.asked if paths == ("/srv/shop",)} == {"node-1", "node-2", "node-3"}


def test_an_unobserved_node_is_not_judged_here() -> None:
    # a node that does not answer is held (planning keeps everything off it), not refused by facts
    nodes = Nodes({"node-1": [container("shop", volume="data")]}, volumes={"node-1": ["data"]}, networks={},
                  paths={}, down=("node-2",))
    assert nodes.observe(["node-1", "node-2"]) == {"shop": ()}


def test_a_node_believed_off_is_asked_to_its_bmc_first_and_not_over_ssh_when_off() -> None:
    """Its BMC says off: no SSH at all (every attempt would time out); says on, or cannot tell: read
    over SSH as any node; not believed off: the BMC is asked only when SSH fails."""
    class Pool(Nodes):
        def __init__(self) -> None:
            super().__init__({"node-1": [container("shop")], "node-2": [container("db")]}, {}, {}, {})
            self.ran: list[str] = []
            self.forgot: list[str] = []

        async def run(self, node: str, argv: Sequence[str], **kw: Any) -> CommandResult:
            self.ran.append(node)
            return await super().run(node, argv, **kw)

        def forget(self, node: str) -> None:
            self.forgot.append(node)

    bmc = {"node-1": False, "node-2": True, "node-3": None}
    asked: list[str] = []

    def power(node: str) -> bool | None:
        asked.append(node)
        return bmc[node]

    pool = Pool()
    views = asyncio.run(observe_nodes(pool, ["node-1", "node-2", "node-3"], power,  # type: ignore[arg-type]
                                      believed_off=frozenset({"node-1", "node-2", "node-3"})))
    state = {v.state.name: (v.state.powered, [c.name for c in v.containers]) for v in views}
    assert state == {"node-1": (False, []), "node-2": (True, ["db"]), "node-3": (True, [])}
    assert "node-1" not in pool.ran and pool.forgot == ["node-1"] and sorted(asked) == ["node-1", "node-2", "node-3"]
    asked.clear()
    asyncio.run(observe_nodes(pool, ["node-1", "node-2"], power))  # type: ignore[arg-type]
    assert asked == [] and "node-1" in pool.ran


def test_nodes_switched_off_are_those_whose_last_successful_switch_was_off(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        for node, action, state in [("node-1", "power_off", "SUCCEEDED"), ("node-2", "power_off", "SUCCEEDED"),
                                    ("node-2", "power_on", "SUCCEEDED"), ("node-3", "power_off", "FAILED")]:
            store.power.finish(store.power.begin(node, action), state)
        now = datetime.now(UTC)
        assert switched_off(store, now) == {"node-1"}
        assert switched_off(store, now + SWITCHED_OFF_LOOKBACK + timedelta(minutes=1)) == set()
