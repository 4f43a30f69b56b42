"""Plans: ordered actions that can be replayed on a snapshot and checked.

A plan is the planner's only output. Replaying it (`Plan.replay`) applies each action to the
snapshot in order and checks every constraint after every step, so an executor, a dry run and a
test all agree on what the plan means.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .capacity import node_capacity, within
from .errors import PlanError
from .model import ClusterMetrics, ClusterSnapshot, Inventory


class ActionKind(StrEnum):
    POWER_ON = "power_on"
    MIGRATE = "migrate"
    POWER_OFF = "power_off"


@dataclass(frozen=True)
class Action:
    """One step. Migrations carry container/source/target; power actions carry node."""

    kind: ActionKind
    container: str | None = None
    source: str | None = None
    target: str | None = None
    node: str | None = None

    @classmethod
    def migrate(cls, container: str, source: str, target: str) -> Action:
        return cls(ActionKind.MIGRATE, container=container, source=source, target=target)

    @classmethod
    def power_on(cls, node: str) -> Action:
        return cls(ActionKind.POWER_ON, node=node)

    @classmethod
    def power_off(cls, node: str) -> Action:
        return cls(ActionKind.POWER_OFF, node=node)

    def to_json(self) -> dict[str, Any]:
        if self.kind is ActionKind.MIGRATE:
            return {
                "kind": self.kind.value,
                "container": self.container,
                "source": self.source,
                "target": self.target,
            }
        return {"kind": self.kind.value, "node": self.node}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Action:
        try:
            kind = ActionKind(d["kind"])
        except (KeyError, ValueError):
            raise PlanError(
                f"action.kind: must be one of {[k.value for k in ActionKind]}, got {d.get('kind')!r}"
            ) from None
        if kind is ActionKind.MIGRATE:
            for key in ("container", "source", "target"):
                if not isinstance(d.get(key), str):
                    raise PlanError(f"action.{key}: a migrate action needs a string {key}")
            return cls.migrate(d["container"], d["source"], d["target"])
        if not isinstance(d.get("node"), str):
            raise PlanError(f"action.node: a {kind.value} action needs a string node")
        return cls(kind, node=d["node"])

    def describe(self) -> str:
        if self.kind is ActionKind.MIGRATE:
            return f"migrate {self.container}: {self.source} -> {self.target}"
        return f"{self.kind.value} {self.node}"


@dataclass(frozen=True)
class SolverReport:
    status: str
    seconds: float  # wall clock: a measurement, the one figure that differs between runs
    objective: float
    bound: float
    #: deterministic work done (CP-SAT's deterministic seconds), the same on every run
    work: float = 0.0
    #: the wall-clock safety net stopped the solve before its work limit: another run may differ
    stopped_by_clock: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "seconds": round(self.seconds, 4),
            "objective": round(self.objective, 4),
            "bound": round(self.bound, 4),
            "work": round(self.work, 4),
            "stopped_by_clock": self.stopped_by_clock,
        }


@dataclass(frozen=True)
class Plan:
    policy: str
    actions: tuple[Action, ...]
    before: ClusterMetrics
    after: ClusterMetrics
    solver: SolverReport
    dry_run: bool = True
    based_on_version: int = 0
    plan_id: int | None = None
    notes: tuple[str, ...] = field(default=())
    #: container -> one line of why it moves or stays (`planner.explain`)
    explanations: Mapping[str, str] = field(default_factory=dict)
    #: the planner settings it was made with, by inventory key (`PlannerSettings.by_key`)
    settings: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "dry_run": self.dry_run,
            "policy": self.policy,
            "actions": [a.to_json() for a in self.actions],
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "solver": self.solver.to_json(),
        }

    @property
    def migrations(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.kind is ActionKind.MIGRATE)


class _Replay:
    """Plan state while actions are applied one by one: placement, power and per-node loads are
    updated incrementally, so checking a 10,000-action plan stays linear."""

    def __init__(self, inventory: Inventory, snapshot: ClusterSnapshot) -> None:
        self.inventory = inventory
        self.snapshot = snapshot
        self.placement = snapshot.placement()
        self.by_name = {c.name: c for c in snapshot.containers}
        self.powered = set(snapshot.powered())
        self.cpu: dict[str, float] = defaultdict(float)
        self.mem: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)
        for c in snapshot.containers:
            self.cpu[c.node] += c.cpu
            self.mem[c.node] += c.memory_mb
            self.count[c.node] += 1
        self.moves: dict[str, str] = {}
        self.power: dict[str, bool] = {}

    def apply(self, action: Action) -> None:
        """Raise PlanError when the action's precondition does not hold."""
        if action.kind is ActionKind.MIGRATE:
            self._migrate(action)
            return
        assert action.node
        if action.node not in self.inventory.nodes_by_name:
            raise PlanError(f"{action.describe()}: node is not in the inventory")
        if action.kind is ActionKind.POWER_ON:
            if action.node in self.powered:
                raise PlanError(f"{action.describe()}: node is already powered on")
            self.powered.add(action.node)
            self.power[action.node] = True
            return
        if not self.inventory.node(action.node).can_power_off:
            raise PlanError(f"{action.describe()}: node is a head node or not power-managed")
        if action.node not in self.powered:
            raise PlanError(f"{action.describe()}: node is already off")
        if self.count[action.node]:
            raise PlanError(f"{action.describe()}: node still hosts containers")
        self.powered.discard(action.node)
        self.power[action.node] = False

    def _migrate(self, action: Action) -> None:
        assert action.container and action.source and action.target
        c = self.by_name.get(action.container)
        if c is None:
            raise PlanError(f"{action.describe()}: no such container in the snapshot")
        where = self.placement[c.name]
        if where != action.source:
            raise PlanError(f"{action.describe()}: container is on {where}, not {action.source}")
        if action.target == action.source:
            raise PlanError(f"{action.describe()}: source and target are the same node")
        if action.target not in self.inventory.nodes_by_name:
            raise PlanError(f"{action.describe()}: target is not in the inventory")
        if action.target not in self.powered:
            raise PlanError(f"{action.describe()}: target is powered off (power it on first)")
        self.placement[c.name] = action.target
        self.moves[c.name] = action.target
        for node, sign in ((action.source, -1), (action.target, 1)):
            self.cpu[node] += sign * c.cpu
            self.mem[node] += sign * c.memory_mb
            self.count[node] += sign

    def check_node(self, name: str, cap: float | None) -> None:
        cpu_cap, mem_cap = node_capacity(self.inventory.node(name), self.inventory.cluster, cap)
        if not within(self.cpu[name], cpu_cap):
            raise PlanError(f"node {name}: CPU load {self.cpu[name]:.2f} exceeds cap {cpu_cap:.2f} cores")
        if not within(self.mem[name], mem_cap):
            raise PlanError(f"node {name}: memory {self.mem[name]:.0f} MB exceeds cap {mem_cap:.0f} MB")

    def result(self) -> ClusterSnapshot:
        return self.snapshot.with_changes(moves=self.moves, power=self.power)


