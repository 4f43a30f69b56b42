"""Addresses that move with their container, the pure parts: which networks span the nodes'
segment, what a container's clients see (`Clients`), the target refused where its address is
taken or its network missing, the create body asking for the same addresses, the ports probed at
them, the migration's own TCP lines, what settling reads back from the journal; and the `on_moved`
hook, run for real (a document on stdin, a failure and a hang that undo nothing)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from peakpack.migrate import spec
from peakpack.migrate.moved import document, reached, run_hook
from peakpack.migrate.runc_conf import tcp_lines
from peakpack.migrate.settle import MigrationFacts
from peakpack.orchestrator.domain.model import Clients
from peakpack.orchestrator.domain.states import MigrationState

LAN = {"Name": "lan", "Driver": "macvlan", "Options": {"parent": "eth0"},
       "IPAM": {"Config": [{"Subnet": "10.0.0.0/24", "IPRange": "10.0.0.64/28"}]}, "Containers": {}}
BRIDGE = {"Name": "back", "Driver": "bridge", "IPAM": {"Config": [{"Subnet": "172.30.0.0/24"}]}, "Containers": {}}


def container(*networks: str, ports: dict[str, Any] | None = None) -> dict[str, Any]:
    addresses = {"lan": ("10.0.0.70", "02:42:0a:00:00:46"), "back": ("172.30.0.5", "02:42:ac:1e:00:05"),
                 "none": ("", "")}
    return {"Id": "0123456789abcdef", "Name": "/mc", "State": {"Running": True, "Pid": 42},
            "Config": {"Image": "mc"}, "HostConfig": {"NetworkMode": networks[0], "PortBindings": ports or {}},
            "NetworkSettings": {"Networks": {n: {"IPAddress": addresses[n][0], "MacAddress": addresses[n][1],
                                                 "IPAMConfig": None, "Aliases": ["0123456789ab"]}
                                             for n in networks}}}


def facts(*nets: dict[str, Any]) -> spec.NodeFacts:
    return spec.NodeFacts(networks={n["Name"]: n for n in nets})


def test_macvlan_and_l2_ipvlan_span_the_segment_bridges_and_l3_ipvlan_do_not() -> None:
    assert spec.spans_segment(LAN)
    assert spec.spans_segment({"Driver": "ipvlan", "Options": {"parent": "eth0"}})  # L2 is ipvlan's default
    assert not spec.spans_segment({"Driver": "ipvlan", "Options": {"ipvlan_mode": "l3"}})
    assert not spec.spans_segment(BRIDGE) and not spec.spans_segment(None)


def test_what_clients_see_follows_the_networks() -> None:
    here = {"lan": LAN, "back": BRIDGE}
    assert spec.clients(container("lan"), here) is Clients.KEPT
    assert spec.clients(container("lan", "back"), here) is Clients.SAME_ADDRESS
    assert spec.clients(container("back"), here) is Clients.ELSEWHERE
    assert spec.clients(container("none"), here) is Clients.NONE
    assert [e.ipv4 for e in spec.moving_endpoints(container("lan", "back"), here)] == ["10.0.0.70"]
    assert Clients.KEPT.says("node-2") == "its clients keep their connections (its address moves with it)"
    assert Clients.ELSEWHERE.says("node-2") == "its clients must reconnect at node-2's address"


def test_a_target_using_the_address_or_lacking_the_network_is_refused_in_one_line() -> None:
    d = container("lan")
    taken = {**LAN, "Containers": {"abc": {"Name": "cache-2", "IPv4Address": "10.0.0.70/24", "IPv6Address": ""}}}
    free = {**LAN, "Containers": {"abc": {"Name": "cache-3", "IPv4Address": "10.0.0.81/24", "IPv6Address": ""}}}
    assert spec.why_not_onto(d, facts(LAN), facts(taken), "node-2") == (
        "address 10.0.0.70 of network lan is already used on node-2 by cache-2; choose another node or free the "
        "address there")
    assert spec.why_not_onto(d, facts(LAN), facts(free), "node-2") is None
    missing = spec.why_not_onto(d, facts(LAN), facts(), "node-2")
    assert missing is not None and missing.startswith("network lan (macvlan) does not exist on node-2")
    l3 = {**LAN, "Driver": "ipvlan", "Options": {"ipvlan_mode": "l3"}}
    ipvlan = {**LAN, "Driver": "ipvlan", "Options": {}}
    assert spec.why_not_onto(container("lan"), facts(ipvlan), facts(l3), "node-2") == (
        "network lan on node-2 has ipvlan mode l3 instead of l2; make them the same or choose another node")
    # the observer gives the same refusal, so the plan keeps the container off that node
    assert spec.refused_targets(d, "node-1", {"node-1": facts(LAN), "node-2": facts(taken)})[0][0] == "node-2"


def test_the_target_asks_for_the_same_addresses_whoever_chose_them() -> None:
    d = container("lan", "back")
    keep = spec.moving_endpoints(d, {"lan": LAN, "back": BRIDGE})
    body, more = spec.create_body(d, source_address="10.0.0.11", target_address="10.0.0.12", keep=keep)
    assert body["NetworkingConfig"]["EndpointsConfig"]["lan"]["IPAMConfig"] == {"IPv4Address": "10.0.0.70"}
    assert more["back"]["IPAMConfig"] is None  # a bridge's address is the target engine's to choose
    plain, _ = spec.create_body(d, source_address="10.0.0.11", target_address="10.0.0.12")
    assert plain["NetworkingConfig"]["EndpointsConfig"]["lan"]["IPAMConfig"] is None


def test_the_ports_probed_are_those_listened_on_at_the_moving_address() -> None:
    ss = ("LISTEN 0 1024 0.0.0.0:11211 0.0.0.0:*\nLISTEN 0 5 127.0.0.1:9000 0.0.0.0:*\n"
          "LISTEN 0 5 10.0.0.70:81 0.0.0.0:*\nLISTEN 0 5 [::]:8080 [::]:*\nLISTEN 0 5 10.0.0.99:82 0.0.0.0:*\n")
    assert spec.listening_at(ss, ["10.0.0.70"]) == ["10.0.0.70:11211", "10.0.0.70:8080", "10.0.0.70:81"]


def test_each_migration_says_how_its_connections_are_treated_whatever_the_node_file_says() -> None:
    assert tcp_lines(True) == ["no-tcp-close", "tcp-established", "skip-in-flight"]
    assert tcp_lines(False) == ["tcp-close", "no-tcp-established", "skip-in-flight"]


def test_settling_reads_the_moving_addresses_back_and_older_journals_still_load() -> None:
    f = MigrationFacts(clients="kept", moving=({"network": "lan", "ipv4": "10.0.0.70", "ipv6": "fd00::5",
                                               "mac": "02:42:0a:00:00:46"},), listening=("10.0.0.70:81",))
    back = MigrationFacts.loads(f.dumps())
    assert back == f and back.keeps_connections and back.moving_addresses == ("10.0.0.70", "fd00::5")
    old = MigrationFacts.loads(json.dumps({"restart_policy": {"Name": "no"}, "volumes": [], "answering": []}))
    assert old is not None and not old.moving and not old.keeps_connections


def test_the_hook_document_says_where_clients_reached_it_and_reach_it_now() -> None:
    ports = {"80/tcp": [{"HostIp": "", "HostPort": "8080"}]}
    before = reached(container("back", ports=ports), "node-1", "10.0.0.11")
    after = reached(container("back", ports=ports), "node-2", "10.0.0.12")
    doc = document(7, "mc", "node-1", "node-2", MigrationState.SUCCEEDED, None,
                   MigrationFacts(before=before), after)
    assert (doc["event"], doc["runs_on"], doc["moved"], doc["clients"]) == (
        "peakpack.migration.settled", "node-2", True, "reconnect-elsewhere")
    assert doc["before"]["ports"] == [{"address": "10.0.0.11", "port": 8080, "proto": "tcp", "container_port": 80}]
    assert doc["after"]["ports"][0]["address"] == "10.0.0.12"
    assert doc["after"]["addresses"][0]["ipv4"] == "172.30.0.5"
    lost = document(8, "mc", "node-1", "node-2", MigrationState.ROLLBACK_FAILED, "no copy", MigrationFacts(), None)
    assert (lost["runs_on"], lost["moved"], lost["after"]) == (None, False, None)


def test_the_hook_reads_the_document_and_its_failures_are_reported(tmp_path: Path) -> None:
    doc = {"event": "peakpack.migration.settled", "container": "mc"}
    ok, said = asyncio.run(run_hook("cat > got.json; echo told", doc, 10, tmp_path))
    assert (ok, said) == (True, "told")
    assert json.loads((tmp_path / "got.json").read_text()) == doc  # run in the inventory's folder
    assert asyncio.run(run_hook("echo nobody home >&2; exit 3", doc, 10, tmp_path)) == (
        False, "exited 3: nobody home")
    ok, said = asyncio.run(run_hook("sleep 30 & wait", doc, 0.5, tmp_path))  # its whole group is killed
    assert (ok, said) == (False, "killed after 0.5 s")
