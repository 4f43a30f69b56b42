"""The domain model: plain, frozen, serialisable values that flow through the pipeline.

Inventory (what the operator declared) and ClusterSnapshot (what was observed) are kept apart:
the planner reads both and writes neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict

from . import inputs
from .budgets import Budgets, Window
from .guard import QosSettings
from .inputs import Bounds
from .settings import CHECKED, MigrationSettings, PlannerSettings, RemoteSettings, within

#: energy sources that are readings (RAPL counters, the BMC's DCMI power); "model" is the power
#: curve at the measured load: an estimate, never shown as measured
MEASURED_SOURCES = frozenset({"rapl", "dcmi"})


class NodeRole(StrEnum):
    """A head node runs the controller and is never power-managed."""

    WORKER = "worker"
    HEAD = "head"


class ContainerClass(StrEnum):
    """ClavisMO's classes: devils are memory-intensive and hurt neighbours sharing a cache."""

    DEVIL = "devil"
    TURTLE = "turtle"


class QosClass(StrEnum):
    """Label `peakpack.qos`: latency-sensitive (the default) or best-effort, which the node's QoS
    guard restrains first (lowest CPU weight, CPU capped, stopped on memory pressure)."""

    LS = "ls"
    BE = "be"


class Clients(StrEnum):
    """What a container's clients see when it is live-migrated (docs/migration.md, "Addresses and
    open connections"): decided by its networks, observed on its node."""

    #: every address it has is on a network spanning the nodes' shared segment (macvlan, ipvlan
    #: L2): its addresses move with it and its open TCP connections are restored: a pause
    KEPT = "kept"
    #: it keeps its address on such a network, but another of its networks is node-local: its
    #: connections are closed and its clients reconnect to the same address
    SAME_ADDRESS = "reconnect"
    #: node-local networks only (published ports, bridges): it answers at the target node's
    #: address and its connections are closed; clients must find it there
    ELSEWHERE = "reconnect-elsewhere"
    #: no network (`--network none`): no client reaches it over TCP
    NONE = "none"

    def says(self, target: str) -> str:
        """The clause `peakpack plan` and its explanations give a move onto `target`."""
        return {Clients.KEPT: "its clients keep their connections (its address moves with it)",
                Clients.SAME_ADDRESS: "its clients must reconnect (to the same address)",
                Clients.ELSEWHERE: f"its clients must reconnect at {target}'s address",
                Clients.NONE: "it has no network clients"}[self]


LOAD_POINTS = tuple(i / 10 for i in range(11))


@dataclass(frozen=True)
class PowerCurve:
    """Watts at 0%, 10%, ..., 100% CPU load (SPECpower style); linear in between."""

    watts: tuple[float, ...]

    @classmethod
    def linear(cls, idle_w: float, max_w: float) -> PowerCurve:
        return cls(tuple(idle_w + (max_w - idle_w) * p for p in LOAD_POINTS))

    @property
    def idle_w(self) -> float:
        return self.watts[0]

    @property
    def max_w(self) -> float:
        return self.watts[-1]

    def at(self, util: float) -> float:
        """Power at a utilisation in [0, 1] (clamped), interpolated between the 11 points."""
        u = min(max(util, 0.0), 1.0) * 10
        i = min(int(u), 9)
        frac = u - i
        return self.watts[i] + (self.watts[i + 1] - self.watts[i]) * frac

    def peak_efficiency_util(self, lo: float = 0.1, hi: float = 1.0) -> float:
        """The load in [lo, hi] with the most work per watt (util / power), on the 11 points."""
        candidates = [p for p in LOAD_POINTS if lo - 1e-9 <= p <= hi + 1e-9] or [hi]
        return max(candidates, key=lambda p: (p / self.at(p), p))


@dataclass(frozen=True)
class SshConfig:
    user: str = "root"
    port: int = 22
    identity_file: Path | None = None
    known_hosts: Path | None = None


@dataclass(frozen=True)
class BmcConfig:
    address: str
    port: int = 623
    username: str = "admin"
    password_file: Path | None = None
    cipher_suite: int = 17


@dataclass(frozen=True)
class NodeSpec:
    """A node as declared in the inventory."""

    name: str
    address: str
    cpus: int
    memory_mb: int
    power: PowerCurve
    role: NodeRole = NodeRole.WORKER
    power_managed: bool = True
    ssh: SshConfig | None = None
    bmc: BmcConfig | None = None
    #: a CPU cap below the cluster's for this node this epoch (its latency-sensitive containers
    #: stalled: `decide/pressure.lowered_caps`); None: the cluster's. Only `capacity.node_cap` reads it
    cap: float | None = None

    @property
    def can_power_off(self) -> bool:
        return self.role is NodeRole.WORKER and self.power_managed


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    cap: float = 0.70
    memory_cap: float = 0.95
    epoch_seconds: int = 600
    #: `serve` reads the nodes' conntrack tables at least this often (0: at observations only): a
    #: flow closed with a FIN leaves the table ~120 s later, so longer gaps miss
    #: connection-per-request traffic (docs/traffic.md)
    traffic_read_seconds: int = 90


