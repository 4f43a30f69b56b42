"""Runs a journaled plan against the nodes: power_on first (a target must be up before work moves
onto it), then the migrations (bounded parallelism, in migrate/), then pinning on every node that
gained or lost work, then power_off of the nodes that were emptied.

Each action is re-checked against what actually happened before it runs: a power_off whose node
still hosts a container (a migration was rolled back) is SKIPPED, and so is a migration whose
target did not wake. The journal entry of every action is written before and after it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from ..domain.errors import PeakpackError
from ..domain.plan import Action, ActionKind, Plan
from ..domain.ports import Journal, NodeOps
from ..domain.states import ActionState


@dataclass
class ExecutionReport:
    plan_id: int
    states: dict[int, ActionState] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def count(self, state: ActionState) -> int:
        return sum(1 for s in self.states.values() if s is state)


class PlanExecutor:
    """`stopped`: containers a node's QoS guard stopped -> their node (`remembered.stopped_by_guards`),
    asked just before a power-off: a node still holding one is not switched off."""

    def __init__(self, store: Journal, ops: NodeOps, log: Callable[[str], None] = print,
                 stop_requested: Callable[[], bool] = lambda: False,
                 stopped: Callable[[], Mapping[str, str]] = dict) -> None:
        self.store = store
        self.ops = ops
        self.log = log
        self.stop_requested = stop_requested
        self.stopped = stopped

    def _run(self, report: ExecutionReport, action_id: int, action: Action, fn: Callable[[], None]) -> bool:
        self.store.plans.set_action_state(action_id, ActionState.ONGOING)
        try:
            fn()
        except PeakpackError as exc:
            self.store.plans.set_action_state(action_id, ActionState.FAILED, str(exc))
            report.states[action_id] = ActionState.FAILED
            report.errors.append(f"{action.describe()}: {exc}")
            self.log(f"{action.describe()} failed: {exc}")
            return False
        self.store.plans.set_action_state(action_id, ActionState.SUCCEEDED)
        report.states[action_id] = ActionState.SUCCEEDED
        return True

    def _skip(self, report: ExecutionReport, action_id: int, action: Action, why: str) -> None:
        self.store.plans.set_action_state(action_id, ActionState.SKIPPED, why)
        report.states[action_id] = ActionState.SKIPPED
        self.log(f"{action.describe()} skipped: {why}")

    def execute(self, plan: Plan, plan_id: int, skip: Mapping[int, str] | None = None) -> ExecutionReport:
        """Run the journaled plan; the actions at the indices in `skip` are journaled SKIPPED with
        the reason given and not run (`peakpack apply --partial`: their preconditions failed)."""
        report = ExecutionReport(plan_id)
        journaled = list(zip(self.store.plans.action_ids(plan_id), plan.actions, strict=True))
        for i, why in sorted((skip or {}).items()):
            self._skip(report, journaled[i][0], journaled[i][1], why)
        journaled = [j for i, j in enumerate(journaled) if i not in (skip or {})]
        woken_failed: set[str] = set()
        for aid, a in journaled:
            if a.kind is ActionKind.POWER_ON:
                assert a.node
                if self.stop_requested():
                    self._skip(report, aid, a, "the controller is stopping")
                elif not self._run(report, aid, a, partial(self.ops.power_on, a.node, f"plan {plan_id}")):
                    woken_failed.add(a.node)

        migrations: list[tuple[int, Action]] = []
        for aid, a in journaled:
            if a.kind is not ActionKind.MIGRATE:
                continue
            if a.target in woken_failed:
                self._skip(report, aid, a, f"target {a.target} did not power on")
            elif self.stop_requested():
                self._skip(report, aid, a, "the controller is stopping")
            else:
                migrations.append((aid, a))
        if migrations:
            report.states.update(self.ops.migrate(migrations, self.stop_requested))

        touched = sorted({n for _, a in migrations for n in (a.source, a.target) if n})
        for node in touched:
            if node in {a.node for _, a in journaled if a.kind is ActionKind.POWER_OFF}:
                continue  # about to be emptied and switched off: nothing to pin
            if self.stop_requested():
                break  # pinning is an optimisation: nothing new once stopping
            try:
                self.ops.pin(node)
            except PeakpackError as exc:  # pinning is an optimisation: report, carry on
                report.errors.append(f"pin {node}: {exc}")
                self.log(f"pinning {node} failed: {exc}")

        for aid, a in journaled:
            if a.kind is not ActionKind.POWER_OFF:
                continue
            assert a.node
            unfinished = [str(m.container) for mid, m in migrations
                          if m.source == a.node and report.states.get(mid) is not ActionState.SUCCEEDED]
            if unfinished:
                self._skip(report, aid, a, f"containers still on it: {', '.join(sorted(unfinished))}")
            elif self.stop_requested():
                self._skip(report, aid, a, "the controller is stopping")
            else:
                refusal = self._why_not_empty(a.node)
                if refusal is not None:
                    self._skip(report, aid, a, refusal)
                else:
                    self._run(report, aid, a, partial(self.ops.power_off, a.node, f"plan {plan_id}: emptied"))
        return report

    def _why_not_empty(self, node: str) -> str | None:
        """Why `node` may not be switched off now, or None when it hosts nothing: nothing runs
        there, and no container its QoS guard stopped is still there (switched off, nothing would
        start it again); a node that cannot be asked is kept on (the rest of the plan still runs)."""
        stopped = sorted(c for c, n in self.stopped().items() if n == node)
        try:
            if self.ops.hosts_nothing(node, stopped):
                return None
        except PeakpackError as exc:
            return f"could not check that it hosts nothing: {exc}"
        also = f", or {', '.join(stopped)}, stopped there by its QoS guard to be started again" if stopped else ""
        return f"the node hosts containers that the plan did not know of{also}"
