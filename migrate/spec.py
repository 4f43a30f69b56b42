"""What a container is, read from its `docker inspect` document, and what its copy on another node
must be. Pure: the observer, the planner's eligibility and migration preflight all call these, so
"can this container move" is answered by one rule, and the target is created from what the
operator gave (Config, HostConfig, networks), not from a hand-picked argv.

Movable means CRIU plus copies can carry everything the container depends on: its memory (the
checkpoint), its writable layer and local named volumes (copied node to node), its networks
(re-created on the target) and published ports (bound on the target). Things that stay tied to
one host (devices, GPUs, the host's network/PID/IPC namespaces, bind mounts of host paths, volumes
of other drivers, a volume shared with another container) make it immovable, with a reason. So
does an owner that would start it again where it was (`owners`: compose, swarm, Kubernetes, Nomad,
ECS), unless the operator has made compose deploy where it runs and says so (`peakpack.migrate=true`).
"""

from __future__ import annotations

import copy
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import Clients, runs_twice
from peakpack.orchestrator.domain.placement import port_clashes

from . import owners

#: the operator's word on moving a container: `false` keeps it where it is; `true` lets a container
#: that compose owns move (the operator has put the project on every node and deploys it through
#: `peakpack compose up`); nothing else is understood, so a typo keeps the container where it is
MIGRATE_LABEL = "peakpack.migrate"
#: label saying the container's bind-mounted paths are shared storage present on every node
SHARED_PATHS_LABEL = "peakpack.shared-paths"
#: networks every engine has; never created or removed by a migration
BUILTIN_NETWORKS = frozenset({"bridge", "host", "none", "default"})
#: drivers whose networks put containers on the nodes' own segment (their LAN or VLAN), so that the
#: same network on every node lets an address move from node to node with its container
SEGMENT_DRIVERS = frozenset({"macvlan", "ipvlan"})

Inspect = Mapping[str, Any]


@dataclass(frozen=True)
class VolumeUse:
    name: str
    destination: str
    driver: str


def name_of(d: Inspect) -> str:
    return str(d["Name"]).lstrip("/")


def labels(d: Inspect) -> Mapping[str, str]:
    return d["Config"].get("Labels") or {}


def volumes(d: Inspect) -> list[VolumeUse]:
    """Named and anonymous volumes the container mounts (bind mounts and tmpfs are not volumes)."""
    return [VolumeUse(m["Name"], m["Destination"], m.get("Driver") or "local")
            for m in d.get("Mounts") or () if m.get("Type") == "volume"]


def bind_sources(d: Inspect) -> list[str]:
    return [m["Source"] for m in d.get("Mounts") or () if m.get("Type") == "bind"]


def published_ports(d: Inspect) -> tuple[str, ...]:
    """Host ports the container publishes, as 'PORT/PROTO' (the host side, which must be free on
    the node it runs on)."""
    found = set()
    for spec, bindings in (d["HostConfig"].get("PortBindings") or {}).items():
        proto = spec.partition("/")[2] or "tcp"
        for b in bindings or ():
            if b.get("HostPort"):
                found.add(f"{b['HostPort']}/{proto}")
    return tuple(sorted(found))


def port_bindings(d: Inspect, node_address: str) -> list[dict[str, Any]]:
    """Where clients reach the container's published ports: the host address (the node's own when
    the binding names none), host port, protocol and the container's port."""
    found = []
    for spec, bindings in sorted((d["HostConfig"].get("PortBindings") or {}).items()):
        port, _, proto = spec.partition("/")
        for b in bindings or ():
            if b.get("HostPort"):
                found.append({"address": b.get("HostIp") if b.get("HostIp") not in (None, "", "0.0.0.0", "::")
                              else node_address, "port": int(b["HostPort"]), "proto": proto or "tcp",
                              "container_port": int(port)})
    return found