@dataclass(frozen=True)
class ReviewConfig:
    """Review then apply (inventory `[review]`): a stored plan may be applied this long after it
    was made; later the cluster has likely moved on and `peakpack apply` refuses it (EXPIRED)."""

    plan_ttl_seconds: float = 3600.0


@dataclass(frozen=True)
class WebConfig:
    """The web page (inventory `[web]`): approving or rejecting a plan there needs the token in
    `token_file`; without one the page is read-only. `token_for_reads`: the page itself needs the
    token too (HTTP basic auth, any user name). `hosts`: the names the page may be reached by,
    beside its listening address (the Host header is checked: no DNS rebinding)."""

    token_file: Path | None = None
    token_for_reads: bool = False
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoreConfig:
    """How long the store keeps what (inventory `[store]`, in days): raw demand and energy rows
    `raw_days`, then summed per hour for `hourly_days`; plans with their actions, migrations,
    power events, pinnings and approvals `history_days`. Each epoch the controller prunes at most
    `prune_rows` rows per table, so catching up never makes an epoch slow."""

    __pydantic_config__: ClassVar[ConfigDict] = CHECKED

    raw_days: Annotated[int, within(inputs.DAYS)] = 14
    hourly_days: Annotated[int, within(inputs.DAYS)] = 730
    history_days: Annotated[int, within(inputs.DAYS)] = 400
    prune_rows: Annotated[int, within(Bounds(100, inputs.COUNT.hi, integer=True))] = 20000

    def __post_init__(self) -> None:
        if self.hourly_days < self.raw_days:
            raise ValueError("hourly_days must be >= raw_days (hours are summed from the raw rows)")


@dataclass(frozen=True)
class Inventory:
    cluster: ClusterConfig
    nodes: tuple[NodeSpec, ...]
    source: Path | None = None
    #: `[planner]` (and `[power_policy]`): the planner's settings. The CPU and memory caps have
    #: one value: `cluster.cap`/`memory_cap`, where every capacity check reads them, and
    #: `planner.cap`/`memory_cap` always equal them (see __post_init__)
    planner: PlannerSettings = field(default_factory=PlannerSettings)
    #: (key, where its value came from: "default" or "inventory [planner].cap"), for `config show`
    planner_sources: tuple[tuple[str, str], ...] = ()
    web: WebConfig = field(default_factory=WebConfig)
    review: ReviewConfig = field(default_factory=ReviewConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    budgets: Budgets = field(default_factory=Budgets)  # [budgets] and [[windows]]: budgets.py
    windows: tuple[Window, ...] = ()
    migration: MigrationSettings = field(default_factory=MigrationSettings)  # [migration]
    remote: RemoteSettings = field(default_factory=RemoteSettings)  # [remote]: timeouts reaching nodes
    qos: QosSettings = field(default_factory=QosSettings)  # [qos]: the node guards' settings (qos.py)

    def __post_init__(self) -> None:
        """Settings left at the default caps take the cluster's; caps set on both must agree."""
        default = PlannerSettings()
        p, c = self.planner, self.cluster
        if p.cap == default.cap and p.memory_cap == default.memory_cap:
            object.__setattr__(self, "planner", replace(p, cap=c.cap, memory_cap=c.memory_cap))
        elif (p.cap, p.memory_cap) != (c.cap, c.memory_cap):
            raise ValueError(f"planner caps {p.cap}/{p.memory_cap} differ from the cluster's "
                             f"{c.cap}/{c.memory_cap}; set them in one place")

    def node(self, name: str) -> NodeSpec:
        return self.nodes_by_name[name]

    @cached_property
    def nodes_by_name(self) -> dict[str, NodeSpec]:
        """Computed once: plans over thousands of nodes look nodes up per action."""
        return {n.name: n for n in self.nodes}

    @cached_property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)


@dataclass(frozen=True)
class NodeState:
    """Observed state of a node."""

    name: str
    powered: bool = True


@dataclass(frozen=True)
class Container:
    """Observed container: `cpu` is cores in use, `node` where it runs now. `immovable` says why
    it cannot be live-migrated (None: it can); `ports` are the host ports it publishes
    ('8080/tcp'), which no other container on its node may publish. `declared`: `cpu` is what its
    `peakpack.cpu` label declares, the fallback until its measured history gives a forecast.
    `refused_on`: (node, reason) for nodes migration preflight would refuse as its target (a
    volume of its name there, another network of one of its names, missing CPU flags or shared
    paths); observed, so not part of a snapshot file. `qos`: its `peakpack.qos` class;
    `qos_problem` says what is wrong with that label (the container then counts as
    latency-sensitive, and `peakpack plan` lists it). `clients`: what its clients see when it
    moves (a snapshot file that does not say: they must reconnect elsewhere)."""

    name: str
    node: str
    cpu: float
    memory_mb: float
    image: str = ""
    cls: ContainerClass = ContainerClass.TURTLE
    group: str | None = None
    immovable: str | None = None
    ports: tuple[str, ...] = ()
    declared: bool = False
    refused_on: tuple[tuple[str, str], ...] = ()
    qos: QosClass = QosClass.LS
    qos_problem: str | None = None
    clients: Clients = Clients.ELSEWHERE

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "node": self.node,
            "cpu": self.cpu,
            "memory_mb": self.memory_mb,
            "image": self.image,
            "class": self.cls.value,
        }
        if self.group is not None:
            d["group"] = self.group
        if self.immovable is not None:
            d["immovable"] = self.immovable
        if self.ports:
            d["ports"] = list(self.ports)
        if self.declared:
            d["declared"] = True
        if self.qos is not QosClass.LS:
            d["qos"] = self.qos.value
        if self.clients is not Clients.ELSEWHERE:
            d["clients"] = self.clients.value
        return d


