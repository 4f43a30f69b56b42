"""Plan actions left ONGOING by a crash, finished from the facts once migrations and power events
have been settled: a migration action whose migration never began FAILED; a power action
SUCCEEDED or FAILED by what the node's BMC reports now, or left ONGOING when it cannot be read."""

from __future__ import annotations

from collections.abc import Callable

from ..domain.errors import PeakpackError
from ..domain.ports import Journal
from ..domain.states import ActionState


def settle_actions(journal: Journal, bmc_is_on: Callable[[str], bool]) -> list[str]:
    """One line per ONGOING action finished; `bmc_is_on(node)` raises PeakpackError when the BMC
    cannot be read."""
    lines: list[str] = []
    unfinished = journal.plans.unfinished_actions()
    if not unfinished:
        return lines
    # a migration of an action begins after the action was journaled: no need to read older ones
    since = min(a.created_at for a in unfinished)
    migrated = {m.action_id for m in journal.migrations.history(since) if m.action_id is not None}
    for a in unfinished:
        if a.kind == "migrate" and a.id in migrated:
            continue  # its migration is settled by the migration reconciliation, which updates it
        if a.kind == "migrate":
            journal.plans.set_action_state(a.id, ActionState.FAILED, "controller stopped before the migration began")
        else:
            try:
                on = bmc_is_on(a.node or "")
            except PeakpackError as exc:
                lines.append(f"action {a.id} ({a.kind} {a.node}): BMC unreadable, left ONGOING: {exc}")
                continue
            ok = on == (a.kind == "power_on")
            journal.plans.set_action_state(a.id, ActionState.SUCCEEDED if ok else ActionState.FAILED,
                                           f"controller stopped; BMC reports {'on' if on else 'off'}")
        lines.append(f"action {a.id} ({a.kind}): finished from what the nodes show")
    return lines
