"""Pure parts of migrate/ and power/: names, docker parsers and builders, pinning, IPMI parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from peakpack.migrate.pinning import Cpu, cpuset, parse_lscpu, plan_cpusets
from peakpack.orchestrator.domain.errors import NodeError, PeakpackError, PowerError
from peakpack.orchestrator.domain.inputs import container_name
from peakpack.orchestrator.domain.model import BmcConfig, Container, ContainerClass
from peakpack.orchestrator.observe.cluster import containers_of, parse_inspect, parse_usage
from peakpack.power.ipmi import ipmitool_argv, parse_dcmi, parse_status

INSPECT = [{
    "Id": "abc123", "Name": "/web-1",
    "Config": {"Image": "app:1", "Cmd": ["sh", "-c", "x"], "Entrypoint": None, "Env": ["PATH=/bin", "A=1"],
               "Labels": {"peakpack.cpu": "1.5", "peakpack.class": "devil", "peakpack.group": "shop"},
               "WorkingDir": "", "User": "", "Tty": False},
    "HostConfig": {"NetworkMode": "none", "CpusetCpus": "0", "Memory": 0, "NanoCpus": 0, "Devices": [],
                   "DeviceRequests": None},
    "State": {"Running": True}, "Mounts": [],
}]


@pytest.mark.parametrize("bad", ["x;rm -rf /", "a", "", "-x", "a b", "$(id)", "a/b"])
def test_unsafe_container_names_are_refused(bad: str) -> None:
    with pytest.raises(PeakpackError, match="CONTAINER"):
        container_name(bad)


def test_observer_reads_declared_demand_from_labels() -> None:
    usage = parse_usage("node-1", "# 10.0\nweb-1 0 20971520\n# 11.0\nweb-1 125000000 20971520\n")
    [c] = containers_of("node-1", parse_inspect("node-1", json.dumps(INSPECT)), usage)
    assert c.declared  # the forecast's fallback until the container has history
    assert (c.cpu, c.memory_mb, c.cls, c.group, c.node) == (1.5, 20.0, ContainerClass.DEVIL, "shop", "node-1")
    assert usage["web-1"].sample_cores == 0.125
    with pytest.raises(NodeError, match="node-1"):
        containers_of("node-1", parse_inspect("node-1", "garbage"), usage)


def test_pinning_gives_devils_their_own_cores_on_distinct_caches() -> None:
    # two sockets, each with its own L3, two cores each
    cpus = [Cpu(i, i, i // 2, i // 2) for i in range(4)]
    cs = [Container("d1", "n", 1, 0, cls=ContainerClass.DEVIL), Container("d2", "n", 1, 0, cls=ContainerClass.DEVIL),
          Container("t1", "n", 0.2, 0), Container("t2", "n", 0.2, 0)]
    plan = plan_cpusets(cpus, cs)
    socket = {c.id: c.socket for c in cpus}
    d1, d2 = int(plan["d1"]), int(plan["d2"])
    assert socket[d1] != socket[d2]
    assert plan["t1"] == plan["t2"] and not {d1, d2} & {int(x) for x in plan["t1"].split(",")}
    assert plan_cpusets(cpus, cs) == plan  # deterministic


def test_lscpu_and_cpuset_syntax() -> None:
    cpus = parse_lscpu("n", "# comment\n0,0,0,0:0:0:0\n1,1,0,1:1:1:0\n")
    assert [c.llc for c in cpus] == [0, 0]
    assert cpuset([5, 0, 1, 2]) == "0-2,5" and cpuset([3]) == "3"
    with pytest.raises(NodeError):
        parse_lscpu("n", "")


def test_ipmitool_never_gets_the_password_on_its_command_line(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    argv = ipmitool_argv(BmcConfig("10.0.0.1", 623, "admin", pw, 17), "chassis", "power", "status")
    assert "s3cret" not in " ".join(argv) and "-P" not in argv
    assert argv[argv.index("-f") + 1] == str(pw) and argv[argv.index("-C") + 1] == "17"
    with pytest.raises(PowerError, match="password_file"):
        ipmitool_argv(BmcConfig("10.0.0.1"), "chassis", "power", "status")


def test_ipmi_answers_are_parsed_or_refused() -> None:
    assert parse_status("Chassis Power is on\n") is True and parse_status("Chassis Power is off") is False
    with pytest.raises(ValueError):
        parse_status("Error: something")
    assert parse_dcmi("    Instantaneous power reading:   142 Watts\n") == 142.0
    assert parse_dcmi("DCMI request failed") is None


def test_pinning_is_stable_when_measured_demand_wobbles() -> None:
    cpus = [Cpu(i, i, 0, 0) for i in range(2)]
    first = plan_cpusets(cpus, [Container("b", "n", 0.9, 0, cls=ContainerClass.DEVIL),
                                Container("a", "n", 0.4, 0, cls=ContainerClass.DEVIL)])
    again = plan_cpusets(cpus, [Container("b", "n", 0.3, 0, cls=ContainerClass.DEVIL),
                                Container("a", "n", 1.0, 0, cls=ContainerClass.DEVIL)], current=first)
    assert again == first and first["a"] != first["b"]