def _now() -> datetime:
    return datetime.now(UTC)


def runs_twice(container: str, first: str, second: str) -> str:
    """How the hold of two nodes that both run a container of one name begins; the observer adds
    who started the second copy and what to do (`migrate.spec.why_twice`)."""
    return f"container {container} runs on both {first} and {second}"


def is_twice(reason: str, container: str) -> bool:
    """Whether a hold's reason is `runs_twice` of this container (an unsettled migration of it
    explains the second copy better: `decide.solve.hold_unsettled`)."""
    return reason.startswith(f"container {container} runs on both ")


@dataclass(frozen=True)
class ClusterSnapshot:
    """What the cluster looked like at one instant; the planner's only view of the world.

    `held` names nodes the plan must leave exactly as they are, with the reason: a node that could
    not be observed, or both nodes of an unsettled migration. No container moves onto or off a held
    node and it is neither switched off nor on."""

    nodes: tuple[NodeState, ...]
    containers: tuple[Container, ...]
    version: int = 0
    taken_at: datetime = field(default_factory=_now)
    held: Mapping[str, str] = field(default_factory=dict)

    def node_state(self, name: str) -> NodeState:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def powered(self) -> frozenset[str]:
        return frozenset(n.name for n in self.nodes if n.powered)

    def placement(self) -> dict[str, str]:
        return {c.name: c.node for c in self.containers}

    def container(self, name: str) -> Container:
        for c in self.containers:
            if c.name == name:
                return c
        raise KeyError(name)

    def with_changes(
        self,
        *,
        moves: Mapping[str, str] | None = None,
        power: Mapping[str, bool] | None = None,
    ) -> ClusterSnapshot:
        """A new snapshot with containers moved and nodes switched; self is unchanged."""
        moves = moves or {}
        power = power or {}
        nodes = tuple(replace(n, powered=power.get(n.name, n.powered)) for n in self.nodes)
        containers = tuple(
            replace(c, node=moves[c.name]) if c.name in moves else c for c in self.containers
        )
        return replace(self, nodes=nodes, containers=containers, version=self.version + 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "taken_at": self.taken_at.isoformat(),
            "nodes": [{"name": n.name, "powered": n.powered} for n in self.nodes],
            "containers": [c.to_json() for c in self.containers],
            **({"held": dict(self.held)} if self.held else {}),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


@dataclass(frozen=True)
class NodeLoad:
    """Per-node totals of a placement."""

    cpu: float = 0.0
    memory_mb: float = 0.0
    containers: int = 0


def node_loads(
    containers: Iterable[Container], placement: Mapping[str, str] | None = None
) -> dict[str, NodeLoad]:
    """Sum CPU and memory per node, optionally under a different placement."""
    loads: dict[str, NodeLoad] = {}
    for c in containers:
        node = placement[c.name] if placement is not None else c.node
        cur = loads.get(node, NodeLoad())
        loads[node] = NodeLoad(cur.cpu + c.cpu, cur.memory_mb + c.memory_mb, cur.containers + 1)
    return loads


@dataclass(frozen=True)
class ClusterMetrics:
    """The before/after summary printed with a plan."""

    nodes_on: int
    power_w: float
    max_cpu_util: float

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes_on": self.nodes_on,
            "power_w": round(self.power_w, 3),
            "max_cpu_util": round(self.max_cpu_util, 6),
        }


def cluster_metrics(inventory: Inventory, snapshot: ClusterSnapshot) -> ClusterMetrics:
    """Nodes on, modelled power (each powered node's curve at its load) and busiest node's util."""
    loads = node_loads(snapshot.containers)
    powered = snapshot.powered()
    power = 0.0
    max_util = 0.0
    for spec in inventory.nodes:
        if spec.name not in powered:
            continue
        util = loads.get(spec.name, NodeLoad()).cpu / spec.cpus
        power += spec.power.at(util)
        max_util = max(max_util, util)
    return ClusterMetrics(len(powered), power, max_util)


__all__ = [
    "BmcConfig",
    "ClusterConfig",
    "ClusterMetrics",
    "ClusterSnapshot",
    "Container",
    "ContainerClass",
    "Inventory",
    "NodeLoad",
    "NodeRole",
    "NodeSpec",
    "NodeState",
    "PowerCurve",
    "QosClass",
    "SshConfig",
    "WebConfig",
    "cluster_metrics",
    "node_loads",
]
