"""The one fake of the node operations (`domain.ports.NodeOps`) and of the live `Services`, for
every unit test that acts on nodes. `FakeNodeOps` changes a small in-memory world and journals
where the live ones do (`power/switch.PowerSwitch` for power, `migrate/batch.py` for migrations), so
what a test reads from the store is what a controller on real nodes would find there;
`tests/support/node_ops_contract.py` holds it to the live behaviour."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from peakpack.orchestrator.domain.errors import NodeError, PowerError
from peakpack.orchestrator.domain.model import ClusterSnapshot
from peakpack.orchestrator.domain.plan import Action
from peakpack.orchestrator.domain.ports import Journal, Observation, Services
from peakpack.orchestrator.domain.records import EnergyRow
from peakpack.orchestrator.domain.states import ActionState, MigrationState


@dataclass
class FakeWorld:
    """The nodes as the fake ops see and change them."""

    powered: set[str] = field(default_factory=set)
    running: dict[str, str] = field(default_factory=dict)  # container -> the node it runs on
    stopped: dict[str, str] = field(default_factory=dict)  # container -> the node it is stopped on

    @classmethod
    def from_snapshot(cls, snapshot: ClusterSnapshot) -> FakeWorld:
        return cls(set(snapshot.powered()), snapshot.placement())

    def on(self, node: str) -> list[str]:
        return sorted(c for c, n in self.running.items() if n == node)


class FakeNodeOps:
    """NodeOps over a `FakeWorld`. `calls` logs each operation asked for, `seen_states` the plan
    action state in the journal while each one ran (the executor journals before it acts).

    Knobs for what real nodes do to a plan: `fail_power_on` nodes do not wake (PowerError, the
    node quarantined), `fail_containers` are ROLLED_BACK, `busy_nodes` host containers the plan
    did not know of, `unreachable` nodes cannot be asked whether they host anything."""

    def __init__(self, journal: Journal, world: FakeWorld, *, fail_power_on: Collection[str] = (),
                 fail_containers: Collection[str] = (), busy_nodes: Collection[str] = (),
                 unreachable: Collection[str] = ()) -> None:
        self.journal, self.world = journal, world
        self.fail_power_on, self.fail_containers = set(fail_power_on), set(fail_containers)
        self.busy_nodes, self.unreachable = set(busy_nodes), set(unreachable)
        self.calls: list[tuple[str, str]] = []
        self.seen_states: list[str] = []

    def _note_state(self) -> None:
        ongoing = [a.state.value for a in self.journal.plans.actions() if a.state is ActionState.ONGOING]
        self.seen_states.append(ongoing[-1] if ongoing else "not a plan action")

    def power_on(self, node: str, reason: str) -> None:
        self.calls.append(("power_on", node))
        self._note_state()
        power = self.journal.power
        event = power.begin(node, "power_on", reason)
        if node in self.fail_power_on:
            error = PowerError(f"node {node}: did not answer within 60 s")
            power.finish(event, "FAILED", str(error))
            power.quarantine(node, f"failed to wake: {error}")
            raise error
        self.world.powered.add(node)
        power.finish(event, "SUCCEEDED")

    def power_off(self, node: str, reason: str) -> None:
        self.calls.append(("power_off", node))
        self._note_state()
        power = self.journal.power
        event = power.begin(node, "power_off", reason)
        self.world.powered.discard(node)
        for container in self.world.on(node):  # a power cut stops what ran there, as in the lab
            del self.world.running[container]
        power.set_idle_since(node, None)
        power.finish(event, "SUCCEEDED")

    def migrate(self, actions: Sequence[tuple[int, Action]],
                stop_requested: Callable[[], bool]) -> dict[int, ActionState]:
        """Each action re-checked as the batch does (stopping? still on its source?), else moved
        under a journaled migration."""
        plans = self.journal.plans
        states = {}
        for aid, a in actions:
            assert a.container and a.source and a.target
            self.calls.append(("migrate", a.container))
            if stop_requested():
                states[aid] = ActionState.SKIPPED
                plans.set_action_state(aid, ActionState.SKIPPED, "the controller is stopping")
            elif self.world.running.get(a.container) != a.source:
                states[aid] = ActionState.SKIPPED
                plans.set_action_state(aid, ActionState.SKIPPED, f"{a.container} no longer runs on {a.source}")
            else:
                states[aid] = self._move(aid, a.container, a.source, a.target)
        return states

    def _move(self, action_id: int, container: str, source: str, target: str) -> ActionState:
        plans, migrations = self.journal.plans, self.journal.migrations
        plans.set_action_state(action_id, ActionState.ONGOING)
        self._note_state()
        mid = migrations.begin(container, source, target, action_id)
        if container in self.fail_containers:
            reason = f"restore on {target} failed; {container} runs on {source} again"
            migrations.finish(mid, MigrationState.ROLLED_BACK, reason)
            plans.set_action_state(action_id, ActionState.ROLLED_BACK, reason)
            return ActionState.ROLLED_BACK
        self.world.running[container] = target
        migrations.finish(mid, MigrationState.SUCCEEDED)
        plans.set_action_state(action_id, ActionState.SUCCEEDED)
        return ActionState.SUCCEEDED

    def pin(self, node: str) -> None:
        self.calls.append(("pin", node))

    def hosts_nothing(self, node: str, stopped: Collection[str] = ()) -> bool:
        if node in self.unreachable or node not in self.world.powered:
            raise NodeError(node, "SSH connection refused")
        return (node not in self.busy_nodes and not self.world.on(node)
                and not any(self.world.stopped.get(c) == node for c in stopped))

    def start(self, node: str, container: str) -> None:
        self.calls.append(("start", container))
        if node in self.unreachable or node not in self.world.powered:
            raise NodeError(node, "SSH connection refused")
        if self.world.stopped.get(container) != node:
            raise NodeError(node, f"`docker start {container}` failed: No such container: {container}")
        self.world.running[container] = self.world.stopped.pop(container)


def fake_services(journal: Journal, snapshot: ClusterSnapshot, reconciled: Sequence[str] = (),
                  energy: Sequence[EnergyRow] = ()) -> Services:
    """Services over `FakeNodeOps` on a cluster that looks like `snapshot` at every observation
    (its world is made anew from it, so each epoch plans and acts on the same cluster); reconcile
    finds `reconciled`, plans pass the power check as they are, and each interval's energy is
    `energy`."""
    ops = FakeNodeOps(journal, FakeWorld.from_snapshot(snapshot))

    def observe() -> Observation:
        ops.world = FakeWorld.from_snapshot(snapshot)
        return Observation(snapshot)

    return Services(
        observe=observe,
        ops=ops,
        settle=lambda: list(reconciled),
        adjust_plan=lambda plan, _snapshot: plan,
        account_energy=lambda _snapshot, _plan_id: list(energy),
    )
