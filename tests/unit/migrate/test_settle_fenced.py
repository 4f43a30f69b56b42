"""A fenced process stops touching nodes at once: once another controller has taken the lease,
neither a migration's own settling nor a reconciliation restores, removes or starts anything
(they used to act first and find out at their next journal write), and settling never swallows
the FencedError. The nodes are test_settle_facts' fakes; the store is real."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.migrate.batch import reconcile_migrations
from peakpack.migrate.resolve import Images
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import demo_inventory
from peakpack.orchestrator.domain.errors import FencedError
from tests.unit.migrate.test_settle import DST_ID, SRC_ID, Copy, FakeNodes, changes, open_migration


def taken_over(tmp_path: Path) -> tuple[Store, Store]:
    """(the old leader's handle, fenced with its token; the new leader's), after the take-over."""
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    old, new = Store.open(url), Store.open(url)
    old.fence(old.lease.acquire("serve@old:1:x:y", 60))
    return old, new


def test_a_fenced_reconciliation_restores_nothing(tmp_path: Path) -> None:
    old, new = taken_over(tmp_path)
    open_migration(old, "web")  # left at the checkpoint: the source dumped and stopped, resumable in place
    new.fence(new.lease.acquire("serve@new:1:x:y", 60, replacing="serve@old:1:x:y"))
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, images=Images.DUMP, dumped=True, armed=True)})
    with pytest.raises(FencedError, match="serve@new:1:x:y took over"):
        asyncio.run(reconcile_migrations(nodes, nodes, old))  # type: ignore[arg-type]
    assert not changes(nodes)  # the new leader resumes it, once (nor is the node disarmed by the old one)
    old.close()
    new.close()


@pytest.mark.parametrize("failure", [None, "the restore timed out"])
def test_a_fenced_migration_settles_nothing_and_says_so(tmp_path: Path, failure: str | None) -> None:
    old, new = taken_over(tmp_path)
    nodes = FakeNodes({("node-1", "web"): Copy(SRC_ID, running=True, images=Images.DUMP, dumped=True),
                       ("node-2", "web"): Copy(DST_ID, running=True, images=Images.COMPLETE)})
    migration = Migration(nodes, nodes, old, demo_inventory(), "web", "node-1", "node-2")  # type: ignore[arg-type]
    migration.mid = old.migrations.begin("web", "node-1", "node-2")
    migration.t.frozen_at = time.monotonic()  # frozen: settling would finish forward or back
    new.fence(new.lease.acquire("serve@new:1:x:y", 60, replacing="serve@old:1:x:y"))
    with pytest.raises(FencedError):
        asyncio.run(migration.settle(failure))
    assert not changes(nodes)
    old.close()
    new.close()


def test_the_fence_is_checked_before_every_action_of_a_settling(tmp_path: Path) -> None:
    """Settling acts in rounds with no journal write between them: a take-over during the first
    action (restoring the target from the transferred checkpoint) stops the second (removing that
    checkpoint and the source's leftovers)."""
    old, new = taken_over(tmp_path)
    open_migration(old, "web")
    nodes = FakeNodes({("node-2", "web"): Copy(DST_ID, running=False, images=Images.COMPLETE)})
    run = FakeNodes.run

    async def run_and_lose(self: FakeNodes, node: str, argv: list[str], **kw: object) -> object:
        result = await run(self, node, argv, **kw)  # type: ignore[arg-type]
        if "restore" in argv:  # `docker start --checkpoint` by the node script: meanwhile another takes over
            new.fence(new.lease.acquire("serve@new:1:x:y", 60, replacing="serve@old:1:x:y"))
        return result

    FakeNodes.run = run_and_lose  # type: ignore[method-assign]
    try:
        with pytest.raises(FencedError):
            asyncio.run(reconcile_migrations(nodes, nodes, old))  # type: ignore[arg-type]
    finally:
        FakeNodes.run = run  # type: ignore[method-assign]
    assert [argv[:3] for _, argv in changes(nodes) if argv[0] == "docker"] == [["docker", "start", "--checkpoint"]]
    # the target's daemons stopped and its block stripped (its lease stays: the migration is not settled), no more
    assert [argv[:2] for _, argv in changes(nodes)][-2:] == [["docker", "start"], ["criu", "stop"]]
    old.close()
    new.close()