def apply_action(
    inventory: Inventory, snapshot: ClusterSnapshot, action: Action
) -> ClusterSnapshot:
    """Apply one action to a snapshot, raising PlanError when its precondition does not hold."""
    state = _Replay(inventory, snapshot)
    state.apply(action)
    return state.result()


def check_capacity(
    inventory: Inventory,
    snapshot: ClusterSnapshot,
    only: Iterable[str] | None = None,
    cap: float | None = None,
) -> None:
    """Raise PlanError if any (or any of `only`) node is over its CPU cap or memory cap.

    `cap` overrides the inventory's CPU cap (a problem's own cap, or a baseline's, e.g. 0.95).
    """
    state = _Replay(inventory, snapshot)
    hosting = {c.node for c in snapshot.containers}
    for name in hosting if only is None else hosting & set(only):
        state.check_node(name, cap)


def replay(
    inventory: Inventory,
    snapshot: ClusterSnapshot,
    actions: Iterable[Action],
    cap: float | None = None,
) -> ClusterSnapshot:
    """Replay actions in order; a migration may not push its target over the caps.

    Sources are allowed to be over the cap before they are drained (that is why we move), but no
    action may make a node worse than the cap it ends up within. `cap` overrides the inventory's
    CPU cap, as in `check_capacity`.
    """
    state = _Replay(inventory, snapshot)
    for action in actions:
        state.apply(action)
        if action.kind is ActionKind.MIGRATE:
            assert action.target
            state.check_node(action.target, cap)
    for name, node in state.placement.items():
        if node not in state.powered:
            raise PlanError(f"container {name}: left on powered-off node {node}")
    return state.result()
