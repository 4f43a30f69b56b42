"""The CRIU that scripts/build-criu.sh installs, with scripts/criu-patches: a page server that
receives a dump over TLS holds a few MB, not the pages it received (Debian's CRIU 4.2.1 freed only
the last TLS record of every batch, so its page server grew by about as much as the pages: 797 MiB
for a 1 GB dump), and both ends of a page stream take the TCP congestion control asked for
(--tcp-congestion, patch 0004), and a restore from what a page server received brings back every
page, and only the pages, the process had (patch 0005 populates the ranges it reads before reading
them). Real CRIU on this host's loopback, TLS with certificates from the cluster CA peakpack makes;
it asserts what arrived and the memory each side took, never time."""

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

#: a process in a session of its own (CRIU dumps a session leader without --shell-job), with only
#: the descriptors CRIU needs, holding a mapping of 2 x MB of which it touched only the first MB:
#: each page of that half starts with its index; it says when it is ready, its pid and where the
#: mapping is
HOLDER = """
import ctypes, mmap, os, sys, time
os.setsid()
pages = int(sys.argv[1]) << 20 >> 12
m = mmap.mmap(-1, 2 * pages << 12)
for i in range(pages):
    m[i << 12:(i << 12) + 8] = i.to_bytes(8, "little")
for fd in (0, 1, 2):
    os.close(fd)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {ctypes.addressof(ctypes.c_char.from_buffer(m))}")
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
    """A HOLDER, returned once ready ("PID ADDRESS" in tmp_path / "ready")."""
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


def vm_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])


def test_a_restore_from_a_page_server_brings_back_every_page_and_only_those(tmp_path: Path) -> None:
    """scripts/criu-patches/0005 populates the ranges the restore reads before reading them: the
    restored process must find each page it wrote where it was, and the half of its mapping it
    never touched must still cost nothing (populating whole mappings would double its memory)."""
    images, dump, _ = dump_to_page_server(tmp_path, [])
    pid, address = map(int, (tmp_path / "ready").read_text().split())
    for image in dump.glob("*.img"):  # the metadata joins the pages, as peakpack's transfer does
        (images / image.name).write_bytes(image.read_bytes())
    done = subprocess.run(["criu", "restore", "-D", str(images), "-d", "-o", "restore.log"],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, (images / "restore.log").read_text(errors="replace")[-2000:]
    try:
        pages = MB << 20 >> 12
        with open(f"/proc/{pid}/mem", "rb") as mem:
            mem.seek(address)
            held = mem.read(pages << 12)
        wrong = [i for i in range(pages) if held[i << 12:(i << 12) + 8] != i.to_bytes(8, "little")]
        assert not wrong, f"{len(wrong)} of {pages} restored pages differ from the dump, first at page {wrong[0]}"
        # the touched half (MB) and the interpreter (~10 MB), not the untouched half too
        assert vm_rss_kib(pid) < (MB << 10) * 5 // 4, f"the restored process holds {vm_rss_kib(pid)} KiB for {MB} MB"
    finally:
        os.kill(pid, 9)
