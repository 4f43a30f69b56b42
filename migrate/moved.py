"""Telling the rest of the network that a container moved (`[migration] on_moved`).

A container whose addresses move with it (`segment`) needs nobody told: the network learns the
move from its announcements. One that only publishes ports answers at the target node's address
after a move, and whatever sends clients to it (a load balancer, DNS, a service registry) must
follow. So after every settled migration, of either kind, the operator's command runs on the head
node with one JSON document on its standard input (`document`): the container, the nodes, where
clients reached it before and where they reach it now, and how the migration ended. The command
runs once the outcome is in the store, at most once per migration, bounded in time; whatever it
does (fails, hangs, is killed) is journaled as the migration's `on_moved` step and never undoes
the migration.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from peakpack.orchestrator.domain.errors import PeakpackError
from peakpack.orchestrator.domain.ports import Journal
from peakpack.orchestrator.domain.settings import MigrationSettings
from peakpack.orchestrator.domain.states import MigrationState, Step
from peakpack.orchestrator.remote.docker_api import EngineAPIError, EnginePool

from . import spec
from .settle import MigrationFacts

#: the document's `event`; its shape is a contract (docs/migration.md)
EVENT = "peakpack.migration.settled"
#: what the hook's journal line keeps of its output
SAID = 300


def reached(d: spec.Inspect, node: str, node_address: str) -> dict[str, Any]:
    """Where clients reach the container `d` on `node`: its addresses per network and its published
    ports (at the node's address unless a binding names one)."""
    return {"node": node, "node_address": node_address, "addresses": [e.to_json() for e in spec.endpoints(d)],
            "ports": spec.port_bindings(d, node_address)}


def document(migration_id: int, container: str, source: str, target: str, state: MigrationState,
             reason: str | None, facts: MigrationFacts, after: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON document the hook reads. `after`: where the surviving copy is reached (`reached`),
    None when no copy runs."""
    runs_on = after["node"] if after is not None else None
    return {"event": EVENT, "at": datetime.now(UTC).isoformat(), "migration_id": migration_id,
            "container": container, "source": source, "target": target, "state": state.value, "reason": reason,
            "runs_on": runs_on, "moved": runs_on == target, "clients": facts.clients,
            "before": facts.before or None, "after": after}


async def run_hook(command: str, doc: Mapping[str, Any], timeout: float, cwd: Path | None) -> tuple[bool, str]:
    """Run `command` (`sh -c`, in its own process group) with `doc` on its standard input; (ok,
    what happened). A command still running after `timeout` is killed with its group."""
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, cwd=cwd, start_new_session=True)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(json.dumps(doc).encode() + b"\n"), timeout)
    except TimeoutError:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        return False, f"killed after {timeout:g} s"
    said = " ".join(out.decode(errors="replace").split())[:SAID]
    if proc.returncode:
        return False, f"exited {proc.returncode}" + (f": {said}" if said else "")
    return True, said or "exit 0"


async def tell(engines: EnginePool, store: Journal, settings: MigrationSettings, addresses: Mapping[str, str],
               cwd: Path | None, migration_id: int, container: str, source: str, target: str,
               state: MigrationState, reason: str | None, facts: MigrationFacts) -> str | None:
    """After a migration settled (a terminal state in the store): run the operator's hook, if any,
    and journal how it went. Returns that line (None without a hook)."""
    if not settings.on_moved:
        return None
    after = None
    for node in (target, source) if state is MigrationState.SUCCEEDED else (source, target):
        try:
            d = await engines.inspect_container_or_none(node, container)
        except (PeakpackError, EngineAPIError):
            continue
        if d is not None and d["State"]["Running"]:
            after = reached(d, node, addresses.get(node, ""))
            break
    doc = document(migration_id, container, source, target, state, reason, facts, after)
    step = store.migrations.step_started(migration_id, Step.ON_MOVED)
    try:
        ok, said = await run_hook(settings.on_moved, doc, settings.on_moved_timeout_seconds, cwd)
    except OSError as exc:
        ok, said = False, f"could not run: {exc}"
    store.migrations.step_finished(step, ok=ok, detail=said)
    return f"on_moved {'ran' if ok else 'FAILED'} for migration {migration_id}: {said}"
