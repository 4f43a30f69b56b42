"""Live migration of containers operators actually run, on the real lab: a published port, a named
volume, files in the writable layer, env, labels, restart policy, a user-defined bridge network
and a memory limit all arrive; an open TCP connection is closed and the client reconnects; what
cannot move is refused with its reason and never planned. Nothing is mocked."""

from __future__ import annotations

import http.server
import json
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.faults import kill_dockerd
from peakpack.lab.layout import NodeLayout
from peakpack.lab.node import start_dockerd
from peakpack.migrate.settle import checkpoint_name
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.observe.cluster import observe_cluster
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.power.ipmi import power_probe

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
IMAGE = "peakpack/busybox:lab"
#: httpd serves a page the shell rewrites from its in-memory counter; `id` tells a restarted
#: process (new id, counter from 1) from a restored one (same id, counter larger). busybox httpd
#: closes every connection after one reply, so port 81 serves the same page with keep-alive ($1).
SERVICE = ('id=$RANDOM; i=0; mkdir -p /www; echo in-layer > /layer.txt; httpd -f -p 80 -h /www & '
           'nc -ll -p 81 -e sh -c "$1" & '
           'while :; do i=$((i+1)); echo "$id $i" > /www/index.html; sleep 0.2; done')
#: one connection: answer every request (headers up to the empty line) until the client closes
KEEP_ALIVE = (r"""cr=$(printf '\r'); while read -r req; do while read -r h && [ "${h%$cr}" != "" ]; do :; done; """
              r"""body=$(cat /www/index.html); printf 'HTTP/1.1 200 OK\r\nContent-Length: %s\r\n"""
              r"""Connection: keep-alive\r\n\r\n%s\n' $((${#body}+1)) "$body"; done""")
#: every setting the fidelity test gives beyond the ones start_service always gives
SETTINGS = ("--cap-add", "NET_ADMIN", "--ulimit", "nofile=1024:2048", "--tmpfs", "/scratch:size=8m",
            "--security-opt", "no-new-privileges", "--health-cmd", "test -s /www/index.html",
            "--health-interval", "2s", "--log-opt", "max-size=1m", "--log-opt", "max-file=2")


def peakpack(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "peakpack", *args, "--db", f"sqlite:///{db}"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)


def sh(lab: Lab, node: str, *argv: str) -> str:
    proc = lab.exec(node, list(argv))
    assert proc.returncode == 0, f"{node}: {' '.join(argv)}: {proc.stderr}"
    return proc.stdout


def page(lab: Lab, node: str, tries: int = 50) -> tuple[int, int]:
    """(process id, counter) served on the node's address, port 8080."""
    url = f"http://{lab.node(node).address}:8080/"
    for _ in range(tries):
        try:
            ident, count = urllib.request.urlopen(url, timeout=5).read().decode().split()
            return int(ident), int(count)
        except (OSError, ValueError):
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


def inspect(lab: Lab, node: str, name: str) -> dict[str, Any]:
    [d] = json.loads(sh(lab, node, "docker", "inspect", name))
    return d


def start_service(lab: Lab, node: str, name: str = "web", *extra: str) -> None:
    sh(lab, node, "docker", "network", "create", "--subnet", "172.30.0.0/24", "appnet")
    sh(lab, node, "docker", "volume", "create", "--label", "owner=shop", "appdata")
    sh(lab, node, "docker", "run", "--rm", "-v", "appdata:/data", IMAGE, "sh", "-c", "echo in-volume > /data/v.txt")
    sh(lab, node, "docker", "run", "-d", "--name", name, "--network", "appnet", "--network-alias", "shop",
       "-p", "8080:80", "-p", "8081:81", "-v", "appdata:/data", "-e", "GREETING=hello", "--label", "team=shop",
       "--restart", "unless-stopped", "--memory", "64m", "--hostname", "web-host", *extra, IMAGE, "sh", "-c", SERVICE,
       "sh", KEEP_ALIVE)


def leftovers(lab: Lab, node: str, migration_id: int) -> list[str]:
    """Checkpoint folders of this migration (whole or .partial) anywhere in the node's containers."""
    root = json.loads(sh(lab, node, "docker", "info", "--format", "{{json .DockerRootDir}}"))
    return sh(lab, node, "find", f"{root}/containers", "-maxdepth", "3",
              "-name", f"{checkpoint_name(migration_id)}*").split()