def probe_addresses(d: Inspect, ports: Iterable[str]) -> tuple[str, ...]:
    """'ADDRESS:PORT' where the server behind each of `ports` ('PORT/tcp', of `published_ports`)
    that `d` publishes is reached from its node: the container's own address and port, since the
    node's published port is Docker's proxy, which accepts connections whether or not the server
    behind it still does."""
    addresses = [n.get("IPAddress") for n in (d["NetworkSettings"].get("Networks") or {}).values()]
    address = next((a for a in addresses if a), None)
    found = set()
    for spec, bindings in (d["HostConfig"].get("PortBindings") or {}).items():
        port, _, proto = spec.partition("/")
        if address and any(f"{b.get('HostPort')}/{proto or 'tcp'}" in ports for b in bindings or ()):
            found.add(f"{address}:{port}")
    return tuple(sorted(found))


def user_networks(d: Inspect) -> list[str]:
    """User-defined networks the container is attached to (to be present on the target)."""
    return sorted(n for n in (d["NetworkSettings"].get("Networks") or {}) if n not in BUILTIN_NETWORKS)


@dataclass(frozen=True)
class Endpoint:
    """A container's addresses on one network ("" where it has none)."""

    network: str
    ipv4: str
    ipv6: str
    mac: str

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(a for a in (self.ipv4, self.ipv6) if a)

    def to_json(self) -> dict[str, str]:
        return {"network": self.network, "ipv4": self.ipv4, "ipv6": self.ipv6, "mac": self.mac}


def endpoints(d: Inspect) -> tuple[Endpoint, ...]:
    """The container's addresses, network by network (networks that gave it none left out)."""
    found = []
    for name, ep in sorted((d["NetworkSettings"].get("Networks") or {}).items()):
        e = Endpoint(name, str(ep.get("IPAddress") or ""), str(ep.get("GlobalIPv6Address") or ""),
                     str(ep.get("MacAddress") or ""))
        if e.addresses:
            found.append(e)
    return tuple(found)


def spans_segment(net: Inspect | None) -> bool:
    """A network whose containers sit on the nodes' shared segment: macvlan (every mode bridges
    onto the parent's L2), or ipvlan in L2 mode (its L3 modes route per node)."""
    if net is None or (net.get("Driver") or "") not in SEGMENT_DRIVERS:
        return False
    return net.get("Driver") == "macvlan" or (net.get("Options") or {}).get("ipvlan_mode", "l2") == "l2"


def moving_endpoints(d: Inspect, networks: Mapping[str, Inspect]) -> tuple[Endpoint, ...]:
    """The container's endpoints whose addresses move with it: those on networks (as its node's
    engine describes them) that span the segment."""
    return tuple(e for e in endpoints(d) if spans_segment(networks.get(e.network)))


def clients(d: Inspect, networks: Mapping[str, Inspect]) -> Clients:
    """What the container's clients see when it moves (`Clients`): its connections are kept only
    when every address it has moves with it (a restored connection needs its address there)."""
    every = endpoints(d)
    moving = moving_endpoints(d, networks)
    if not every:
        return Clients.NONE
    if len(moving) == len(every):
        return Clients.KEPT
    return Clients.SAME_ADDRESS if moving else Clients.ELSEWHERE


def listening_at(ss_listening: str, addresses: Iterable[str]) -> list[str]:
    """'ADDRESS:PORT' for each of `addresses` and each TCP port a listener accepts on there, from
    `ss -Hltn` run in the container's network namespace (a wildcard listener accepts on all)."""
    found = set()
    for line in ss_listening.splitlines():
        words = line.split()
        if len(words) < 4:
            continue
        host, _, port = words[3].rpartition(":")
        for a in addresses:
            if host in ("*", "0.0.0.0", "[::]", a) and port.isdigit():
                found.add(f"{a}:{port}")
    return sorted(found)


def address_user(net: Inspect, e: Endpoint) -> str | None:
    """The container (name) that already uses one of `e`'s addresses on `net`, a network of another
    node (each node's engine keeps its own address book), or None."""
    mine = set(e.addresses)
    for ep in (net.get("Containers") or {}).values():
        theirs = {str(ep.get(k) or "").partition("/")[0] for k in ("IPv4Address", "IPv6Address")}
        if mine & theirs:
            return str(ep.get("Name") or "another container")
    return None


