"""The Docker Engine API of each lab node through EnginePool (docker SDK over SSH, paramiko): every
node is its own engine, containers made through the API are real, and only pinned host keys are
accepted, whatever ~/.ssh says."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from peakpack.lab import Lab
from peakpack.lab.image import LAB_IMAGE
from peakpack.lab.node import start_node, stop_node
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.errors import HostKeyError, NodeError
from peakpack.orchestrator.remote.docker_api import (
    EngineAPIError,
    EngineNotFound,
    EnginePool,
    negotiated_version,
)

pytestmark = pytest.mark.integration
Fn = Callable[[docker.APIClient], Any]


@pytest.fixture()
def pool(clean_lab: Lab) -> Iterator[EnginePool]:
    pool = EnginePool(load_inventory(clean_lab.inventory_path))
    yield pool
    pool.close()


def call(pool: EnginePool, node: str, fn: Fn, timeout: float = 60) -> Any:
    return asyncio.run(pool.call(node, fn, timeout=timeout))


def call_or_none(pool: EnginePool, node: str, fn: Fn) -> Any:
    return asyncio.run(pool.call_or_none(node, fn))


def names(lab: Lab, node: str) -> list[str]:
    proc = lab.exec(node, ["docker", "ps", "--format", "{{.Names}}"])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def inventory_pinning(lab: Lab, tmp_path: Path, node: str, key: str | None) -> Path:
    """A copy of the lab's inventory whose known_hosts pins `key` for `node` (None: no line)."""
    address = lab.node(node).address
    pinned = [line for line in (lab.layout.keys / "known_hosts").read_text().splitlines()
              if not line.startswith(f"{address} ")]
    if key is not None:
        pinned.append(f"{address} {key}")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("".join(f"{line}\n" for line in pinned))
    copy = lab.dir / f"engine-{tmp_path.name}.toml"  # beside the original: its relative paths hold
    text = lab.inventory_path.read_text()
    copy.write_text(text.replace('"keys/known_hosts"', f'"{known_hosts}"'))
    return copy


def other_key(tmp_path: Path) -> str:
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")]
    subprocess.run(keygen, check=True)
    return " ".join((tmp_path / "other.pub").read_text().split()[:2])


def test_each_node_is_its_own_engine(clean_lab: Lab, pool: EnginePool) -> None:
    info = {}
    for node in ("node-1", "node-2"):
        assert call(pool, node, lambda api: api.ping()) is True
        server = call(pool, node, lambda api: api.version(api_version=False))
        negotiated = call(pool, node, lambda api: api.api_version)
        assert negotiated == negotiated_version(server["ApiVersion"])
        info[node] = call(pool, node, lambda api: api.info())
        assert Path(info[node]["DockerRootDir"]) == clean_lab.node(node).dir / "docker"
    # not info["ID"]: dockerd 20.10 derives it from /etc/docker/key.json, which the lab's
    # daemons share
    assert info["node-1"]["DockerRootDir"] != info["node-2"]["DockerRootDir"]


def test_containers_made_through_the_api_are_real(clean_lab: Lab, pool: EnginePool) -> None:
    def create(api: docker.APIClient) -> str:
        container = api.create_container(LAB_IMAGE, ["sleep", "1000"], name="engine-c1",
                                         host_config=api.create_host_config(network_mode="none"))
        api.start(container["Id"])
        return container["Id"]

    cid = call(pool, "node-2", create)
    try:
        assert names(clean_lab, "node-2") == ["engine-c1"]
        assert names(clean_lab, "node-1") == []
        found = asyncio.run(pool.inspect_container_or_none("node-2", "engine-c1"))
        assert found is not None and found["Id"] == cid and found["State"]["Running"]
        assert asyncio.run(pool.inspect_container_or_none("node-1", "engine-c1")) is None
        with pytest.raises(EngineNotFound):  # the engine's answers reach the caller as they are
            call(pool, "node-1", lambda api: api.inspect_container("engine-c1"))
        with pytest.raises(EngineAPIError, match="Conflict"):
            call(pool, "node-2", lambda api: api.remove_container(cid))
        assert call_or_none(pool, "node-2", lambda api: api.inspect_image("no/such:image")) is None
        image = call_or_none(pool, "node-2", lambda api: api.inspect_image(LAB_IMAGE))
        assert image is not None and image["Id"] == found["Image"]
        # a call that outlives its timeout is a NodeError (and its thread ends: asyncio.run waits
        # for it); the next call reconnects
        with pytest.raises(NodeError, match="node-2: Engine API call did not finish within 1 s"):
            call(pool, "node-2", lambda api: api.wait(cid), timeout=1)
        assert call(pool, "node-2", lambda api: api.inspect_container(cid))["State"]["Running"]
    finally:
        call(pool, "node-2", lambda api: api.remove_container(cid, force=True))
    assert names(clean_lab, "node-2") == []


def test_only_the_pinned_host_key_is_accepted(clean_lab: Lab, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    lab = clean_lab
    # a home whose known_hosts has the nodes' real keys and whose ssh config sends every host
    # elsewhere: neither may be consulted
    ssh_home = tmp_path / "home" / ".ssh"
    ssh_home.mkdir(parents=True)
    (ssh_home / "known_hosts").write_text((lab.layout.keys / "known_hosts").read_text())
    (ssh_home / "config").write_text("Host *\n  HostName 192.0.2.1\n  Port 2222\n  User nobody\n")
    monkeypatch.setenv("HOME", str(ssh_home.parent))

    forged_inventory = inventory_pinning(lab, tmp_path, "node-2", other_key(tmp_path))
    forged = EnginePool(load_inventory(forged_inventory))
    try:
        with pytest.raises(HostKeyError, match="node node-2: host key does not match"):
            call(forged, "node-2", lambda api: api.ping())
        assert call(forged, "node-1", lambda api: api.ping()) is True  # the other keys still match
    finally:
        forged.close()

    unpinned = EnginePool(load_inventory(inventory_pinning(lab, tmp_path, "node-3", None)))
    try:
        with pytest.raises(HostKeyError, match="node node-3: no host key for"):
            call(unpinned, "node-3", lambda api: api.ping())
    finally:
        unpinned.close()


def test_a_powered_off_node_is_a_node_error_until_it_is_back(clean_lab: Lab,
                                                             pool: EnginePool) -> None:
    node = clean_lab.node("node-3")
    assert call(pool, "node-3", lambda api: api.ping()) is True
    stop_node(node)
    with pytest.raises(NodeError, match="node node-3: "):
        call(pool, "node-3", lambda api: api.ping())
    start_node(node)
    assert call(pool, "node-3", lambda api: api.ping()) is True  # reconnected without forget()
