"""TLS on the page streams (migrate/tls.py), on the real lab: the pages of a dump cross the link
between two nodes encrypted (a capture of the link finds a marker the container holds in memory
only when `[migration] tls = false`), and a plaintext client asking a post-copy source for a page
of that memory gets nothing, while the container goes on, once, with its state. Nothing is
mocked; the tests assert what crossed the wire and what runs, never time."""

from __future__ import annotations

import re
import secrets
import socket
import struct
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.node import docker
from peakpack.migrate.transaction import Migration, MigrationResult
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.power.ipmi import power_probe

pytestmark = pytest.mark.integration
NAME = "secret"
ETH_P_ALL = 0x0003


def start(lab: Lab, marker: str) -> int:
    """A shell holding `marker` in its memory (a variable), counting; its pid on the host."""
    docker(lab.node("node-1"), "run", "-d", "--name", NAME, "--network", "none", "peakpack/busybox:lab", "sh", "-c",
           f"m=$(echo {marker} | tr a-z A-Z); i=0; while :; do i=$((i+1)); echo $i > /n; sleep 0.2; done")
    return int(docker(lab.node("node-1"), "inspect", "-f", "{{.State.Pid}}", NAME).stdout)


class Capture:
    """Every TCP payload crossing node-1's link (its veth's host end), concatenated per flow."""

    def __init__(self, interface: str) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((interface, 0))
        self.sock.settimeout(0.2)
        self.flows: dict[tuple[int, int], bytearray] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stop.is_set():
            try:
                frame = self.sock.recv(65535)
            except TimeoutError:
                continue
            if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:  # IPv4, TCP
                continue
            ihl = (frame[14] & 0x0F) * 4
            tcp = 14 + ihl
            sport, dport = struct.unpack("!HH", frame[tcp:tcp + 4])
            payload = frame[tcp + (frame[tcp + 12] >> 4) * 4:14 + struct.unpack("!H", frame[16:18])[0]]
            if payload:
                self.flows.setdefault((sport, dport), bytearray()).extend(payload)

    def seen(self, needle: bytes) -> bool:
        self.stop.set()
        self.thread.join()
        self.sock.close()
        return any(needle in data for data in self.flows.values())


def migrate(lab: Lab, db: Path, tls: bool, post_copy: bool = False, hook=None) -> MigrationResult:  # type: ignore[no-untyped-def]
    inv = load_inventory(lab.inventory_path)
    settings = replace(inv.migration, tls=tls, post_copy=post_copy)
    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{db}") as store:
        return shell.call(Migration(shell.pool, shell.engines, store, inv, NAME, "node-1", "node-2", hook=hook,
                                    bmc_power=power_probe(inv), settings=settings).run())


@pytest.mark.parametrize("tls", [True, False])
def test_the_pages_cross_the_link_encrypted(clean_lab: Lab, tmp_path: Path, tls: bool) -> None:
    lab = clean_lab
    marker = secrets.token_hex(20)
    start(lab, marker)
    capture = Capture(lab.node("node-1").host_veth)
    result = migrate(lab, tmp_path / "db", tls)
    assert result.state is MigrationState.SUCCEEDED, result.reason
    # the capture works: without TLS the container's memory is there to read, in clear
    assert capture.seen(marker.upper().encode()) is not tls
    moved = int(docker(lab.node("node-2"), "inspect", "-f", "{{.State.Pid}}", NAME).stdout)
    assert marker_page(moved, marker.upper().encode())  # its memory arrived whole, marker included


def marker_page(pid: int, marker: bytes) -> int:
    """The address of the page of `pid`'s memory that holds `marker` (it is stopped: dumped)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("rw"):
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except OSError:
                continue
            if (at := data.find(marker)) >= 0:
                return (lo + at) & ~0xFFF
    raise AssertionError("the marker is not in the process's memory")


def ask_for_a_page(address: str, port: int, vaddr: int) -> bytes:
    """What a plaintext client gets when it asks a lazy dump's page server for one page of the
    container's first process, as CRIU's lazy-pages daemon does (PS_IOV_GET, criu/page-xfer.c)."""
    got = bytearray()
    with socket.create_connection((address, port), timeout=5) as s:
        s.sendall(struct.pack("<IxxxxQQQ", 7, 1, vaddr, 1))
        try:
            while len(got) < 32 + 4096 and (chunk := s.recv(65536)):
                got += chunk
        except OSError:
            pass
    return bytes(got)


def test_a_plaintext_client_gets_no_page_of_a_post_copy_source(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    marker = secrets.token_hex(20).upper().encode()
    pid = start(lab, marker.decode().lower())
    got: dict[str, bytes] = {}

    async def ask_before_the_target(step: str) -> None:
        if step == "transferring":  # the dump serves its pages; the target's daemon is not there yet
            listening = lab.exec("node-1", ["ss", "-Hltnp"]).stdout
            port = int(re.search(r":(\d+)\s.*criu", listening).group(1))  # type: ignore[union-attr]
            got["reply"] = ask_for_a_page(lab.node("node-1").address, port, marker_page(pid, marker))

    result = migrate(lab, tmp_path / "db", tls=True, post_copy=True, hook=ask_before_the_target)
    assert "reply" in got and marker not in got["reply"]
    # whatever the stranger did to the one session the page server serves, the container runs once
    where = [n for n in ("node-1", "node-2")
             if docker(lab.node(n), "inspect", "-f", "{{.State.Running}}", NAME, check=False).stdout.strip() == "true"]
    assert len(where) == 1, (result.state, result.reason)
    assert int(docker(lab.node(where[0]), "exec", NAME, "cat", "/n").stdout) > 0
