"""Plans: ordered actions that can be replayed on a snapshot and checked.

A plan is the planner's only output. Replaying it (`Plan.replay`) applies each action to the
snapshot in order and checks every constraint after every step, so an executor, a dry run and a
test all agree on what the plan means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Iterable

from .errors import PlanError
from .model import ClusterMetrics, ClusterSnapshot, Inventory, node_loads


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
    def migrate(cls, container: str, source: str, target: str) -> "Action":
        return cls(ActionKind.MIGRATE, container=container, source=source, target=target)

    @classmethod
    def power_on(cls, node: str) -> "Action":
        return cls(ActionKind.POWER_ON, node=node)

    @classmethod
    def power_off(cls, node: str) -> "Action":
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
    def from_json(cls, d: dict[str, Any]) -> "Action":
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
    seconds: float
    objective: float
    bound: float

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "seconds": round(self.seconds, 4),
            "objective": round(self.objective, 4),
            "bound": round(self.bound, 4),
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


def apply_action(
    inventory: Inventory, snapshot: ClusterSnapshot, action: Action
) -> ClusterSnapshot:
    """Apply one action to a snapshot, raising PlanError when its precondition does not hold."""
    powered = snapshot.powered()
    if action.kind is ActionKind.MIGRATE:
        assert action.container and action.source and action.target
        try:
            c = snapshot.container(action.container)
        except KeyError:
            raise PlanError(f"{action.describe()}: no such container in the snapshot") from None
        if c.node != action.source:
            raise PlanError(f"{action.describe()}: container is on {c.node}, not {action.source}")
        if action.target == action.source:
            raise PlanError(f"{action.describe()}: source and target are the same node")
        if action.target not in inventory.node_names:
            raise PlanError(f"{action.describe()}: target is not in the inventory")
        if action.target not in powered:
            raise PlanError(f"{action.describe()}: target is powered off (power it on first)")
        return snapshot.with_changes(moves={action.container: action.target})
    assert action.node
    if action.node not in inventory.node_names:
        raise PlanError(f"{action.describe()}: node is not in the inventory")
    if action.kind is ActionKind.POWER_ON:
        if action.node in powered:
            raise PlanError(f"{action.describe()}: node is already powered on")
        return snapshot.with_changes(power={action.node: True})
    spec = inventory.node(action.node)
    if not spec.can_power_off:
        raise PlanError(f"{action.describe()}: node is a head node or not power-managed")
    if action.node not in powered:
        raise PlanError(f"{action.describe()}: node is already off")
    if any(c.node == action.node for c in snapshot.containers):
        raise PlanError(f"{action.describe()}: node still hosts containers")
    return snapshot.with_changes(power={action.node: False})


def check_capacity(
    inventory: Inventory,
    snapshot: ClusterSnapshot,
    only: Iterable[str] | None = None,
    cap: float | None = None,
) -> None:
    """Raise PlanError if any (or any of `only`) node is over its CPU cap or memory cap.

    `cap` overrides the inventory's CPU cap (a problem's own cap, or a baseline's, e.g. 0.95).
    """
    cpu_frac = inventory.cluster.cap if cap is None else cap
    loads = node_loads(snapshot.containers)
    names = set(only) if only is not None else set(loads)
    for spec in inventory.nodes:
        if spec.name not in names or spec.name not in loads:
            continue
        load = loads[spec.name]
        cpu_cap = cpu_frac * spec.cpus
        mem_cap = inventory.cluster.memory_cap * spec.memory_mb
        if load.cpu > cpu_cap + 1e-6:
            raise PlanError(
                f"node {spec.name}: CPU load {load.cpu:.2f} exceeds cap {cpu_cap:.2f} cores"
            )
        if load.memory_mb > mem_cap + 1e-6:
            raise PlanError(
                f"node {spec.name}: memory {load.memory_mb:.0f} MB exceeds cap {mem_cap:.0f} MB"
            )


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
    state = snapshot
    for action in actions:
        state = apply_action(inventory, state, action)
        if action.kind is ActionKind.MIGRATE:
            assert action.target
            check_capacity(inventory, state, only=[action.target], cap=cap)
    powered = state.powered()
    for c in state.containers:
        if c.node not in powered:
            raise PlanError(f"container {c.name}: left on powered-off node {c.node}")
    return state