def test_a_service_container_moves_with_everything_it_has(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    start_service(lab, "node-1", "web", *SETTINGS)
    ident, before = page(lab, "node-1")
    time.sleep(1)
    source = inspect(lab, "node-1", "web")
    [appnet] = json.loads(sh(lab, "node-1", "docker", "network", "inspect", "appnet"))
    inv = load_inventory(lab.inventory_path)

    async def write_at_the_last_moment(step: str) -> None:
        if step == "checkpointing":  # after the pre-copy, just before the freeze
            sh(lab, "node-1", "docker", "exec", "web", "sh", "-c", "echo last-second > /last.txt; rm /layer.txt; "
               "echo in-layer-again > /layer.txt; echo more >> /data/v.txt")

    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        result = shell.call(Migration(shell.pool, shell.engines, store, inv, "web", "node-1", "node-2",
                                      hook=write_at_the_last_moment).run())
        steps = {s.step: s for s in store.migrations.steps(result.migration_id)}
    assert result.state is MigrationState.SUCCEEDED, result.reason
    assert steps["precopy"].bytes and steps["transferring"].bytes

    same, after = page(lab, "node-2")
    assert same == ident and after > before  # the same process, its counter continued
    assert sh(lab, "node-2", "docker", "exec", "web", "cat", "/layer.txt", "/last.txt", "/data/v.txt").split() == [
        "in-layer-again", "last-second", "in-volume", "more"]
    target = inspect(lab, "node-2", "web")
    # what the operator gave, as docker recorded it on the source...
    host, config = source["HostConfig"], source["Config"]
    assert (host["CapAdd"], host["Ulimits"], host["Tmpfs"], host["SecurityOpt"]) == (
        ["CAP_NET_ADMIN"], [{"Name": "nofile", "Soft": 1024, "Hard": 2048}], {"/scratch": "size=8m"},
        ["no-new-privileges"])
    assert host["LogConfig"]["Config"] == {"max-size": "1m", "max-file": "2"}
    assert config["Healthcheck"]["Test"] == ["CMD-SHELL", "test -s /www/index.html"]
    assert (host["Memory"], host["RestartPolicy"]["Name"], config["Hostname"]) == (64 << 20, "unless-stopped",
                                                                                  "web-host")
    assert "GREETING=hello" in config["Env"] and config["Labels"]["team"] == "shop"
    # ...is the same on the target, every key of it (only the cpuset is the node's own)
    assert target["Config"] == config  # image, command, env, labels, hostname, healthcheck, ...
    given = {k: v for k, v in host.items() if k != "CpusetCpus"}
    assert {k: target["HostConfig"].get(k) for k in given} == given  # caps, ulimits, tmpfs, logs, ports, ...
    assert set(target["NetworkSettings"]["Networks"]) == {"appnet"}
    assert "shop" in target["NetworkSettings"]["Networks"]["appnet"]["Aliases"]
    [their_appnet] = json.loads(sh(lab, "node-2", "docker", "network", "inspect", "appnet"))
    assert their_appnet["IPAM"]["Config"] == appnet["IPAM"]["Config"] == [{"Subnet": "172.30.0.0/24"}]
    assert target["Image"] == source["Image"]
    assert target["State"]["Running"] and target["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert sh(lab, "node-2", "docker", "exec", "web", "sh", "-c", "ulimit -n; mount | grep -c ' /scratch '").split() \
        == ["1024", "1"]

    # nothing of it is left on the source, and no checkpoint of it (whole or partial) on either node
    assert sh(lab, "node-1", "docker", "ps", "-aq", "--filter", "name=^web$").strip() == ""
    assert "appdata" not in sh(lab, "node-1", "docker", "volume", "ls", "-q").split()
    assert leftovers(lab, "node-1", result.migration_id) == leftovers(lab, "node-2", result.migration_id) == []
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://{lab.node('node-1').address}:8080/", timeout=3)


REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"


def connect(lab: Lab, node: str, port: int) -> socket.socket:
    """A connection to the node's published port, retried as a client does while the service
    (re)starts listening."""
    for _ in range(50):
        try:
            return socket.create_connection((lab.node(node).address, port), timeout=30)
        except ConnectionRefusedError:
            time.sleep(0.2)
    raise AssertionError(f"{node}:{port} refused every connection")


def get(client: socket.socket) -> tuple[int, int]:
    """One keep-alive request on an open connection -> (process id, counter); the connection stays open."""
    client.sendall(REQUEST)
    reply = b""
    while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < int(
            reply.partition(b"Content-Length: ")[2].split(b"\r")[0] or b"1000"):
        chunk = client.recv(4096)
        assert chunk, f"the server closed the connection after {reply!r}"
        reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"Connection: keep-alive" in head, head
    ident, count = body.decode().split()
    return int(ident), int(count)


def test_an_open_connection_is_closed_and_the_client_reconnects(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    start_service(lab, "node-1")
    client = connect(lab, "node-1", 8081)
    ident, first = get(client)
    assert get(client)[0] == ident  # the same connection answers again: it is kept alive
    proc = peakpack("migrate", "web", "--to", "node-2", "--inventory", str(lab.inventory_path), "--json",
                    db=tmp_path / "pp.db")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "SUCCEEDED"
    client.settimeout(30)
    try:  # the old connection did not survive (tcp-close): its next request meets EOF or a reset...
        client.sendall(REQUEST)
        assert client.recv(1024) == b""
    except (ConnectionResetError, BrokenPipeError):
        pass  # ...never a hang: a timeout fails the test
    finally:
        client.close()
    with connect(lab, "node-2", 8081) as again:
        same, after = get(again)  # reconnected to the node the container moved to
    assert same == ident and after > first


def test_what_cannot_move_is_refused_and_never_planned(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    db = tmp_path / "pp.db"
    sh(lab, "node-3", "mkdir", "-p", "/tmp/peakpack-bind-test")
    sh(lab, "node-3", "docker", "run", "-d", "--name", "bound", "-v", "/tmp/peakpack-bind-test:/x",
       "--label", "peakpack.cpu=0.1", "--label", "peakpack.memory_mb=16", IMAGE, "sleep", "3600")
    proc = peakpack("migrate", "bound", "--to", "node-1", "--inventory", str(lab.inventory_path), db=db)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "bind-mounts /tmp/peakpack-bind-test" in proc.stderr and "peakpack.shared-paths=true" in proc.stderr
    assert sh(lab, "node-3", "docker", "ps", "-q", "--filter", "name=^bound$").strip()
    assert sh(lab, "node-1", "docker", "ps", "-aq").strip() == ""

    # movable, but node-2 already has a volume of its volume's name: preflight would refuse node-2
    sh(lab, "node-2", "docker", "volume", "create", "dupe")
    sh(lab, "node-1", "docker", "run", "-d", "--name", "mover", "-v", "dupe:/d", "--label", "peakpack.cpu=0.1",
       "--label", "peakpack.memory_mb=16", IMAGE, "sleep", "3600")
    inv = load_inventory(lab.inventory_path)
    [mover] = [c for c in observe_cluster(inv, power_probe(inv)).containers if c.name == "mover"]
    assert mover.immovable is None and [n for n, _ in mover.refused_on] == ["node-2"]
    assert "volume dupe already exists on node-2; remove it there first" in mover.refused_on[0][1]

    plan = json.loads(peakpack("plan", "--inventory", str(lab.inventory_path), "--json", "--time-limit", "2",
                               db=db).stdout)
    assert [r["container"] for r in plan["immovable"]] == ["bound"]
    assert "bound" not in {a.get("container") for a in plan["actions"]}
    assert ("mover", "node-2") not in {(a.get("container"), a.get("target")) for a in plan["actions"]}
    assert "node-3" not in {a.get("node") for a in plan["actions"] if a["kind"] == "power_off"}


def test_bad_requests_change_nothing(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    db = tmp_path / "pp.db"
    start_service(lab, "node-1")
    sh(lab, "node-2", "docker", "run", "-d", "--name", "squatter", "-p", "8080:80", IMAGE, "httpd", "-f", "-p", "80")
    cases = {
        ("web", "node-2"): "port 8080/tcp is already published on node-2",
        ("nosuch", "node-2"): "CONTAINER: nosuch runs on no node",
        ("web", "node-9"): "--to: node-9 is not in",
    }
    for (name, to), words in cases.items():
        proc = peakpack("migrate", name, "--to", to, "--inventory", str(lab.inventory_path), db=db)
        assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert sh(lab, "node-1", "docker", "ps", "-q", "--filter", "name=^web$").strip()
    assert sh(lab, "node-2", "docker", "ps", "-a", "--format", "{{.Names}}").split() == ["squatter"]
    assert "appdata" not in sh(lab, "node-2", "docker", "volume", "ls", "-q").split()


def test_a_congestion_control_a_node_lacks_is_refused_and_changes_nothing(clean_lab: Lab, tmp_path: Path) -> None:
    """[migration] page_stream_congestion names one no node's kernel has: preflight refuses it in
    one line naming the setting and the fix, before anything changes on either node."""
    lab = clean_lab
    start_service(lab, "node-1")
    inventory = lab.dir / "inventory-nosuch-congestion.toml"  # beside the lab's: its relative paths hold
    text = lab.inventory_path.read_text()
    at = text.index("[migration]")
    end = text.index("\n", at) + 1
    inventory.write_text(text[:end] + 'page_stream_congestion = "nosuch_cc"\n' + text[end:])
    before = [node_state(lab, n) for n in ("node-1", "node-2")]
    try:
        proc = peakpack("migrate", "web", "--to", "node-2", "--inventory", str(inventory), db=tmp_path / "pp.db")
    finally:
        inventory.unlink()
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert ("node node-1: its kernel has no TCP congestion control 'nosuch_cc' ([migration] page_stream_congestion; "
            "it has ") in proc.stderr and "(modprobe tcp_nosuch_cc)" in proc.stderr, proc.stderr
    assert [node_state(lab, n) for n in ("node-1", "node-2")] == before


def refused(lab: Lab, name: str, to: str, db: Path) -> str:
    """`peakpack migrate` refused with exit 2 and one line: that line."""
    proc = peakpack("migrate", name, "--to", to, "--inventory", str(lab.inventory_path), db=db)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


def node_state(lab: Lab, node: str) -> list[list[str]]:
    """What a refused migration must not change on a node: containers, volumes, images, networks
    (each listing sorted: docker lists images created in the same second in either order)."""
    return [
        sorted(sh(lab, node, "docker", *argv).splitlines())
        for argv in (
            ("ps", "-a", "--format", "{{.Names}} {{.ID}} {{.State}}"),
            ("volume", "ls", "-q"),
            ("images", "-q"),
            ("network", "ls", "-q"),
        )
    ]


def test_an_image_that_cannot_be_brought_is_refused(clean_lab: Lab, tmp_path: Path) -> None:
    """An image built on the source only, no registry, and nodes that cannot reach each other
    (the target no longer accepts the source's peer key): there is no way to bring the image."""
    lab = clean_lab
    sh(lab, "node-1", "docker", "run", "--name", "build", IMAGE, "touch", "/built-here")
    sh(lab, "node-1", "docker", "commit", "build", "peakpack/only-here:1")
    sh(lab, "node-1", "docker", "rm", "build")
    sh(lab, "node-1", "docker", "run", "-d", "--name", "local-build", "peakpack/only-here:1", "sleep", "3600")
    keys = lab.node("node-2").dir / "authorized_keys"
    authorized = keys.read_text()
    keys.write_text("".join(line for line in authorized.splitlines(keepends=True) if "peer_ed25519" not in line))
    try:
        before = [node_state(lab, n) for n in ("node-1", "node-2")]
        line = refused(lab, "local-build", "node-2", tmp_path / "pp.db")
        assert "--to: node-2 lacks image peakpack/only-here:1 and it could not be brought from node-1" in line
        assert line.endswith("load it there first")
        assert [node_state(lab, n) for n in ("node-1", "node-2")] == before
    finally:
        keys.write_text(authorized)
        lab.exec("node-1", ["docker", "rm", "-f", "local-build"])
        lab.exec("node-1", ["docker", "rmi", "peakpack/only-here:1"])


class VolumePlugin(http.server.BaseHTTPRequestHandler):
    """Docker's volume plugin protocol, just enough for a volume of another driver: its data lives
    in a folder of the test (on a real cluster, an NFS share)."""

    root = Path()
    made: ClassVar[set[str]] = set()

    def do_POST(self) -> None:
        ask = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        name = ask.get("Name", "")
        where = str(self.root / name)
        verb = self.path.rsplit(".", 1)[-1]
        if verb == "Create":
            (self.root / name).mkdir(exist_ok=True)
            self.made.add(name)
        elif verb == "Remove":
            self.made.discard(name)
        answer = {
            "Activate": {"Implements": ["VolumeDriver"]},
            "Get": {"Volume": {"Name": name, "Mountpoint": where}} if name in self.made else {"Err": "no such volume"},
            "List": {"Volumes": [{"Name": n, "Mountpoint": str(self.root / n)} for n in sorted(self.made)]},
            "Path": {"Mountpoint": where},
            "Mount": {"Mountpoint": where},
            "Capabilities": {"Capabilities": {"Scope": "global"}},
        }.get(verb, {})
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.docker.plugins.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def volume_plugin(node: NodeLayout, folder: Path) -> Iterator[str]:
    """A volume driver the node's dockerd finds by name: a socket in the node's own
    /run/docker/plugins (`NodeLayout.docker_plugins`), so no other node or lab sees it. dockerd
    keeps a plugin it used for its lifetime and retries it for 15 s on every `volume ls` once it is
    gone, so afterwards the node's dockerd is restarted (with no container left to stop)."""
    name = "peakpack-test"
    sock = node.docker_plugins / f"{name}.sock"
    sock.unlink(missing_ok=True)
    handler = type("Plugin", (VolumePlugin,), {"root": folder, "made": set()})
    server = type("Server", (socketserver.ThreadingMixIn, socketserver.UnixStreamServer), {"daemon_threads": True})(
        str(sock), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield name
    finally:
        server.shutdown()
        server.server_close()
        sock.unlink(missing_ok=True)
        kill_dockerd(node)
        start_dockerd(node)


def test_a_volume_of_another_driver_is_refused_with_the_fix(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    with volume_plugin(lab.node("node-1"), tmp_path) as driver:
        sh(lab, "node-1", "docker", "volume", "create", "-d", driver, "shared")
        sh(lab, "node-1", "docker", "run", "-d", "--name", "nfs-user", "-v", "shared:/data", IMAGE, "sleep", "3600")
        try:
            before = [node_state(lab, n) for n in ("node-1", "node-2")]
            line = refused(lab, "nfs-user", "node-2", tmp_path / "pp.db")
            assert f"volume shared uses the {driver} driver; only local volumes are copied" in line
            assert "peakpack.shared-paths=true" in line  # the fix
            assert [node_state(lab, n) for n in ("node-1", "node-2")] == before
        finally:
            lab.exec("node-1", ["docker", "rm", "-f", "nfs-user"])
            lab.exec("node-1", ["docker", "volume", "rm", "shared"])


def test_the_exact_image_follows_even_when_its_name_moved_on(clean_lab: Lab, tmp_path: Path) -> None:
    """The source's tag may name another build by now (a rebuild, or an image an earlier migration
    brought): the target gets the image the container runs, by ID, under the container's name."""
    lab = clean_lab
    sh(lab, "node-1", "docker", "run", "-d", "--name", "old", "--network", "none", IMAGE, "sleep", "3600")
    runs = inspect(lab, "node-1", "old")["Image"]
    sh(lab, "node-1", "docker", "run", "--name", "rebuild", IMAGE, "touch", "/rebuilt")
    sh(lab, "node-1", "docker", "commit", "rebuild", IMAGE)  # the name now points to a new build
    try:
        assert inspect(lab, "node-1", IMAGE)["Id"] != runs
        proc = peakpack("migrate", "old", "--to", "node-2", "--inventory", str(lab.inventory_path), "--json",
                        db=tmp_path / "pp.db")
        assert proc.returncode == 0, proc.stderr
        moved = inspect(lab, "node-2", "old")
        assert moved["Image"] == runs and moved["Config"]["Image"] == IMAGE and moved["State"]["Running"]
    finally:  # the lab's image name back to what every node started with
        sh(lab, "node-1", "docker", "tag", runs, IMAGE)
