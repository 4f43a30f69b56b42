"""What `domain.ports.NodeOps` promises the plan executor, written once and run against
`tests/support/fakes.FakeNodeOps` (tests/unit/orchestrator/domain/test_ports_node_ops.py) and the live `JoinedOps` on
the lab (tests/integration/test_live_node_ops_contract.py). Where the two disagree the fake is wrong:
unit tests over it would pass against behaviour the real nodes do not have.

Each point is a plain function of a `Harness` and the names it acts on. It asserts its own
preconditions, so a harness can start from a fresh cluster or walk the points in sequence."""

from __future__ import annotations

from typing import Protocol

import pytest

from peakpack.orchestrator.domain.errors import PeakpackError
from peakpack.orchestrator.domain.model import ClusterMetrics, ClusterSnapshot
from peakpack.orchestrator.domain.plan import Action, Plan, SolverReport
from peakpack.orchestrator.domain.ports import Journal, NodeOps
from peakpack.orchestrator.domain.records import ActionRecord
from peakpack.orchestrator.domain.states import ActionState, MigrationState, PlanStatus


class Harness(Protocol):
    """The ops under test, the journal they write, and the world seen without them."""

    ops: NodeOps
    journal: Journal

    def start(self, container: str, node: str) -> None:
        """Run a small container called `container` on `node`."""
        ...

    def stop(self, container: str, node: str) -> None:
        """Stop `container` on `node` (as a node's QoS guard does); it stays there, stopped."""
        ...

    def running_on(self, container: str) -> list[str]:
        """The nodes `container` runs on now (sorted; one, or none)."""
        ...

    def powered(self, node: str) -> bool: ...

    def action_id(self, action: Action) -> int:
        """A journaled plan action for `action` (`journal_action`): what the executor hands NodeOps."""
        ...


NOTHING = ClusterMetrics(nodes_on=0, power_w=0.0, max_cpu_util=0.0)


def journal_action(journal: Journal, action: Action) -> int:
    """Save a plan of `action` alone, APPLYING as the executor finds it, and return its action id."""
    plan = Plan(policy="contract", actions=(action,), before=NOTHING, after=NOTHING,
                solver=SolverReport("contract", 0.0, 0.0, 0.0), dry_run=False)
    plan_id = journal.plans.save(plan, inventory="contract", snapshot=ClusterSnapshot(nodes=(), containers=()),
                                 status=PlanStatus.APPLYING)
    [action_id] = journal.plans.action_ids(plan_id)
    return action_id


def journaled(journal: Journal, action_id: int) -> ActionRecord:
    return next(a for a in journal.plans.actions() if a.id == action_id)


def migrations_of(journal: Journal, action_id: int) -> list[tuple[str, str, str, MigrationState]]:
    return [(m.container, m.source, m.target, m.state) for m in journal.migrations.history()
            if m.action_id == action_id]


def last_power_event(journal: Journal, node: str) -> tuple[str, str]:
    return [(e.action, e.state) for e in journal.power.events() if e.node == node][-1]


def hosts_nothing_follows_containers(h: Harness, node: str, container: str) -> None:
    """An empty powered node hosts nothing; once a container runs there it does not (the executor
    switches off only what hosts nothing). Leaves `container` running on `node`."""
    assert h.powered(node) and h.running_on(container) == []
    assert h.ops.hosts_nothing(node)
    h.start(container, node)
    assert not h.ops.hosts_nothing(node)


def a_container_its_guard_stopped_is_still_hosted(h: Harness, node: str, container: str) -> None:
    """A container stopped on a node that is named as one its QoS guard stopped keeps the node
    hosting (switched off, nothing would start it again); a stopped container not named does not
    (an operator's). `container` is alone on `node`; leaves it running there."""
    assert h.running_on(container) == [node]
    h.stop(container, node)
    assert h.ops.hosts_nothing(node) and h.ops.hosts_nothing(node, ["another"])
    assert not h.ops.hosts_nothing(node, [container])
    h.ops.start(node, container)
    assert not h.ops.hosts_nothing(node)


def a_stopped_container_starts_again_where_it_was(h: Harness, node: str, container: str) -> None:
    """A container stopped on a node (by its QoS guard) starts again there; one the node does not
    have fails with a PeakpackError naming the node. Leaves `container` running on `node`."""
    assert h.running_on(container) == [node]
    h.stop(container, node)
    assert h.running_on(container) == []
    h.ops.start(node, container)
    assert h.running_on(container) == [node]
    with pytest.raises(PeakpackError, match=node):
        h.ops.start(node, "never-made")


def pinning_a_busy_node_works(h: Harness, node: str) -> None:
    """Pinning a powered node with containers does not fail."""
    assert h.powered(node) and not h.ops.hosts_nothing(node)
    h.ops.pin(node)


def nothing_migrates_once_stopping(h: Harness, container: str, source: str, target: str) -> None:
    """With the controller stopping from the start, no migration starts: SKIPPED with the reason."""
    assert h.running_on(container) == [source]
    action = Action.migrate(container, source, target)
    aid = h.action_id(action)
    assert h.ops.migrate([(aid, action)], lambda: True) == {aid: ActionState.SKIPPED}
    row = journaled(h.journal, aid)
    assert (row.state, row.detail) == (ActionState.SKIPPED, "the controller is stopping")
    assert migrations_of(h.journal, aid) == []
    assert h.running_on(container) == [source]


def migrating_from_the_wrong_source_is_skipped(h: Harness, container: str, source: str, target: str) -> None:
    """A container that does not run on the action's source (it moved, or died) is SKIPPED with the
    reason and nothing moves: the plan was made on an older view of the cluster."""
    before = h.running_on(container)
    assert source not in before
    action = Action.migrate(container, source, target)
    aid = h.action_id(action)
    assert h.ops.migrate([(aid, action)], lambda: False) == {aid: ActionState.SKIPPED}
    row = journaled(h.journal, aid)
    assert (row.state, row.detail) == (ActionState.SKIPPED, f"{container} no longer runs on {source}")
    assert migrations_of(h.journal, aid) == []
    assert h.running_on(container) == before


def migration_moves_a_running_container(h: Harness, container: str, source: str, target: str) -> None:
    """A running container migrates: SUCCEEDED for its action id, the action and a migration row
    journaled SUCCEEDED, and afterwards it runs on the target only."""
    assert h.running_on(container) == [source]
    action = Action.migrate(container, source, target)
    aid = h.action_id(action)
    assert h.ops.migrate([(aid, action)], lambda: False) == {aid: ActionState.SUCCEEDED}
    assert journaled(h.journal, aid).state is ActionState.SUCCEEDED
    assert migrations_of(h.journal, aid) == [(container, source, target, MigrationState.SUCCEEDED)]
    assert h.running_on(container) == [target]


def power_off_then_on(h: Harness, node: str) -> None:
    """An empty node is switched off and back on, each switch journaled as a SUCCEEDED power event;
    once on it answers again."""
    assert h.powered(node) and h.ops.hosts_nothing(node)
    h.ops.power_off(node, "contract: emptied")
    assert not h.powered(node)
    assert last_power_event(h.journal, node) == ("power_off", "SUCCEEDED")
    h.ops.power_on(node, "contract: needed")
    assert h.powered(node)
    assert last_power_event(h.journal, node) == ("power_on", "SUCCEEDED")
    assert h.ops.hosts_nothing(node)
