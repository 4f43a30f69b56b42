"""The CRIU that scripts/build-criu.sh installs, with scripts/criu-patches: a page server that
receives a dump over TLS holds a few MB, not the pages it received (Debian's CRIU 4.2.1 freed only
the last TLS record of every batch, so its page server grew by about as much as the pages: 797 MiB
for a 1 GB dump), and both ends of a page stream take the TCP congestion control asked for
(--tcp-congestion, patch 0004). Real CRIU on this host's loopback, TLS with certificates from the
cluster CA peakpack makes; it asserts what arrived and the memory the page server took, never time."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from peakpack.migrate import runc_conf, tls
from peakpack.migrate.tls import Authority
from tests.support.build import node_spec

pytestmark = pytest.mark.integration
MB = 128

#: a process holding MB of touched memory in a session of its own (CRIU dumps a session leader
#: without --shell-job), with only the descriptors CRIU needs; it says when it is ready
HOLDER = """
import os, sys, time
os.setsid()
b = bytearray(int(sys.argv[1]) << 20)
b[::4096] = b"x" * len(b[::4096])
for fd in (0, 1, 2):
    os.close(fd)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write("ready")
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
time.sleep(120)
"""


def tls_args(folder: Path, ca: Authority) -> list[str]:
    """The TLS options peakpack gives CRIU, with the files a node holds (a key and certificate for
    this host issued by `ca`, and the CA's) written in `folder` instead of `tls.NODE_DIR`."""
    key, cert = ca.issue(node_spec("here", address="127.0.0.1"))
    for path, data in ((tls.CA_FILE, ca.pem), (tls.CERT_FILE, cert), (tls.KEY_FILE, key)):
        (folder / Path(path).name).write_bytes(data)
    return [a.replace(tls.NODE_DIR, str(folder)) for a in runc_conf.arguments(tls.CRIU_OPTIONS)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def holder(tmp_path: Path) -> subprocess.Popen[bytes]:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(["python3", "-c", HOLDER, str(MB), str(ready)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        if ready.exists():
            return proc
        assert proc.poll() is None, "the memory holder exited before it was ready"
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the memory holder was not ready in 30 s")


def page_server(images: Path, port: int, tls: list[str], peak: Path) -> subprocess.Popen[bytes]:
    """`criu page-server` in the foreground, returned once it listens (its --status-fd); GNU time
    writes its peak RSS (KiB) to `peak` when it exits (its own rusage: a child of ours would count
    the memory it had before exec, this test process's)."""
    ready, ready_w = os.pipe()
    server = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", str(peak),
                               "criu", "page-server", "-D", str(images), "--address", "127.0.0.1", "--port",
                               str(port), *tls, "--status-fd", str(ready_w), "-o", "page-server.log"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(ready_w,))
    os.close(ready_w)
    with os.fdopen(ready, "rb") as r:
        assert r.read(1) == b"\0", (images / "page-server.log").read_text(errors="replace")[-2000:]
    return server


def dump_to_page_server(tmp_path: Path, options: list[str]) -> tuple[Path, Path, Path]:
    """A holder's MB dumped into a page server on loopback, both given `options`; the page
    server's images folder, the dump's folder and the page server's peak RSS file."""
    images, dump = tmp_path / "images", tmp_path / "dump"
    images.mkdir()
    dump.mkdir()
    port = free_port()
    proc = holder(tmp_path)
    peak = tmp_path / "peak-kib"
    server = page_server(images, port, options, peak)
    try:
        done = subprocess.run(["criu", "dump", "-t", str(proc.pid), "-D", str(dump), "--page-server", "--address",
                               "127.0.0.1", "--port", str(port), *options, "-o", "dump.log"],
                              capture_output=True, timeout=120)
        assert done.returncode == 0, (dump / "dump.log").read_text(errors="replace")[-2000:]
        status = server.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
        if server.returncode is None:
            server.kill()
            server.wait()
    assert status == 0, (images / "page-server.log").read_text(errors="replace")[-2000:]
    return images, dump, peak


def test_a_page_server_receiving_over_tls_does_not_keep_the_pages(tmp_path: Path) -> None:
    images, _, peak = dump_to_page_server(tmp_path, tls_args(tmp_path, Authority.open(tmp_path / "ca")))
    received = sum(p.stat().st_size for p in images.glob("pages-*.img"))
    assert received >= MB << 20, f"the page server wrote {received} bytes of pages for {MB} MB"
    # a few MB of CRIU and gnutls, against ~100 MB when every record was kept
    peak_kib = int(peak.read_text().split()[-1])
    assert peak_kib < (MB << 10) // 4, f"the page server took {peak_kib} KiB for {MB} MB of pages"


def test_both_ends_of_a_page_stream_take_the_congestion_control_asked_for(tmp_path: Path) -> None:
    """scripts/criu-patches/0004: --tcp-congestion on the page server's socket and the dump's, set
    before listen() and connect() (BBR switches pacing on as it starts); each logs what the kernel
    reads back (at -v3). reno, because every kernel has it and no host makes it its default."""
    images, dump, _ = dump_to_page_server(tmp_path, ["--tcp-congestion", "reno", "-v3"])
    for log in (images / "page-server.log", dump / "dump.log"):
        assert "TCP congestion control: reno" in log.read_text(errors="replace"), log
