"""Review then apply: does a stored plan still hold on the cluster as it is now?

A plan is made on one snapshot and applied, maybe an hour later, on another. Before `apply` runs
it, every action is replayed in order on a fresh snapshot (`plan.replay`, so the capacity rule and
every precondition are the ones the planner was held to): the container is still on its source,
the target is up and the cap still holds there and does not refuse the container (`refused_on`,
the preflight rule the observer applied), a node to switch off is empty by then. An action
whose precondition fails is SKIPPED and the replay carries on without it, so an action that only
made sense after it (a migration onto a node whose power-on was skipped, the power-off of a node
it was to empty) fails in turn, and says which skip it followed. Pure: data in, data out.

Also here: the inventory digest that ties a plan to the inventory it was made for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..domain.errors import PlanError
from ..domain.model import ClusterSnapshot, Inventory
from ..domain.placement import Facts, refusal
from ..domain.plan import Action, ActionKind, replay


def inventory_digest(inventory: Inventory) -> str:
    """sha256 of the inventory's canonical form (every declared value, keys sorted; not the
    file's path or layout): a plan applies only to the cluster it was made for."""
    data = asdict(inventory)
    for derived in ("source", "planner_sources"):  # where it was read from, not what it declares
        data.pop(derived, None)
    canonical = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Check:
    """One action of the plan against the fresh snapshot: `reason` says why it cannot run
    (None: it can)."""

    index: int
    action: Action
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "action": self.action.describe(), "ok": self.ok, "reason": self.reason}


@dataclass(frozen=True)
class Review:
    checks: tuple[Check, ...]

    @property
    def drifted(self) -> bool:
        """Some action no longer holds: apply refuses, or runs the rest with --partial."""
        return any(not c.ok for c in self.checks)

    @property
    def skipped(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def summary(self) -> str:
        """One line naming every action that fails and why."""
        return "; ".join(f"#{c.index + 1} {c.action.describe()}: {c.reason}" for c in self.skipped)


def _nodes(action: Action) -> set[str]:
    return {n for n in (action.source, action.target, action.node) if n}


def review_plan(inventory: Inventory, fresh: ClusterSnapshot, actions: Sequence[Action],
                quarantined: Mapping[str, str] | None = None) -> Review:
    """Replay `actions` in order on `fresh`, skipping each whose precondition fails there; a
    wake of a node quarantined since the plan was made (`quarantined`: node -> why) fails too."""
    quarantined = quarantined or {}
    state = fresh
    facts = Facts.of(inventory, fresh)  # its host ports follow the moves that pass
    published = {port: set(nodes) for port, nodes in facts.published.items()}
    facts = replace(facts, published=published)
    checks: list[Check] = []
    skipped: list[tuple[int, Action]] = []
    for i, action in enumerate(actions):
        try:
            held = sorted(n for n in _nodes(action) if n in fresh.held)
            if held:
                raise PlanError(f"node {held[0]} is held: {fresh.held[held[0]]}")
            if action.kind is ActionKind.POWER_ON and action.node is not None and action.node in quarantined:
                raise PlanError(f"node {action.node} is quarantined ({quarantined[action.node]}); "
                                f"`peakpack power clear {action.node}` once fixed")
            moved = None
            if action.kind is ActionKind.MIGRATE and action.target is not None:
                moved = next((c for c in state.containers if c.name == action.container), None)
                refused = None if moved is None else refusal(moved, action.target, facts)
                if refused is not None:
                    raise PlanError(f"{refused.why} ({refused.rule.value})")
            state = replay(inventory, state, [action])
            if moved is not None:  # its host ports are published on the target from now on
                for port in moved.ports:
                    published[port].discard(moved.node)
                    published[port].add(str(action.target))
        except PlanError as exc:
            reason = str(exc).removeprefix(f"{action.describe()}: ")
            after = [j for j, a in skipped if _nodes(a) & _nodes(action)
                     or (a.container is not None and a.container == action.container)]
            if after:
                reason += f" (after skipping #{after[-1] + 1})"
            checks.append(Check(i, action, reason))
            skipped.append((i, action))
            continue
        checks.append(Check(i, action))
    return Review(tuple(checks))


__all__ = ["Check", "Review", "inventory_digest", "review_plan"]