def repository_tag(ref: str) -> tuple[str, str] | None:
    """'registry:5000/app:1.2' -> ('registry:5000/app', '1.2'); 'app' -> ('app', 'latest'); None for
    an image ID or a digest reference, which name one image already and take no tag."""
    if ref.startswith("sha256:") or "@" in ref:
        return None
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag:
        return ref, "latest"
    return name, tag


def why_immovable(d: Inspect, node: str | None = None) -> str | None:
    """Why this container cannot be live-migrated on its own, or None if it can (`node`: where it
    runs, named in an owner's reason)."""
    lab = labels(d)
    host = d["HostConfig"]
    choice = lab.get(MIGRATE_LABEL)
    if choice is not None and str(choice).lower() not in ("true", "false"):
        return (f"label {MIGRATE_LABEL}: {str(choice)[:40]!r} is neither true nor false; use false (it stays) "
                "or true (a compose container may move)")
    if choice is not None and str(choice).lower() == "false":
        return f"opted out with the label {MIGRATE_LABEL}=false"
    owner = owners.owner_of(lab, node)
    if owner is not None and not (owner.opt_in and choice is not None):
        return owner.why_stays()
    if host.get("Devices"):
        return "it uses host devices, which stay on their node"
    if host.get("DeviceRequests"):
        return "it requests GPUs or other devices, which CRIU cannot move"
    for key, what in (("NetworkMode", "network"), ("PidMode", "PID namespace"), ("IpcMode", "IPC namespace")):
        mode = str(host.get(key) or "")
        if mode == "host":
            return f"it uses the host's {what} (--{what.split()[0].lower()} host)"
        if mode.startswith("container:"):
            return f"it shares the {what} of another container ({mode})"
    binds = bind_sources(d)
    if binds and lab.get(SHARED_PATHS_LABEL, "").lower() != "true":
        return (f"it bind-mounts {binds[0]} from its node; use a named volume, or label it "
                f"{SHARED_PATHS_LABEL}=true if the path is shared storage on every node")
    for v in volumes(d):
        if v.driver != "local":
            return (f"volume {v.name} uses the {v.driver} driver; only local volumes are copied: use a local "
                    f"volume, or mount that storage on every node and bind-mount it with the label "
                    f"{SHARED_PATHS_LABEL}=true")
    driver = d.get("GraphDriver", {}).get("Name")
    if driver and driver != "overlay2":
        return f"its writable layer is on the {driver} storage driver; only overlay2 layers are copied"
    return None


def immovable(containers: Iterable[Inspect], node: str | None = None) -> dict[str, str]:
    """Every container of one node (`node`, named in owners' reasons) that cannot move, with its
    reason: the per-container rule, plus volumes shared between containers (moving one would split
    them) and compose services with several containers here (a deploy runs a service on one node)."""
    items = list(containers)
    users: dict[str, list[str]] = defaultdict(list)
    replicas: dict[tuple[str, str], list[str]] = defaultdict(list)
    for d in items:
        for v in volumes(d):
            users[v.name].append(name_of(d))
        if (c := owners.compose_of(labels(d))) is not None:
            replicas[c.project, c.service].append(name_of(d))
    result = {}
    for d in items:
        name = name_of(d)
        why = why_immovable(d, node) or _split(name, volumes(d), users, owners.compose_of(labels(d)), replicas)
        if why is not None:
            result[name] = why
    return result


def _split(name: str, mounted: list[VolumeUse], users: Mapping[str, list[str]], compose: owners.Compose | None,
           replicas: Mapping[tuple[str, str], list[str]]) -> str | None:
    """Why moving this otherwise movable container alone would split what belongs together."""
    shared = next((v.name for v in mounted if len(users[v.name]) > 1), None)
    if shared is not None:
        others = ", ".join(sorted(set(users[shared]) - {name}))
        return f"volume {shared} is shared with {others}; they can only move together"
    if compose is not None and len(siblings := replicas[compose.project, compose.service]) > 1:
        return (f"service {compose.service} of docker compose project {compose.project} has {len(siblings)} "
                f"containers here ({', '.join(sorted(siblings))}); a deploy runs a service on one node, so it "
                "moves only at scale 1")
    return None


