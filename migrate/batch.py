"""Runs many migrations with bounded parallelism (per node and per cluster), each journaled under
its plan action, and settles the migrations a crash or an unreachable node left open
(`reconcile_migrations`: at start, every epoch, and `peakpack reconcile`).

One migration's failure never aborts the batch: every error ends in that migration's own
settling, and whatever escapes is recorded against its action. Likewise one migration that
cannot be reconciled stays IN_DOUBT with the reason and the others are reconciled. A stop
request lets migrations in flight settle and starts no new one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from peakpack.orchestrator.domain.errors import FencedError, PeakpackError
from peakpack.orchestrator.domain.model import Inventory
from peakpack.orchestrator.domain.plan import Action
from peakpack.orchestrator.domain.ports import Journal
from peakpack.orchestrator.domain.records import MigrationRecord
from peakpack.orchestrator.domain.settings import MigrationSettings
from peakpack.orchestrator.domain.states import ActionState, MigrationState, Step
from peakpack.orchestrator.remote import SshPool
from peakpack.orchestrator.remote.docker_api import EnginePool

from . import moved
from .criu import NodeCriu
from .hold import set_hold
from .settle import RESTORE_FAILED, MigrationFacts, PowerProbe, Settler
from .transaction import Migration

ACTION_STATE = {
    MigrationState.SUCCEEDED: ActionState.SUCCEEDED,
    MigrationState.FAILED: ActionState.FAILED,
    MigrationState.ROLLED_BACK: ActionState.ROLLED_BACK,
    MigrationState.ROLLBACK_FAILED: ActionState.FAILED,
    MigrationState.IN_DOUBT: ActionState.ONGOING,  # settled by reconciliation, which updates the action
}


async def execute_migrations(
    ssh: SshPool, engines: EnginePool, store: Journal, inventory: Inventory, actions: Sequence[tuple[int, Action]], *,
    per_node: int = 1, cluster: int = 2, progress: Callable[[str], None] | None = None,
    bmc_power: PowerProbe | None = None, stop_requested: Callable[[], bool] = lambda: False,
) -> dict[int, ActionState]:
    """Each action: precondition re-checked (still running on its source?) else SKIPPED."""
    limit = asyncio.Semaphore(cluster)
    node_limits = {n.name: asyncio.Semaphore(per_node) for n in inventory.nodes}
    say = progress or (lambda _: None)
    fenced: list[FencedError] = []  # once the store refuses us, nothing more starts

    def stopping() -> bool:
        return bool(fenced) or stop_requested()

    async def one(action_id: int, a: Action) -> ActionState:
        assert a.container and a.source and a.target
        first, second = sorted((a.source, a.target))  # same order everywhere: no deadlock
        async with limit, node_limits[first], node_limits[second]:
            if stopping():
                if not fenced:
                    store.plans.set_action_state(action_id, ActionState.SKIPPED, "the controller is stopping")
                return ActionState.SKIPPED
            try:
                got = await engines.inspect_container_or_none(a.source, a.container)
            except PeakpackError as exc:
                store.plans.set_action_state(action_id, ActionState.SKIPPED, f"source unreachable: {exc}")
                return ActionState.SKIPPED
            if got is None or not got["State"]["Running"]:
                store.plans.set_action_state(
                    action_id, ActionState.SKIPPED, f"{a.container} no longer runs on {a.source}"
                )
                return ActionState.SKIPPED
            store.plans.set_action_state(action_id, ActionState.ONGOING)
            say(f"migrating {a.container}: {a.source} -> {a.target}")
            result = await Migration(ssh, engines, store, inventory, a.container, a.source, a.target, action_id,
                                     bmc_power=bmc_power, stop_requested=stopping).run()
            state = ACTION_STATE[result.state]
            store.plans.set_action_state(action_id, state, result.reason)
            say(f"{a.container}: {result.state.value.lower()}" + (f" ({result.reason})" if result.reason else ""))
            return state

    async def guarded(action_id: int, a: Action) -> tuple[int, ActionState]:
        try:
            return action_id, await one(action_id, a)
        except FencedError as exc:  # the new leader settles it from the facts; we must not write or act
            fenced.append(exc)
            return action_id, ActionState.FAILED
        except Exception as exc:  # noqa: BLE001 - one migration's error never aborts the others
            try:
                store.plans.set_action_state(action_id, ActionState.FAILED, _describe(exc))
            except Exception:  # noqa: BLE001 - the journal itself failed: reconciliation sees the migration
                pass
            return action_id, ActionState.FAILED

    return dict(await asyncio.gather(*(guarded(aid, a) for aid, a in actions)))


async def reconcile_migrations(ssh: SshPool, engines: EnginePool, store: Journal,
                               bmc_power: PowerProbe | None = None,
                               inventory: Inventory | None = None,
                               stop_requested: Callable[[], bool] = lambda: False) -> list[str]:
    """Settle every migration left open (by a crash, or IN_DOUBT) from what both nodes show;
    never assume success. One that fails to settle for any reason (a docker or database error, a
    bug) stays IN_DOUBT with the reason, journaled, and the others are still settled; only a
    fenced write stops it all (another controller leads). Once `stop_requested()` nothing more is
    settled (the one in progress ends). `inventory`: its `[migration]` settings (the grace period,
    the `on_moved` hook) and node addresses; without one, the defaults and no hook. Returns one
    line per migration (and one per hook that ran)."""
    lines = []
    for m in store.migrations.unfinished():
        if stop_requested():
            lines.append(f"migration {m.id} ({m.container} {m.source} -> {m.target}): left {m.state.value}: "
                         "stopping; the next reconciliation settles it")
            continue
        try:
            state, reason, told = await _reconcile(ssh, engines, store, m, bmc_power, inventory)
        except FencedError:
            raise
        except Exception as exc:  # noqa: BLE001 - one migration's error never stops the others
            state, told = MigrationState.IN_DOUBT, None
            reason = f"reconciling failed ({_describe(exc)}); retried at the next reconciliation"
            try:
                _journal_in_doubt(store, m, reason)
            except FencedError:
                raise
            except Exception as journal:  # noqa: BLE001 - the journal itself failed: the record says so
                reason += f"; not journaled ({_describe(journal)})"
        lines.append(f"migration {m.id} ({m.container} {m.source} -> {m.target}): {state.value}: {reason}")
        lines += [told] if told else []
    return lines


async def _reconcile(ssh: SshPool, engines: EnginePool, store: Journal, m: MigrationRecord,
                     bmc_power: PowerProbe | None, inventory: Inventory | None
                     ) -> tuple[MigrationState, str | None, str | None]:
    settings = inventory.migration if inventory is not None else MigrationSettings()
    steps = store.migrations.steps(m.id)
    preflight = next((s for s in steps if s.step == Step.PREFLIGHT and s.state == "DONE"), None)
    facts = MigrationFacts.loads(preflight.detail) if preflight else None
    if facts is None:  # preflight never finished: nothing was changed on either node
        state = MigrationState.FAILED
        reason: str | None = f"the controller stopped during {m.state.value}, before anything changed"
    else:
        checkpointed = any(s.step == Step.CHECKPOINTING for s in steps)  # journaled before the freeze
        failed_restores = sum(1 for s in steps if RESTORE_FAILED in (s.detail or ""))
        settler = Settler(ssh, engines, m.container, m.source, m.target, m.id, facts, bmc_power, settings=settings,
                          guard=store.check_fence, token=store.fencing_token or 0, failed_restores=failed_restores)
        why = ("in doubt until both nodes could be judged" if m.state is MigrationState.IN_DOUBT
               else f"the controller stopped during {m.state.value}")
        state, reason = await settler.run(checkpointed, why)
        if state is not MigrationState.IN_DOUBT:
            await set_hold(ssh, (m.source, m.target), m.container, m.id, held=False)
    if state is MigrationState.IN_DOUBT:
        _journal_in_doubt(store, m, reason)
    else:  # the action first: a failure between the two writes leaves the migration open, never
        # a finished migration that the error path would journal IN_DOUBT again
        if m.action_id is not None:
            store.plans.set_action_state(m.action_id, ACTION_STATE[state], reason)
        store.migrations.finish(m.id, state, reason)
        if facts is not None and inventory is not None:
            return state, reason, await _tell(engines, store, inventory, m, state, reason, facts)
    return state, reason, None


async def _tell(engines: EnginePool, store: Journal, inventory: Inventory, m: MigrationRecord,
                state: MigrationState, reason: str | None, facts: MigrationFacts) -> str | None:
    """The operator's hook for a migration reconciliation settled; its failure undoes nothing."""
    try:
        return await moved.tell(engines, store, inventory.migration, {n.name: n.address for n in inventory.nodes},
                                inventory.source.parent if inventory.source else None, m.id, m.container,
                                m.source, m.target, state, reason, facts)
    except FencedError:
        raise
    except Exception as exc:  # noqa: BLE001 - settled whatever the hook's journal does
        return f"on_moved for migration {m.id}: {_describe(exc)}"


async def stale_leases(ssh: SshPool, nodes: Sequence[str]) -> list[str]:
    """One line per node whose migration lease nobody renews any more (its controller died or lost
    its way, and no reconciliation has settled that migration), with its age and owner; nodes that
    do not answer are skipped (their leases are read when they do)."""
    async def one(node: str) -> str | None:
        try:
            lease = await NodeCriu(ssh, node, "", 0).lease()
        except PeakpackError:
            return None
        if lease is None or not lease.stale:
            return None
        return (f"{node}: stale lease: {lease.describe()}: its controller stopped renewing it; `peakpack reconcile` "
                "settles that migration when this store knows it, else remove /etc/criu/peakpack.lock there once "
                "no checkpoint or restore runs")

    return [line for line in await asyncio.gather(*(one(n) for n in nodes)) if line]


def _journal_in_doubt(store: Journal, m: MigrationRecord, reason: str | None) -> None:
    """IN_DOUBT with the reason; its plan action stays ONGOING with the same reason."""
    store.migrations.step_finished(store.migrations.step_started(m.id, Step.IN_DOUBT), ok=False, detail=reason)
    if m.action_id is not None:
        store.plans.set_action_state(m.action_id, ACTION_STATE[MigrationState.IN_DOUBT], reason)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
