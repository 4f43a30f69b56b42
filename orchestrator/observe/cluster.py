"""What the nodes look like now, over SSH: per node its containers (name, image, CPU cores and
memory in use, class and group from labels), and whether it is powered at all.

Each container is marked movable or not, with the reason, and given the nodes it may not move
onto (`Container.refused_on`), by the same rules migration preflight applies (`migrate.spec`), so
the planner never proposes a move onto an observed node that preflight would refuse (a node that
is off has no facts until it is woken; preflight still judges it then).
A container's CPU is what its cgroup's counters measure (stored every observation; the planner
gets the forecast of that history, `demand`); a `peakpack.cpu` label stands in until the container
has history, and `peakpack.memory_mb` declares its memory; `peakpack.qos` its QoS class (a bad
value: latency-sensitive, and said). A node that does
not answer SSH is powered off if its BMC says so; a node that should be on but cannot be observed is
held: the plan neither moves containers onto or off it nor switches it, and the rest of the
cluster is planned (and woken) as usual."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from peakpack.migrate import spec

from ..decide.demand import COUNTER, SAMPLE, cores_between, cores_since_start
from ..domain import inputs
from ..domain.errors import HostKeyError, NodeError, PeakpackError
from ..domain.model import ClusterSnapshot, Container, ContainerClass, Inventory, NodeState
from ..domain.ports import Journal, Observation
from ..domain.records import DemandRecord
from ..remote import SshPool
from ..remote.shell import RemoteShell
from .conntrack import NodeNet
from .pressure import qos_of, read_qos
from .traffic import READ_SCRIPT, Measured, NodeTraffic, TrafficMeter, parse_read

#: every container, stopped ones too: a volume shared with a stopped container still pins both;
#: a failing `docker ps` fails the node (an error is not an empty node)
INSPECT_ALL = 'ids=$(docker ps -aq) || exit 1; if [ -z "$ids" ]; then echo "[]"; else docker inspect $ids; fi'

#: node name -> True/False (BMC power state) or None (no BMC); power/ supplies the real one
PowerProbe = Callable[[str], bool | None]


#: every running container's cgroup CPU-time counter (ns) and memory in use (bytes, page cache that
#: can be reclaimed left out, as `docker stats` does), read twice one second apart:
#: "# UPTIME" then "NAME CPU_NS MEM_BYTES" per container ("-" for a counter it cannot read). The
#: cgroup comes from the container's init pid (/proc/PID/cgroup), so both cgroup drivers and
#: both cgroup versions work: v1 cpuacct.usage, v2 cpu.stat usage_usec.
USAGE_SCRIPT = r"""
ids=$(docker ps -q) || exit 1
[ -n "$ids" ] || exit 0
list=$(docker inspect -f '{{.Name}} {{.State.Pid}}' $ids 2>/dev/null)  # one may exit meanwhile
cg() { awk -F: -v c="$2" '$2 ~ "(^|,)" c "(,|$)" {print $3; exit}' "/proc/$1/cgroup" 2>/dev/null; }
usage() {
  cpu=; mem=; inactive=
  p=$(cg "$1" cpuacct)
  if [ -n "$p" ]; then
    for m in /sys/fs/cgroup/cpuacct /sys/fs/cgroup/cpu,cpuacct; do
      [ -r "$m$p/cpuacct.usage" ] && { cpu=$(cat "$m$p/cpuacct.usage"); break; }
    done
    d=/sys/fs/cgroup/memory$(cg "$1" memory)
    mem=$(cat "$d/memory.usage_in_bytes" 2>/dev/null)
    inactive=$(awk '$1=="total_inactive_file" {print $2}' "$d/memory.stat" 2>/dev/null)
  else
    d=/sys/fs/cgroup$(awk -F: '$1=="0" {print $3; exit}' "/proc/$1/cgroup" 2>/dev/null)
    cpu=$(awk '$1=="usage_usec" {print $2 "000"}' "$d/cpu.stat" 2>/dev/null)
    mem=$(cat "$d/memory.current" 2>/dev/null)
    inactive=$(awk '$1=="inactive_file" {print $2}' "$d/memory.stat" 2>/dev/null)
  fi
  echo "${cpu:--} $(( ${mem:-0} - ${inactive:-0} ))"
}
sample() {
  echo "# $(cut -d' ' -f1 /proc/uptime)"
  echo "$list" | while read -r name pid; do if [ "${pid:-0}" -gt 0 ]; then echo "${name#/} $(usage "$pid")"; fi; done
}
sample; sleep 1; sample
"""


@dataclass(frozen=True)
class Usage:
    """One container's cgroup counters as read now: CPU time (ns; None if unreadable), memory in
    use, the cores it used over the script's one-second sample (None without two readings), and
    when it started on this node (its inspect document's State.StartedAt; a restore counts)."""

    container: str
    node: str
    cpu_time_ns: int | None
    memory_mb: float
    sample_cores: float | None
    started_at: datetime | None = None


def parse_usage(node: str, text: str) -> dict[str, Usage]:
    """USAGE_SCRIPT's output -> name: Usage."""
    samples: list[tuple[float, dict[str, tuple[int | None, float]]]] = []
    try:
        for line in text.splitlines():
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "#":
                samples.append((float(parts[1]), {}))
                continue
            name, cpu, mem = parts
            samples[-1][1][name] = (None if cpu == "-" else int(cpu), max(0, int(mem)) / 1024**2)
    except (ValueError, IndexError):
        raise NodeError(node, f"container usage answered something unexpected: {text[:80]!r}") from None
    if not samples:
        return {}
    (t0, first), (t1, last) = samples[0], samples[-1]
    result = {}
    for name, (cpu_ns, memory_mb) in last.items():
        before = first.get(name, (None, 0.0))[0]
        cores = None
        if cpu_ns is not None and before is not None and t1 > t0 and cpu_ns >= before:
            cores = (cpu_ns - before) / 1e9 / (t1 - t0)
        result[name] = Usage(name, node, cpu_ns, memory_mb, cores)
    return result


def started_at(doc: spec.Inspect | None) -> datetime | None:
    """When the container last started (State.StartedAt, nanoseconds cut to microseconds), or None
    when the document has no usable time."""
    try:
        t = datetime.fromisoformat(str((doc or {})["State"]["StartedAt"]))
    except (KeyError, TypeError, ValueError):
        return None
    return t if t.tzinfo is not None and t.year > 1 else None


def parse_inspect(node: str, inspect_json: str) -> list[spec.Inspect]:
    """INSPECT_ALL's output -> every container's inspect document."""
    try:
        items = json.loads(inspect_json)
    except ValueError:
        raise NodeError(node, "docker inspect answered something that is not JSON") from None
    if not isinstance(items, list):
        raise NodeError(node, "docker inspect answered something that is not a list")
    return items


def containers_of(node: str, items: Sequence[spec.Inspect], usage: dict[str, Usage]) -> list[Container]:
    """The running containers of `parse_inspect`'s documents; `declared` marks those whose CPU a
    `peakpack.cpu` label gives. Labels are checked (`inputs.container_labels`): a container with a
    bad one is planned as immovable with the reason (its node stays as it is) and the epoch goes
    on. Its memory is what its label declares or what it uses, whichever is more: a label that
    understates it must not let the planner overpack its node."""
    try:
        why_not = spec.immovable(items, node)
    except (KeyError, TypeError, AttributeError) as exc:
        raise NodeError(node, f"container data from docker is unexpected ({exc!r})") from None
    result = []
    for d in items:
        try:
            if not d["State"]["Running"]:
                continue
            name = d["Name"].lstrip("/")
            declared = inputs.container_labels(d["Config"].get("Labels") or {})
            used = usage.get(name)
            measured_cpu = (used.sample_cores or 0.0) if used else 0.0
            measured_mem = used.memory_mb if used else 0.0
            why = "; ".join([*declared.problems, *filter(None, [why_not.get(name)])]) or None
            qos, qos_problem = qos_of(d["Config"].get("Labels") or {})
            result.append(Container(
                name=name, node=node,
                cpu=declared.cpu if declared.cpu is not None else measured_cpu,
                memory_mb=max(declared.memory_mb or 0.0, measured_mem),
                image=d["Config"]["Image"], cls=ContainerClass(declared.cls), group=declared.group,
                immovable=why, ports=spec.published_ports(d), declared=declared.cpu is not None,
                qos=qos, qos_problem=qos_problem,
            ))
        except (KeyError, TypeError, ValueError) as exc:
            raise NodeError(node, f"container data from docker is unexpected ({exc!r})") from None
    return result


@dataclass(frozen=True)
class NodeView:
    """One node as observed: its state and containers, or why it could not be seen."""

    state: NodeState
    containers: list[Container]
    unknown: str | None = None  # why the node could not be observed: plan around it, never on it
    usage: dict[str, Usage] = field(default_factory=dict)
    #: what decides whether a container may move onto this node (None: not observed)
    facts: spec.NodeFacts | None = None
    #: the inspect documents of its running containers, by name, for `spec.why_not_onto`
    inspected: dict[str, spec.Inspect] = field(default_factory=dict)
    #: its conntrack table and what it needs to map it (only when traffic is measured)
    traffic: NodeTraffic | None = None


#: how far back the power events are read for nodes peakpack switched off (`switched_off`)
SWITCHED_OFF_LOOKBACK = timedelta(days=2)


def switched_off(store: Journal, now: datetime) -> frozenset[str]:
    """Nodes whose last successful power switch in `SWITCHED_OFF_LOOKBACK` turned them off: a
    new process (`serve --once`, `apply`) asks their BMC first too (`observe_node`)."""
    last: dict[str, str] = {}
    for e in store.power.events(since=now - SWITCHED_OFF_LOOKBACK, state="SUCCEEDED"):
        last[e.node] = e.action
    return frozenset(n for n, action in last.items() if action == "power_off")


async def observe_node(ssh: SshPool, node: str, bmc_power: PowerProbe, address: str | None = None,
                       believed_off: bool = False) -> NodeView:
    """`address`: the node's inventory address, given when its traffic is measured too (one more
    command, `traffic.READ_SCRIPT`, run beside the others). `believed_off`: the node was off at
    the last look (or switched off since), so its BMC is asked first, and a node it says is off is
    not waited for over SSH (every connection attempt would time out: `[remote]`, 30 s by
    default, each epoch, for every node consolidation switched off)."""
    if believed_off and await asyncio.to_thread(bmc_power, node) is False:
        ssh.forget(node)
        return NodeView(NodeState(node, powered=False), [])
    try:
        commands = [ssh.run(node, ["sh", "-c", INSPECT_ALL], timeout=60),
                    ssh.run(node, ["sh", "-c", USAGE_SCRIPT], timeout=60),
                    ssh.run(node, spec.node_facts_argv(), timeout=60)]
        if address is not None:
            commands.append(ssh.run(node, ["sh", "-c", READ_SCRIPT], timeout=60))
        # every read finishes (a node that is off fails them all) before the first failure is
        # raised: none is left waiting on the node's connection when the caller's loop closes
        answers = await asyncio.gather(*commands, return_exceptions=True)
        failed = next((a for a in answers if isinstance(a, BaseException)), None)
        if failed is not None:
            raise failed
        inspect, used, facts, *conntrack = [a for a in answers if not isinstance(a, BaseException)]
        items = parse_inspect(node, inspect.stdout)
        running = {spec.name_of(d): d for d in items if d["State"]["Running"]}
        usage = {name: replace(u, started_at=started_at(running.get(name)))
                 for name, u in parse_usage(node, used.stdout).items()}
        containers = containers_of(node, items, usage)
        traffic = (node_traffic(node, address, running.values(), conntrack[0].stdout)
                   if conntrack and address is not None else None)
        return NodeView(NodeState(node, powered=True), containers, usage=usage,
                        facts=spec.parse_node_facts(node, facts.stdout), inspected=running, traffic=traffic)
    except HostKeyError as exc:
        return NodeView(NodeState(node, powered=True), [], str(exc))
    except NodeError as exc:
        state = await asyncio.to_thread(bmc_power, node)  # ipmitool blocks: keep the other nodes' SSH going
        if state is False:
            ssh.forget(node)
            return NodeView(NodeState(node, powered=False), [])
        return NodeView(NodeState(node, powered=True), [],
                        f"node {node}: not observed and its BMC {'says it is on' if state else 'cannot tell'}: "
                        f"{str(exc).split(': ', 1)[-1]}")


def running_on(shell: RemoteShell, node: str) -> list[Container]:
    """One node's running containers now (none when it is off); PeakpackError when it cannot be
    seen (what pinning works on)."""
    view = shell.call(observe_node(shell.pool, node, lambda _: None))
    if view.unknown is not None:
        raise PeakpackError(view.unknown)
    return view.containers if view.state.powered else []


def node_traffic(node: str, address: str, running: Iterable[spec.Inspect], read_text: str) -> NodeTraffic:
    """A node's conntrack read with what maps it: its containers (their inspect documents) and
    addresses (the inventory's and the node's own)."""
    read = parse_read(read_text)
    return NodeNet.from_inspect(node, read.addresses | {address}, running), read


async def read_node_traffic(ssh: SshPool, node: str, address: str) -> NodeTraffic | None:
    """Between observations: the node's conntrack table and its running containers now (so a
    container started since is named, never guessed); None when the node does not answer."""
    try:
        inspect, conntrack = await asyncio.gather(ssh.run(node, ["sh", "-c", INSPECT_ALL], timeout=60),
                                                  ssh.run(node, ["sh", "-c", READ_SCRIPT], timeout=60))
        running = [d for d in parse_inspect(node, inspect.stdout) if d["State"]["Running"]]
        return node_traffic(node, address, running, conntrack.stdout)
    except NodeError:
        return None


def sample_traffic(inventory: Inventory, shell: RemoteShell, meter: TrafficMeter) -> None:
    """Read the tables of the nodes the meter measures now, between observations: their bytes go
    into the rows the next observation stores (`TrafficMeter.sample`)."""
    nodes = meter.measuring
    if not nodes:
        return
    address = {n.name: n.address for n in inventory.nodes}

    async def every_node() -> list[NodeTraffic | None]:
        return list(await asyncio.gather(*(read_node_traffic(shell.pool, n, address[n]) for n in nodes)))

    meter.sample(dict(zip(nodes, shell.call(every_node()))), datetime.now(UTC))


async def observe_nodes(ssh: SshPool, nodes: Sequence[str], bmc_power: PowerProbe,
                        addresses: Mapping[str, str] | None = None,
                        believed_off: frozenset[str] = frozenset()) -> list[NodeView]:
    """Every node at once, each movable container then told which observed nodes migration
    preflight would refuse it (`spec.why_not_onto`). Shared paths to look for are known only once
    every node answered, so a second read asks the nodes for them, only when there are any; a node
    that cannot answer it counts as lacking them. `addresses` (node -> inventory address): read
    their conntrack tables too; `believed_off`: nodes whose BMC is asked first (`observe_node`)."""
    views = list(await asyncio.gather(*(observe_node(ssh, n, bmc_power, (addresses or {}).get(n), n in believed_off)
                                        for n in nodes)))
    paths = spec.shared_paths(d for v in views for d in v.inspected.values())
    if paths:
        async def with_paths(v: NodeView) -> NodeView:
            if v.facts is None:
                return v
            try:
                res = await ssh.run(v.state.name, spec.node_facts_argv(paths), timeout=60)
                return replace(v, facts=spec.parse_node_facts(v.state.name, res.stdout))
            except NodeError:
                return v

        views = list(await asyncio.gather(*(with_paths(v) for v in views)))
    facts = {v.state.name: v.facts for v in views if v.facts is not None}
    return [replace(v, containers=[with_node_facts(c, v, facts) for c in v.containers]) for v in views]


def with_node_facts(c: Container, view: NodeView, facts: Mapping[str, spec.NodeFacts]) -> Container:
    """`c` with what the nodes' facts tell of it: what its clients see when it moves (its node's
    networks), and the nodes preflight would refuse it (only a movable container has any)."""
    d = view.inspected.get(c.name)
    if d is None or view.facts is None:
        return c
    c = replace(c, clients=spec.clients(d, view.facts.networks))
    if c.immovable is not None:
        return c
    return replace(c, refused_on=spec.refused_targets(d, c.node, facts))


def observe_cluster(inventory: Inventory, bmc_power: PowerProbe, shell: RemoteShell | None = None, *,
                    believed_off: frozenset[str] = frozenset()) -> ClusterSnapshot:
    """Every node at once. A node that cannot be observed is held (its containers are unknown, so
    nothing moves onto it, off it, or switches it), and the rest of the cluster is planned as usual.
    `believed_off`: see `observe_node`."""
    return observe_usage(inventory, bmc_power, shell, believed_off=believed_off)[0]


def observe_usage(inventory: Inventory, bmc_power: PowerProbe, shell: RemoteShell | None = None, *,
                  traffic: bool = False, believed_off: frozenset[str] = frozenset()
                  ) -> tuple[ClusterSnapshot, list[Usage], dict[str, NodeTraffic | None]]:
    """`observe_cluster`, the cgroup counters of every container in the snapshot and, with
    `traffic`, every node's conntrack read (None for a node not read). `bmc_power` (power/
    supplies the real one) tells a node that is off from one that does not answer; it is asked
    first for the nodes `believed_off`."""
    own = shell is None
    shell = shell or RemoteShell(inventory)
    addresses = {n.name: n.address for n in inventory.nodes} if traffic else None
    try:
        views = shell.call(observe_nodes(shell.pool, [n.name for n in inventory.nodes], bmc_power, addresses,
                                         believed_off))
    finally:
        if own:
            shell.close()
    containers, held = one_copy_each(views)
    snapshot = ClusterSnapshot(nodes=tuple(v.state for v in views), containers=tuple(containers), held=held)
    kept = {(c.name, c.node) for c in containers}
    usage = [v.usage[c.name] for v in views for c in v.containers if c.name in v.usage and (c.name, c.node) in kept]
    return snapshot, usage, {v.state.name: v.traffic for v in views}


def one_copy_each(views: Sequence[NodeView]) -> tuple[list[Container], dict[str, str]]:
    """Every container once (the first node's copy of a name that runs on two), and the nodes held:
    those not observed, and both nodes of a name that runs on two, with the reason naming the owner
    that started the second copy and what to do (`spec.why_twice`): neither node is touched until an
    operator or reconcile decides."""
    held = {v.state.name: v.unknown for v in views if v.unknown is not None}
    seen: dict[str, NodeView] = {}
    containers = []
    for view, c in ((v, c) for v in views for c in v.containers):
        first = seen.get(c.name)
        if first is None:
            seen[c.name] = view
            containers.append(c)
            continue
        why = spec.why_twice(c.name, (first.state.name, first.inspected[c.name]), (c.node, view.inspected[c.name]))
        held.setdefault(first.state.name, why)
        held.setdefault(c.node, why)
    return containers, held


def demand_records(usage: Sequence[Usage], previous: Mapping[str, DemandRecord], at: datetime) -> list[DemandRecord]:
    """This observation's demand rows, always what was measured (a `peakpack.cpu` label is only the
    forecast's fallback): the counter delta against the container's previous row ("cgroup"), else
    the one-second sample ("stats"). Every row keeps the counter, for the next delta and for
    per-container energy."""
    rows = []
    for u in usage:
        before = previous.get(u.container)
        delta = cores_between(before, u.node, u.cpu_time_ns, at)
        if delta is None and before is not None:  # moved or restarted since: a new cgroup
            delta = cores_since_start(u.cpu_time_ns, u.started_at, at)
        cpu, interval, source = (delta[0], delta[1], COUNTER) if delta else (u.sample_cores, None, SAMPLE)
        rows.append(DemandRecord(at=at, container=u.container, node=u.node, interval_s=interval, cpu=cpu,
                                 cpu_time_ns=u.cpu_time_ns, memory_mb=u.memory_mb, source=source))
    return rows


#: a container's previous demand row is looked for this many epochs back (an index range of the
#: store, not its whole history); one not seen for longer gets a one-second sample again
PREVIOUS_EPOCHS = 3


def observe_cluster_rows(inventory: Inventory, store: Journal, shell: RemoteShell | None = None, *,
                        bmc_power: PowerProbe, meter: TrafficMeter | None = None,
                        believed_off: frozenset[str] = frozenset()) -> Observation:
    """`observe_cluster` and the rows the epoch's `record` step stores: every container's demand
    since its previous row, its stall, what the nodes' QoS guards did (`pressure.read_qos`) and,
    with a `meter`, the traffic between containers since the previous read. The store is only
    read here. `believed_off`: see `observe_node`."""
    own = shell is None
    shell = shell or RemoteShell(inventory)
    try:
        snapshot, usage, reads = observe_usage(inventory, bmc_power, shell, traffic=meter is not None,
                                               believed_off=believed_off)
        recent = snapshot.taken_at - timedelta(seconds=PREVIOUS_EPOCHS * inventory.cluster.epoch_seconds)
        demand = demand_records(usage, store.demand.latest(since=recent), snapshot.taken_at)
        measured = meter.measure(reads, snapshot.taken_at) if meter is not None else Measured([], [])
        qos = read_qos(inventory, store, shell.pool, shell.call, snapshot, recent=recent)
    finally:
        if own:
            shell.close()
    return Observation(snapshot, demand=tuple(demand), traffic_reads=tuple(measured.reads),
                       traffic_pairs=tuple(measured.pairs), pressure=tuple(qos.pressure),
                       guard_events=tuple(qos.events), events_lost=tuple(qos.lost),
                       outdated_guards=tuple(qos.outdated), notes=tuple(qos.notes))


class Observer:
    """The live observation `serve` and `apply` make each time: nodes seen off last time, or
    switched off by peakpack lately (`switched_off`), are asked to their BMC first."""

    def __init__(self, inventory: Inventory, store: Journal, shell: RemoteShell, bmc_power: PowerProbe,
                 meter: TrafficMeter | None) -> None:
        self.inventory, self.store, self.shell, self.bmc_power, self.meter = inventory, store, shell, bmc_power, meter
        self.off: frozenset[str] = frozenset()  # nodes off at the last observation

    def __call__(self) -> Observation:
        believed_off = self.off | switched_off(self.store, datetime.now(UTC))
        seen = observe_cluster_rows(self.inventory, self.store, self.shell, bmc_power=self.bmc_power,
                                    meter=self.meter, believed_off=believed_off)
        self.off = frozenset(n.name for n in seen.snapshot.nodes if not n.powered)
        return seen

    def sample_traffic(self) -> None:
        """Between observations: the conntrack tables into the next observation's rows."""
        if self.meter is not None:
            sample_traffic(self.inventory, self.shell, self.meter)
