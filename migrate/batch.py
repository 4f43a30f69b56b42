"""Runs many migrations with bounded parallelism (per node and per cluster), each journaled under
its plan action, and repairs what a crash left half done (`reconcile_migrations`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from db.store import ActionState, MigrationState, Store
from orchestrator.errors import PeakpackError
from orchestrator.model import Inventory
from orchestrator.plan import Action

from . import docker as dk
from .handler import Migration, checkpoint_name
from orchestrator.remote import SshPool
from orchestrator.remote.engine import EnginePool

ACTION_STATE = {
    MigrationState.SUCCEEDED: ActionState.SUCCEEDED,
    MigrationState.FAILED: ActionState.FAILED,
    MigrationState.ROLLED_BACK: ActionState.ROLLED_BACK,
    MigrationState.ROLLBACK_FAILED: ActionState.FAILED,
}


async def execute_migrations(
    ssh: SshPool, engines: EnginePool, store: Store, inventory: Inventory, actions: Sequence[tuple[int, Action]], *,
    per_node: int = 1, cluster: int = 2, progress: Callable[[str], None] | None = None,
) -> dict[int, ActionState]:
    """Each action: precondition re-checked (still running on its source?) else SKIPPED."""
    limit = asyncio.Semaphore(cluster)
    node_limits = {n.name: asyncio.Semaphore(per_node) for n in inventory.nodes}
    say = progress or (lambda _: None)

    async def one(action_id: int, a: Action) -> tuple[int, ActionState]:
        assert a.container and a.source and a.target
        first, second = sorted((a.source, a.target))  # same order everywhere: no deadlock
        async with limit, node_limits[first], node_limits[second]:
            try:
                running = await dk.is_running(ssh, a.source, a.container)
            except PeakpackError as exc:
                store.set_action_state(action_id, ActionState.SKIPPED, f"source unreachable: {exc}")
                return action_id, ActionState.SKIPPED
            if not running:
                store.set_action_state(action_id, ActionState.SKIPPED, f"{a.container} no longer runs on {a.source}")
                return action_id, ActionState.SKIPPED
            store.set_action_state(action_id, ActionState.ONGOING)
            say(f"migrating {a.container}: {a.source} -> {a.target}")
            try:
                result = await Migration(ssh, engines, store, inventory, a.container, a.source, a.target, action_id).run()
            except PeakpackError as exc:
                store.set_action_state(action_id, ActionState.FAILED, str(exc))
                return action_id, ActionState.FAILED
            state = ACTION_STATE[result.state]
            store.set_action_state(action_id, state, result.reason)
            say(f"{a.container}: {result.state.value.lower()}")
            return action_id, state

    return dict(await asyncio.gather(*(one(aid, a) for aid, a in actions)))


async def reconcile_migrations(ssh: SshPool, store: Store) -> list[str]:
    """Finish or roll back every migration a crash left unfinished, by looking at both nodes;
    never assume success. Returns one line per migration for the log."""
    lines = []
    for m in store.unfinished_migrations():
        try:
            src, dst = await asyncio.gather(dk.inspect(ssh, m.source, m.container), dk.inspect(ssh, m.target, m.container))
        except PeakpackError as exc:
            lines.append(f"migration {m.id} ({m.container}): left for later, a node does not answer: {exc}")
            continue
        why = f"the controller stopped during {m.state.value}"
        try:
            if dst is not None and dst.running:
                if src is not None:
                    await ssh.run(m.source, ["docker", "rm", "-f", m.container])
                state, reason = MigrationState.SUCCEEDED, f"{why}; found running on {m.target}, source removed"
            else:
                if dst is not None:
                    await ssh.run(m.target, ["docker", "rm", "-f", m.container])
                if src is None:
                    state, reason = MigrationState.ROLLBACK_FAILED, f"{why}; {m.container} is on neither node"
                else:
                    if not src.running:
                        await ssh.run(m.source, ["docker", "start", "--checkpoint", checkpoint_name(m.id), m.container],
                                      timeout=900)
                    state, reason = MigrationState.ROLLED_BACK, f"{why}; running on {m.source} again"
        except PeakpackError as exc:
            state, reason = MigrationState.ROLLBACK_FAILED, f"{why}; repair failed: {exc}"
        store.finish_migration(m.id, state, reason)
        if m.action_id is not None:
            store.set_action_state(m.action_id, ACTION_STATE[state], reason)
        lines.append(f"migration {m.id} ({m.container} {m.source} -> {m.target}): {state.value}: {reason}")
    return lines
