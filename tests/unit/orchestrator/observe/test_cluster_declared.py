"""The observer reads a container's declared demand from its labels, and its measured use from the counters."""

from __future__ import annotations

import json

import pytest

from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import ContainerClass
from peakpack.orchestrator.observe.cluster import containers_of, parse_inspect, parse_usage

INSPECT = [{
    "Id": "abc123", "Name": "/web-1",
    "Config": {"Image": "app:1", "Cmd": ["sh", "-c", "x"], "Entrypoint": None, "Env": ["PATH=/bin", "A=1"],
               "Labels": {"peakpack.cpu": "1.5", "peakpack.class": "devil", "peakpack.group": "shop"},
               "WorkingDir": "", "User": "", "Tty": False},
    "HostConfig": {"NetworkMode": "none", "CpusetCpus": "0", "Memory": 0, "NanoCpus": 0, "Devices": [],
                   "DeviceRequests": None},
    "State": {"Running": True}, "Mounts": [],
}]




def test_observer_reads_declared_demand_from_labels() -> None:
    usage = parse_usage("node-1", "# 10.0\nweb-1 0 20971520\n# 11.0\nweb-1 125000000 20971520\n")
    [c] = containers_of("node-1", parse_inspect("node-1", json.dumps(INSPECT)), usage)
    assert c.declared  # the forecast's fallback until the container has history
    assert (c.cpu, c.memory_mb, c.cls, c.group, c.node) == (1.5, 20.0, ContainerClass.DEVIL, "shop", "node-1")
    assert usage["web-1"].sample_cores == 0.125
    with pytest.raises(NodeError, match="node-1"):
        containers_of("node-1", parse_inspect("node-1", "garbage"), usage)