def compose_files(d: Inspect) -> list[str]:
    """The project files of a compose container allowed to move: a deploy runs where it runs, so
    they must be on its target too (empty for any other container)."""
    c = owners.compose_of(labels(d))
    return list(c.config_files) if c is not None and why_immovable(d) is None else []


def needed_paths(d: Inspect) -> list[str]:
    """Paths that must exist on a target for this container: its shared bind sources and, for a
    compose container, its project's files."""
    return [*bind_sources(d), *compose_files(d)]


#: a `Created` time as the engine writes it (RFC 3339, UTC, up to nanoseconds)
CREATED = re.compile(r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?")


def created(d: Inspect) -> tuple[str, str, int]:
    """When the container was created, as (date, time, nanoseconds): ordered, and shown to the second."""
    m = CREATED.match(str(d.get("Created") or ""))
    return (m.group(1), m.group(2), int((m.group(3) or "0").ljust(9, "0"))) if m else ("", "", 0)


def why_twice(name: str, first: tuple[str, Inspect], second: tuple[str, Inspect]) -> str:
    """Why both nodes running a container of this name (`(node, inspect)` each) are held: which
    copy is the newer, the owner that started it again (from its labels, else the other copy's),
    and what the operator does about it. Both keep running until the operator keeps one."""
    (_, old), (newer, new) = sorted((first, second), key=lambda c: created(c[1]))
    owner = owners.owner_of(labels(new), newer) or owners.owner_of(labels(old), newer)
    who = (f"{owner.what} started it again on {newer}" if owner is not None else
           f"nothing on it names what started it again on {newer} (no owner's labels: a systemd unit or a script "
           f"that runs `docker run --name {name}`?)")
    date, time, _ = created(new)
    after = owner.after if owner is not None else f"label it `{MIGRATE_LABEL}=false` if something starts it by name"
    return (f"{runs_twice(name, first[0], second[0])}: {who}; keep one copy (`docker rm -f "
            f"{name}` on the node whose copy goes; the one on {newer} is the newer, created {date} {time} UTC), "
            f"then {after}")


@dataclass(frozen=True)
class NodeFacts:
    """What one node holds that decides whether a container may move onto it (or, for its own
    node, what the container takes along): volume names, networks (inspect documents: driver and
    subnets), CPU flags, and which of the asked-about shared paths exist there."""

    volumes: frozenset[str] = frozenset()
    networks: Mapping[str, Inspect] = field(default_factory=dict)
    cpu_flags: frozenset[str] = frozenset()
    paths: frozenset[str] = frozenset()


#: NodeFacts read over SSH (`sh -c NODE_FACTS_SCRIPT sh PATH...`): the CPU flags line, "volume NAME"
#: lines, "path PATH" for each argument that exists, then "networks" and `docker network inspect`
#: of every network. A failing docker call fails the script: an error is not an empty node.
NODE_FACTS_SCRIPT = r"""
flags=$(grep -m1 '^flags' /proc/cpuinfo)
vols=$(docker volume ls -q) || exit 1
nets=$(docker network ls -q) || exit 1
echo "$flags"
for v in $vols; do echo "volume $v"; done
for p in "$@"; do if [ -e "$p" ]; then echo "path $p"; fi; done
echo networks
docker network inspect $nets || exit 1
"""


def node_facts_argv(paths: Iterable[str] = ()) -> list[str]:
    """The command that reads a node's NodeFacts, asking which of `paths` exist there."""
    return ["sh", "-c", NODE_FACTS_SCRIPT, "sh", *paths]


def parse_node_facts(node: str, text: str) -> NodeFacts:
    """NODE_FACTS_SCRIPT's output on `node` -> NodeFacts."""
    head, sep, nets = text.partition("\nnetworks\n")
    try:
        networks = {n["Name"]: n for n in json.loads(nets)} if sep else None
    except (ValueError, KeyError, TypeError):
        networks = None
    if networks is None or not all(_network_shape_ok(n) for n in networks.values()):
        raise NodeError(node, f"its volumes and networks answered something unexpected: {text[:80]!r}")
    flags: set[str] = set()
    vols: set[str] = set()
    paths: set[str] = set()
    for line in head.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "volume":
            vols.add(rest)
        elif kind == "path":
            paths.add(rest)
        elif line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return NodeFacts(frozenset(vols), networks, frozenset(flags), frozenset(paths))


def _network_shape_ok(n: Any) -> bool:
    """The fields `same_network` reads have the Engine API's shapes: garbage is the node's error,
    never a traceback in the planner."""
    if not isinstance(n, dict) or not isinstance(n.get("Name"), str):
        return False
    ipam = n.get("IPAM") or {}
    configs = (ipam.get("Config") or []) if isinstance(ipam, dict) else None
    return (isinstance(configs, list) and isinstance(n.get("Driver") or "", str)
            and all(isinstance(c, dict) and isinstance(c.get("Subnet", ""), str) for c in configs))


def shared_paths(containers: Iterable[Inspect]) -> list[str]:
    """The bind sources that must exist on a target (only movable containers have any: those
    labelled with SHARED_PATHS_LABEL) and the project files of compose containers allowed to move."""
    return sorted({p for d in containers if why_immovable(d) is None for p in needed_paths(d)})


def why_not_onto(d: Inspect, here: NodeFacts, there: NodeFacts, target: str) -> str | None:
    """Why a movable container cannot move onto `target` (facts `there`) from its node (facts
    `here`), one line naming the fix; None if it can. Preflight refuses these moves and the
    planner's eligibility never proposes them."""
    missing = here.cpu_flags - there.cpu_flags
    if missing:
        return (
            f"{target} lacks CPU features the container may use: {' '.join(sorted(missing)[:6])}; choose another node"
        )
    for path in bind_sources(d):
        if path not in there.paths:
            return f"shared path {path} does not exist on {target}; mount the shared storage there first"
    for path in compose_files(d):
        if path not in there.paths:
            return (f"{path} of its docker compose project does not exist on {target}; put the project's files "
                    "there first (its deploys run where it runs)")
    for name in user_networks(d):
        ours, theirs = here.networks.get(name), there.networks.get(name)
        if ours is not None and theirs is not None and (differs := same_network(ours, theirs)) is not None:
            return f"network {name} on {target} has {differs}; make them the same or choose another node"
    for e in moving_endpoints(d, here.networks):
        theirs = there.networks.get(e.network)
        if theirs is None:
            ours = here.networks[e.network]
            return (f"network {e.network} ({ours.get('Driver')}) does not exist on {target}, so {e.addresses[0]} "
                    f"cannot move there; create it on {target} over the same segment (same subnet, parent on "
                    "that segment, an --ip-range of its own) or choose another node")
        if (user := address_user(theirs, e)) is not None:
            return (f"address {e.addresses[0]} of network {e.network} is already used on {target} by {user}; "
                    "choose another node or free the address there")
    for v in volumes(d):
        if v.name in there.volumes:
            return f"volume {v.name} already exists on {target}; remove it there first (the copy would overwrite it)"
    return None


def refused_targets(d: Inspect, node: str, facts: Mapping[str, NodeFacts]) -> tuple[tuple[str, str], ...]:
    """(target, reason) for every other node in `facts` that `why_not_onto` refuses to `d` on `node`."""
    return tuple((t, why) for t, there in sorted(facts.items())
                 if t != node and (why := why_not_onto(d, facts[node], there, t)) is not None)


def ports_in_use(d: Inspect, on_target: Iterable[Inspect]) -> list[str]:
    """Published ports of `d` that a container on the target already publishes."""
    return port_clashes(published_ports(d), {p for other in on_target for p in published_ports(other)})


def create_body(d: Inspect, *, source_address: str, target_address: str,
                keep: Iterable[Endpoint] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Engine API body that creates the same container on another node, and the endpoint
    settings of the networks to connect after creation (the engine takes one at create time).

    Dropped, because they are node-local: the ID, the cpuset (pinning picks one per node), the
    short-ID network alias. Port bindings on the source node's own address move to the target's.
    Every volume is named explicitly, anonymous ones included, so the target mounts the volume the
    data was copied into instead of a new empty one. The endpoints in `keep` (those whose
    addresses move: `moving_endpoints`) ask the target's engine for the very addresses they have,
    whether the operator gave them (`--ip`) or the source's engine chose them; the MAC address
    follows (Docker derives it from the IPv4 address; one the operator gave is in `Config`).
    """
    body: dict[str, Any] = copy.deepcopy(dict(d["Config"]))
    host: dict[str, Any] = copy.deepcopy(dict(d["HostConfig"]))
    host["CpusetCpus"] = ""
    for bindings in (host.get("PortBindings") or {}).values():
        for b in bindings or ():
            if b.get("HostIp") == source_address:
                b["HostIp"] = target_address
    declared = {str(b).split(":")[1] for b in host.get("Binds") or () if ":" in str(b)}
    declared |= {m.get("Target") for m in host.get("Mounts") or ()}
    extra_binds = [f"{v.name}:{v.destination}" + ("" if _rw(d, v.destination) else ":ro")
                   for v in volumes(d) if v.destination not in declared]
    if extra_binds:
        host["Binds"] = [*(host.get("Binds") or ()), *extra_binds]
    body["HostConfig"] = host
    short_id = str(d["Id"])[:12]
    per_net: dict[str, Any] = {}
    kept = {e.network: e for e in keep}
    for net, ep in (d["NetworkSettings"].get("Networks") or {}).items():
        aliases = [a for a in ep.get("Aliases") or () if a != short_id]
        ipam = ep.get("IPAMConfig")
        if net in kept:
            ipam = {**(ipam or {}), **{k: v for k, v in (("IPv4Address", kept[net].ipv4),
                                                          ("IPv6Address", kept[net].ipv6)) if v}}
        per_net[net] = {"Aliases": aliases or None, "IPAMConfig": ipam,
                        "Links": ep.get("Links"), "DriverOpts": ep.get("DriverOpts")}
    mode = str(host.get("NetworkMode") or "")
    first = mode if mode in per_net else ("bridge" if mode == "default" and "bridge" in per_net else None)
    if first is not None:
        body["NetworkingConfig"] = {"EndpointsConfig": {first: per_net.pop(first)}}
    return body, per_net


def _rw(d: Inspect, destination: str) -> bool:
    return next((bool(m.get("RW", True)) for m in d.get("Mounts") or () if m.get("Destination") == destination), True)


def network_create_args(net: Inspect) -> dict[str, Any]:
    """`docker network inspect` of a user-defined network -> kwargs of APIClient.create_network
    that make the same network (driver, subnets, options, labels) on another engine."""
    ipam = net.get("IPAM") or {}
    return {
        "name": net["Name"], "driver": net.get("Driver") or "bridge", "options": net.get("Options") or None,
        "ipam": {"Driver": ipam.get("Driver") or "default", "Config": ipam.get("Config") or [],
                 "Options": ipam.get("Options") or None},
        "internal": bool(net.get("Internal")), "labels": net.get("Labels") or None,
        "enable_ipv6": bool(net.get("EnableIPv6")), "attachable": bool(net.get("Attachable")),
        "check_duplicate": True,
    }


def same_network(a: Inspect, b: Inspect) -> str | None:
    """None when two engines' networks of one name are interchangeable, else what differs."""
    if (a.get("Driver") or "bridge") != (b.get("Driver") or "bridge"):
        return f"driver {b.get('Driver')} instead of {a.get('Driver')}"
    if spans_segment(a) != spans_segment(b):
        mode = [(n.get("Options") or {}).get("ipvlan_mode", "l2") for n in (a, b)]
        return f"ipvlan mode {mode[1]} instead of {mode[0]}"
    subnets = [sorted(c.get("Subnet", "") for c in (n.get("IPAM") or {}).get("Config") or ()) for n in (a, b)]
    if subnets[0] != subnets[1] and subnets[0]:
        return f"subnet {', '.join(subnets[1]) or 'automatic'} instead of {', '.join(subnets[0])}"
    return None
