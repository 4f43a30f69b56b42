"""The one rule for "can this container move" and the target's create body, on inspect documents
shaped like dockerd 20.10's; what preflight refuses about one target (the same rule the observer
applies to every node); and the planner honouring both (immovable containers, published ports,
refused targets) so no plan proposes a move that preflight refuses."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest

from peakpack.migrate import spec
from peakpack.migrate.runc_conf import handles_tcp
from peakpack.migrate.transaction import MIN_CRIU, criu_version
from peakpack.orchestrator.decide import solve as solve_module
from peakpack.orchestrator.decide.planner.problem import Placement
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import (
    ClusterConfig,
    ClusterSnapshot,
    Container,
    Inventory,
    NodeState,
    PowerCurve,
)
from peakpack.orchestrator.domain.placement import eligibility, movers_port_clashes
from peakpack.orchestrator.domain.plan import SolverReport
from tests.support.build import node_spec

SERVICE: dict[str, Any] = {
    "Id": "0123456789abcdef0123", "Name": "/web", "Image": "sha256:feed",
    "State": {"Running": True},
    "Config": {"Hostname": "0123456789ab", "Image": "peakpack/busybox:lab", "Env": ["A=1", "PATH=/bin"],
               "Cmd": ["httpd", "-f"], "Labels": {"team": "shop"}, "ExposedPorts": {"80/tcp": {}}},
    "HostConfig": {"NetworkMode": "appnet", "CpusetCpus": "1", "Memory": 67108864,
                   "RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0},
                   "PortBindings": {"80/tcp": [{"HostIp": "10.0.0.11", "HostPort": "8080"}]},
                   "Binds": ["data:/data"], "Devices": [], "DeviceRequests": None, "PidMode": "", "IpcMode": "private"},
    "Mounts": [{"Type": "volume", "Name": "data", "Source": "/var/lib/docker/volumes/data/_data",
                "Destination": "/data", "Driver": "local", "RW": True},
               {"Type": "volume", "Name": "f00d", "Source": "/var/lib/docker/volumes/f00d/_data",
                "Destination": "/cache", "Driver": "local", "RW": False}],
    "NetworkSettings": {"Networks": {
        "appnet": {"Aliases": ["0123456789ab", "web-alias"], "IPAMConfig": None, "Links": None, "DriverOpts": None},
        "backnet": {"Aliases": ["0123456789ab"], "IPAMConfig": {"IPv4Address": "172.31.0.9"}, "Links": None,
                    "DriverOpts": None}}},
    "GraphDriver": {"Name": "overlay2", "Data": {"UpperDir": "/var/lib/docker/overlay2/x/diff"}},
}


def variant(**changes: Any) -> dict[str, Any]:
    """SERVICE with keys replaced; nested keys joined by '__' ('HostConfig__PidMode')."""
    d = copy.deepcopy(SERVICE)
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = d
        for p in parents:
            target = target[p]
        target[key] = value
    return d


def test_a_service_with_ports_volumes_and_networks_can_move() -> None:
    assert spec.why_immovable(SERVICE) is None
    assert spec.published_ports(SERVICE) == ("8080/tcp",)
    assert spec.user_networks(SERVICE) == ["appnet", "backnet"]


@pytest.mark.parametrize("changes, words", [
    ({"Config__Labels": {"peakpack.migrate": "false"}}, "opted out"),
    ({"HostConfig__Devices": [{"PathOnHost": "/dev/fuse"}]}, "host devices"),
    ({"HostConfig__DeviceRequests": [{"Driver": "nvidia"}]}, "GPUs"),
    ({"HostConfig__NetworkMode": "host"}, "host's network"),
    ({"HostConfig__PidMode": "host"}, "PID namespace"),
    ({"HostConfig__IpcMode": "host"}, "IPC namespace"),
    ({"HostConfig__NetworkMode": "container:abc"}, "another container"),
    ({"Mounts": [{"Type": "bind", "Source": "/srv/app", "Destination": "/app"}]}, "bind-mounts /srv/app"),
    ({"Mounts": [{"Type": "volume", "Name": "nfs1", "Destination": "/x", "Driver": "nfs"}]}, "nfs driver"),
    ({"GraphDriver": {"Name": "vfs", "Data": {}}}, "vfs storage driver"),
])
def test_what_stays_tied_to_its_node_is_immovable_with_a_reason(changes: dict[str, Any], words: str) -> None:
    why = spec.why_immovable(variant(**changes))
    assert why is not None and words in why


def test_shared_paths_label_lets_bind_mounts_move() -> None:
    d = variant(Mounts=[{"Type": "bind", "Source": "/shared/app", "Destination": "/app"}],
                Config__Labels={"peakpack.shared-paths": "true"})
    assert spec.why_immovable(d) is None and spec.bind_sources(d) == ["/shared/app"]


def test_a_volume_shared_by_two_containers_pins_both() -> None:
    other = variant(Name="/worker", Mounts=[SERVICE["Mounts"][0]])
    lone = variant(Name="/lone", Mounts=[])
    assert spec.immovable([SERVICE, other, lone]) == {
        "web": "volume data is shared with worker; they can only move together",
        "worker": "volume data is shared with web; they can only move together",
    }


def test_port_clash_is_found_against_the_targets_containers() -> None:
    other = variant(Name="/other", HostConfig__PortBindings={"81/tcp": [{"HostIp": "", "HostPort": "8080"}]})
    udp = variant(Name="/dns", HostConfig__PortBindings={"53/udp": [{"HostIp": "", "HostPort": "8080"}]})
    assert spec.ports_in_use(SERVICE, [other]) == ["8080/tcp"]
    assert spec.ports_in_use(SERVICE, [udp]) == []


def test_create_body_keeps_every_setting_but_node_local_ones() -> None:
    body, more = spec.create_body(SERVICE, source_address="10.0.0.11", target_address="10.0.0.12")
    host = body.pop("HostConfig")
    endpoints = body.pop("NetworkingConfig")["EndpointsConfig"]
    assert body == SERVICE["Config"]  # hostname, env, labels, command, image, exposed ports: as given
    assert host["CpusetCpus"] == ""  # pinning chooses per node
    assert host["PortBindings"] == {"80/tcp": [{"HostIp": "10.0.0.12", "HostPort": "8080"}]}
    assert host["RestartPolicy"] == SERVICE["HostConfig"]["RestartPolicy"] and host["Memory"] == 67108864
    assert host["Binds"] == ["data:/data", "f00d:/cache:ro"]  # the anonymous volume by name, read-only kept
    assert endpoints == {"appnet": {"Aliases": ["web-alias"], "IPAMConfig": None, "Links": None, "DriverOpts": None}}
    assert more == {"backnet": {"Aliases": None, "IPAMConfig": {"IPv4Address": "172.31.0.9"}, "Links": None,
                                "DriverOpts": None}}
    assert SERVICE["HostConfig"]["CpusetCpus"] == "1"  # the inspect document itself is untouched


@pytest.mark.parametrize("ref, want", [
    ("peakpack/busybox:lab", ("peakpack/busybox", "lab")), ("redis", ("redis", "latest")),
    ("registry:5000/app", ("registry:5000/app", "latest")), ("registry:5000/app:1.2", ("registry:5000/app", "1.2")),
    ("sha256:feed", None), ("app@sha256:feed", None),
])
def test_image_references_split_into_repository_and_tag(ref: str, want: tuple[str, str] | None) -> None:
    assert spec.repository_tag(ref) == want


def test_networks_compare_by_driver_and_subnet() -> None:
    a = {"Name": "appnet", "Driver": "bridge", "IPAM": {"Driver": "default", "Config": [{"Subnet": "172.30.0.0/24"}]}}
    b = copy.deepcopy(a)
    assert spec.same_network(a, b) is None
    b["IPAM"]["Config"] = [{"Subnet": "172.29.0.0/24"}]
    assert "subnet 172.29.0.0/24 instead of 172.30.0.0/24" == spec.same_network(a, b)
    args = spec.network_create_args(a)
    assert (args["name"], args["driver"], args["ipam"]["Config"]) == ("appnet", "bridge", [{"Subnet": "172.30.0.0/24"}])


# -- the per-target rule: what preflight refuses about one target ----------------------------

APPNET = {"Name": "appnet", "Driver": "bridge", "IPAM": {"Config": [{"Subnet": "172.30.0.0/24"}]}}
HERE = spec.NodeFacts(volumes=frozenset({"data", "f00d"}), networks={"appnet": APPNET},
                      cpu_flags=frozenset({"fpu", "sse2", "avx2"}))


@pytest.mark.parametrize(
    "there, words",
    [
        (spec.NodeFacts(cpu_flags=frozenset({"fpu", "sse2"})), "node-2 lacks CPU features the container may use: avx2"),
        (replace(HERE, volumes=frozenset({"data"})), "volume data already exists on node-2; remove it there first"),
        (
            replace(HERE, volumes=frozenset(), networks={"appnet": {**APPNET, "Driver": "macvlan"}}),
            "network appnet on node-2 has driver macvlan instead of bridge; make them the same",
        ),
        (
            replace(
                HERE,
                volumes=frozenset(),
                networks={"appnet": {**APPNET, "IPAM": {"Config": [{"Subnet": "10.9.0.0/16"}]}}},
            ),
            "network appnet on node-2 has subnet 10.9.0.0/16 instead of 172.30.0.0/24",
        ),
    ],
)
def test_a_target_is_refused_with_the_reason_and_the_fix(there: spec.NodeFacts, words: str) -> None:
    assert words in (spec.why_not_onto(SERVICE, HERE, there, "node-2") or "")


def test_a_target_with_the_same_flags_no_clashing_volume_and_the_same_networks_is_fine() -> None:
    missing_networks_are_created = spec.NodeFacts(cpu_flags=frozenset({"fpu", "sse2", "avx2", "avx512f"}))
    assert spec.why_not_onto(SERVICE, HERE, missing_networks_are_created, "node-2") is None
    assert spec.why_not_onto(SERVICE, HERE, replace(HERE, volumes=frozenset()), "node-2") is None


def test_shared_paths_must_exist_on_the_target() -> None:
    shared = variant(Config__Labels={spec.SHARED_PATHS_LABEL: "true"},
                     Mounts=[{"Type": "bind", "Source": "/srv/shop", "Destination": "/srv", "RW": True}])
    assert spec.shared_paths([shared, SERVICE]) == ["/srv/shop"]
    assert spec.shared_paths([variant(Mounts=shared["Mounts"])]) == []  # immovable anyway: never asked
    lacking = spec.NodeFacts(cpu_flags=HERE.cpu_flags)
    assert "shared path /srv/shop does not exist on node-3; mount the shared storage" in (
        spec.why_not_onto(shared, HERE, lacking, "node-3") or "")
    assert spec.why_not_onto(shared, HERE, replace(lacking, paths=frozenset({"/srv/shop"})), "node-3") is None
    facts = {"node-1": HERE, "node-2": replace(lacking, paths=frozenset({"/srv/shop"})), "node-3": lacking}
    assert [t for t, _ in spec.refused_targets(shared, "node-1", facts)] == ["node-3"]


def test_node_facts_are_read_from_the_script_output() -> None:
    text = ("flags\t\t: fpu sse2 avx2\nvolume data\nvolume networks\npath /srv/shop\nnetworks\n"
            + json.dumps([APPNET, {"Name": "bridge", "Driver": "bridge"}]))
    facts = spec.parse_node_facts("node-2", text)
    assert facts.cpu_flags == {"fpu", "sse2", "avx2"} and facts.volumes == {"data", "networks"}
    assert facts.paths == {"/srv/shop"} and set(facts.networks) == {"appnet", "bridge"}
    assert spec.parse_node_facts("node-2", "\nnetworks\n[]") == spec.NodeFacts()  # no flags line (not x86)
    with pytest.raises(NodeError, match="node-2"):
        spec.parse_node_facts("node-2", "Cannot connect to the Docker daemon")
    for garbage in ([{"Name": "x", "IPAM": "s"}], [{"Name": "x", "IPAM": {"Config": [None]}}],
                    [{"Name": "x", "IPAM": {"Config": [{"Subnet": 7}]}}], ["x"], {"Name": "x"}):
        with pytest.raises(NodeError, match=r"node-2: .*unexpected"):  # JSON of the wrong shape: the node's error
            spec.parse_node_facts("node-2", "flags: fpu\nnetworks\n" + json.dumps(garbage))
    argv = spec.node_facts_argv(["/srv/a b"])
    assert argv[:2] == ["sh", "-c"] and argv[-1] == "/srv/a b"  # paths are arguments, never spliced in


def test_criu_versions_and_the_tcp_option_are_read() -> None:
    assert criu_version("Version: 4.2\nGitID: v4.2\n") == (4, 2)
    assert criu_version("Version: 4.1.1\n") == (4, 1, 1) < MIN_CRIU <= criu_version("Version: 4.2.1")
    assert criu_version("criu: command not found") == ()
    assert handles_tcp(b"# peakpack\ntcp-close\n") and handles_tcp(b"  tcp-established  ")
    assert not handles_tcp(b"") and not handles_tcp(b"# tcp-close\nshell-job\n")


# -- the planner honours the rule --------------------------------------------------------------

def cluster(*containers: Container) -> tuple[Inventory, ClusterSnapshot]:
    curve = PowerCurve.linear(100, 250)
    nodes = tuple(node_spec(f"node-{i}", address=f"10.0.0.{i}", curve=curve) for i in (1, 2, 3))
    inv = Inventory(ClusterConfig("t"), nodes)
    return inv, ClusterSnapshot(tuple(NodeState(n.name) for n in nodes), containers)


def test_immovable_containers_stay_and_keep_their_node_on() -> None:
    # three light containers spread thinly: the planner would consolidate them all onto one node
    inv, snap = cluster(Container("a", "node-1", 0.3, 64), Container("b", "node-2", 0.3, 64),
                        Container("pinned", "node-3", 0.3, 64, immovable="it bind-mounts /srv"))
    plan = make_plan(inv, snap, time_limit_s=2)
    moved = {a.container for a in plan.migrations}
    assert "pinned" not in moved and moved  # the others still consolidate...
    assert {a.target for a in plan.migrations} == {"node-3"}  # ...onto the node that has to stay on
    assert "node-3" not in {a.node for a in plan.actions if a.kind.value == "power_off"}


def test_a_published_port_keeps_containers_off_nodes_where_it_is_taken() -> None:
    inv, snap = cluster(Container("web1", "node-1", 0.3, 64, ports=("8080/tcp",)),
                        Container("web2", "node-2", 0.3, 64, ports=("8080/tcp",)),
                        Container("c", "node-3", 0.3, 64))
    assert eligibility(inv, snap) == {"web1": frozenset({"node-1", "node-3"}),
                                      "web2": frozenset({"node-2", "node-3"})}
    plan = make_plan(inv, snap, time_limit_s=2)
    final = snap.placement() | {a.container: a.target for a in plan.migrations}
    assert final["web1"] != final["web2"] and movers_port_clashes(snap, final) == {}
    # the one left behind is explained by the problem solved last, where the clash took node-3 from it
    stayer = next(w for w in ("web1", "web2") if final[w] == snap.placement()[w])
    assert plan.explanations[stayer] == f"stays on {final[stayer]}: it may run on no other node"


def test_a_round_the_safety_net_cut_marks_the_plan_even_when_the_last_round_was_not_cut(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The round that clashed decided what the next may use: if the safety net cut it, another
    run may differ, so the plan says so."""
    inv, snap = cluster(Container("web1", "node-1", 0.3, 64, ports=("8080/tcp",)),
                        Container("web2", "node-2", 0.3, 64, ports=("8080/tcp",)),
                        Container("c", "node-3", 0.3, 64))
    rounds = [({"web1": "node-3", "web2": "node-3", "c": "node-3"}, True),  # a clash, cut by the clock
              ({"web1": "node-3", "web2": "node-2", "c": "node-3"}, False)]

    class Scripted:
        name = "peakpack"

        def solve(self, problem: Any) -> Placement:
            assignment, clock = rounds.pop(0)
            return Placement(assignment, frozenset(assignment.values()),
                             SolverReport("FEASIBLE", 0.0, 0.0, 0.0, stopped_by_clock=clock))

    monkeypatch.setattr(solve_module, "get_policy", lambda name, **_: Scripted())
    plan = make_plan(inv, snap)
    assert not rounds and plan.solver.stopped_by_clock
    assert any("wall-clock safety net" in note for note in plan.notes)


def test_targets_preflight_would_refuse_are_never_planned() -> None:
    # node-3 is where the planner would consolidate everything, but preflight refuses it for "vol"
    inv, snap = cluster(Container("vol", "node-1", 0.3, 64, refused_on=(("node-3", "volume data already exists"),)),
                        Container("b", "node-2", 0.3, 64), Container("big", "node-3", 1.0, 64))
    assert eligibility(inv, snap) == {"vol": frozenset({"node-1", "node-2"})}
    plan = make_plan(inv, snap, time_limit_s=2)
    assert ("vol", "node-3") not in {(a.container, a.target) for a in plan.migrations}


def test_port_clashes_blame_the_container_that_moves() -> None:
    _, snap = cluster(Container("stay", "node-1", 0.3, 64, ports=("80/tcp",)),
                      Container("mover", "node-2", 0.3, 64, ports=("80/tcp",)))
    assert movers_port_clashes(snap, {"stay": "node-1", "mover": "node-1"}) == {"mover": "node-1"}
