"""Live-migration downtime of a real program on the real lab (a measurement, not a test; needs root
and scripts/install-system-deps.sh): Debian's memcached, in a container with a published port,
filled with N MB of items, migrated node-1 -> node-2 by `Migration` (what `peakpack migrate` runs)
while a client writes throughout, reconnecting to whichever node answers.

    .venv/bin/python bench/migration_downtime.py [--sizes 256,1024,2048] [--rounds 1] [--dir DIR]
                                                 [--routes pages,post-copy] [--out FILE.jsonl]
                                                 [--network ports|segment] [--rollback]
                                                 [--tls on|off|both] [--congestion cubic,own]

For every size and round, in the same run, one after another:
- raw CRIU, the floor: the same memcached binary run directly on node-1 in its own pid namespace
  (no Docker), filled the same way, `criu dump` + `criu restore` into/from node-1's disk;
- the default path (pages straight to a CRIU page server on the target, the source kept dumped
  and stopped until the target runs): frozen time (checkpoint start to restore end) split into
  dump, transfer and restore;
- post-copy (`[migration] post_copy = true`): frozen time and the time until the last page had
  arrived on the target.
After each migration every item is read back from the target and compared, and every write the
client saw acknowledged is looked for; the client's longest gap between two acknowledged writes
is printed next to the frozen time. Ratios printed: frozen / raw CRIU, same run. `--tls both` and
`--congestion cubic,own` run every migration once per setting, in turn (own: each node's own
congestion control, e.g. BBR), so their ratios come from one run.

`--network segment`: memcached sits on the lab's segment network (`labnet`, macvlan: its address
and open connections move with it) and the client holds ONE connection and never reconnects; each
run prints whether that connection was kept, the writes acknowledged on it and lost, its longest
gap beside the frozen time, and how long after the restore a new connection to the address was
first answered (tried every 20 ms). `--rollback` adds, per size, a run whose target's disk fills
after the dump: the source resumes and the same connection must go on there.

The memcached image is built without a registry: Debian's memcached package (`apt-get download`,
cached in /var/cache/peakpack/memcached: `lab.image.memcached_image`), its libraries and busybox,
`docker import`ed on each node.
These VMs are small and shared: compare ratios within one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.image import MEMCACHED_IMAGE as IMAGE
from peakpack.lab.image import memcached_image, memcached_rootfs
from peakpack.lab.layout import SEGMENT_NETWORK
from peakpack.lab.node import docker
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.settings import MigrationSettings
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote.shell import RemoteShell
from tests.support.held import HeldConnection

PORT, RAW_PORT, LINK_PORT = 11211, 11311, 29999
#: the floor's images: node-1's own /dev/shm (each lab node has its own tmpfs there)
RAW_DIR = "/dev/shm/bench-raw"
VALUE_KB = 100
#: memcached as the container runs it (as root: where root lacks CAP_SYS_RESOURCE CRIU cannot dump
#: a process of another user, so `-u nobody` would be refused by preflight)
MEMCACHED = ["memcached", "-u", "root", "-m", "6000", "-t", "2", "-c", "1024"]
#: on node-1, as root: memcached as pid 1 of its own pid namespace with a session of its own
#: (CRIU refuses a session leader outside the namespace), chrooted into the image's files, then
#: criu dump + criu restore of it, each timed on the node
RAW_SCRIPT = r"""
set -eu
root=$1 addr=$2 port=$3 dir=$4 cmd=$5
case $cmd in
start)
  unshare -p -f setsid chroot "$root" /usr/bin/memcached -u root -m 6000 -t 2 -c 1024 -l "$addr" -p "$port" \
    </dev/null >/dev/null 2>&1 &
  for _ in $(seq 100); do
    ss -Hltn "sport = :$port" | grep -q . && { pgrep -f "^/usr/bin/memcached .* -p $port\$" | while read -r p; do
      [ "$(awk '/^NSpid/ {print NF}' /proc/$p/status)" = 3 ] && echo "$p"; done; exit 0; }
    sleep 0.1
  done; exit 1;;
dump)  # PID MB: dump into RAM (the node's own /dev/shm), then restore from there while a process holds
  # as much memory as the dumped one had, as the source peakpack keeps stopped until the target runs
  rm -rf "$dir"; mkdir -p "$dir"; sync
  t0=$(date +%s.%N); criu dump -t "$6" -D "$dir" --tcp-close -o dump.log; t1=$(date +%s.%N)
  python3 -c 'import sys, time; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b"x" * len(b[::4096])
print(flush=True); time.sleep(600)' "$7" > "$dir/held" &
  h=$!; while [ ! -s "$dir/held" ]; do sleep 0.05; done
  t2=$(date +%s.%N)
  criu restore -D "$dir" -d --tcp-close -o restore.log --pidfile "$dir/restored.pid"; t3=$(date +%s.%N)
  kill $h
  echo "$t0 $t1 $t2 $t3 $(cat "$dir/restored.pid")";;
link)  # ADDRESS PORT MB: seconds to send MB over TCP to the sink at ADDRESS:PORT, until it has them all
  python3 -c "$LINK_SEND" "$6" "$7" "$8";;
esac
"""


# -- a memcached client: items derived from their keys, a writer that times acknowledgements ----------

def value(key: bytes) -> bytes:
    return (hashlib.sha256(key).digest() * (VALUE_KB * 32 + 1))[:VALUE_KB * 1024]


def connect(host: str, port: int, timeout: float) -> socket.socket:
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_line(s: socket.socket, buf: bytearray) -> bytes:
    while (i := buf.find(b"\r\n")) < 0:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    line = bytes(buf[:i])
    del buf[:i + 2]
    return line


def get_many(s: socket.socket, buf: bytearray, keys: list[bytes]) -> dict[bytes, bytes]:
    s.sendall(b"get " + b" ".join(keys) + b"\r\n")
    got = {}
    while (line := read_line(s, buf)) != b"END":
        _, key, _, size = line.split()
        while len(buf) < int(size) + 2:
            buf += s.recv(1 << 20)
        got[key] = bytes(buf[:int(size)])
        del buf[:int(size) + 2]
    return got


def fill(host: str, port: int, mb: int) -> None:
    with connect(host, port, 60) as s:
        for start in range(0, mb * 1024 // VALUE_KB, 32):
            keys = [b"k%d" % i for i in range(start, min(mb * 1024 // VALUE_KB, start + 32))]
            s.sendall(b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, VALUE_KB * 1024, value(k)) for k in keys))
        s.sendall(b"version\r\n")
        assert read_line(s, bytearray()).startswith(b"VERSION")


def items_lost(host: str, port: int, mb: int) -> int:
    """Items missing or differing."""
    n, bad, buf = mb * 1024 // VALUE_KB, 0, bytearray()
    with connect(host, port, 60) as s:
        for start in range(0, n, 50):
            keys = [b"k%d" % i for i in range(start, min(n, start + 50))]
            got = get_many(s, buf, keys)
            bad += sum(1 for k in keys if got.get(k) != value(k))
    return bad


def writer(hosts: list[str], port: int, stop: multiprocessing.synchronize.Event, out: multiprocessing.Queue) -> None:
    """Acknowledged sets w0, w1, ... one at a time; on any error (0.3 s timeouts) on to the next
    node; reports how many were acknowledged and the longest gap between two acknowledgements."""
    acked, longest, last, s, turn, buf = 0, 0.0, time.monotonic(), None, 0, bytearray()
    while not stop.is_set():
        try:
            if s is None:
                s, buf = connect(hosts[turn % len(hosts)], port, 0.3), bytearray()
            s.sendall(b"set w%d 0 0 8\r\n%08d\r\n" % (acked, acked))
            if read_line(s, buf) != b"STORED":
                raise ConnectionError("not stored")
            now = time.monotonic()
            longest, last, acked = max(longest, now - last), now, acked + 1
            time.sleep(0.005)
        except OSError:
            if s is not None:
                s.close()
            s, turn = None, turn + 1
            time.sleep(0.02)
    out.put((acked, max(longest, time.monotonic() - last)))


def writes_lost(host: str, port: int, acked: int) -> int:
    lost, buf = 0, bytearray()
    with connect(host, port, 60) as s:
        for start in range(0, acked, 100):
            keys = [b"w%d" % i for i in range(start, min(acked, start + 100))]
            lost += len(set(keys) - set(get_many(s, buf, keys)))
    return lost


# -- the three measurements -----------------------------------------------------------------------------

@dataclass
class Row:
    mode: str          # raw, pages (the default path), post-copy
    mb: int
    round: int
    frozen_s: float
    dump_s: float
    transfer_s: float
    restore_s: float
    last_page_s: float | None = None
    longest_gap_s: float | None = None
    items_lost: int = 0
    writes_acked: int = 0
    writes_lost: int = 0
    state: str = "SUCCEEDED"
    load: float = 0.0
    tls: bool = True             # the page stream was TLS ([migration] tls)
    #: its TCP congestion control ([migration] page_stream_congestion; "": the nodes' own; raw: no stream)
    congestion: str = ""
    #: CRIU's own phases, from its logs: the dump's page stream (first page to disconnect from the
    #: page server) and the rest of the dump; the restore's read of the pages (its one preadv) and
    #: the whole of CRIU's restore (the rest of `restore_s` is docker, containerd and runc)
    dump_pages_s: float | None = None
    dump_rest_s: float | None = None
    restore_read_s: float | None = None
    restore_criu_s: float | None = None
    floor_s: float | None = None  # raw CRIU in RAM, same size, same round
    link_s: float | None = None   # the link's own time for the memory's bytes, same round
    network: str = "ports"       # ports: a published port; segment: the lab's labnet, ONE held connection
    kept: bool | None = None     # segment: the one connection lasted (None: not measured)
    new_conn_s: float | None = None  # segment: from the restore's end to the first new connection answered
    fault: str = ""              # segment --rollback: the fault injected after the dump


def raw_script(lab: Lab, root: Path, *args: str) -> str:
    address = lab.layout.node("node-1").address
    proc = lab.exec("node-1", ["sh", "-c", RAW_SCRIPT, "raw", str(root), address, str(RAW_PORT), RAW_DIR, *args],
                    timeout=900)
    if proc.returncode:
        raise SystemExit(f"raw CRIU on node-1: {args[0]}: {proc.stderr.strip()[-300:]}")
    return proc.stdout


def raw(lab: Lab, root: Path, mb: int, rnd: int) -> Row:
    """The floor: the same memcached binary, no Docker, dumped into RAM on node-1 and restored from
    there while its memory is still taken (as the source peakpack keeps until the target runs)."""
    address = lab.layout.node("node-1").address
    pid = raw_script(lab, root, "start").split()[0]
    try:
        fill(address, RAW_PORT, mb)
        rss_mb = int(lab.exec("node-1", ["awk", "/^VmRSS/ {print $2}", f"/proc/{pid}/status"]).stdout or 0) // 1024
        t0, t1, t2, t3, restored = raw_script(lab, root, "dump", pid, str(max(rss_mb, mb))).split()
        lost = items_lost(address, RAW_PORT, mb)
    finally:
        lab.exec("node-1", ["sh", "-c", f"pkill -f '^/usr/bin/memcached .* -p {RAW_PORT}$'; rm -rf {RAW_DIR}"])
    return Row("raw", mb, rnd, float(t1) - float(t0) + float(t3) - float(t2), float(t1) - float(t0), 0.0,
               float(t3) - float(t2), items_lost=lost, state=f"restored as {restored}", load=os.getloadavg()[0])


#: the link's measure: a sink on node-2 that reads one connection to its end, then answers; the
#: sender on node-1 times sending MB until that answer
LINK_SINK = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(120); print("ready", flush=True)
c, _ = s.accept(); c.settimeout(120); n = int(sys.argv[3]) << 20; got = 0
while got < n:
    got += len(c.recv(1 << 20) or b"") or n
c.sendall(b"k")
"""
LINK_SEND = r"""
import socket, sys, time
n = int(sys.argv[3]) << 20; block = bytes(1 << 20); t0 = time.monotonic()
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=120)
for _ in range(n >> 20):
    c.sendall(block)
c.recv(1); print(0, time.monotonic() - t0)
"""


def link(lab: Lab, root: Path, mb: int) -> float:
    """Seconds node-1 takes to send `mb` MB to node-2 over plain TCP until node-2 has them all,
    measured now: the link's own time for the pages a migration of that size sends."""
    address = lab.node("node-2").address
    sink = subprocess.Popen([*lab.ssh_argv("node-2"), "--", shlex.join(["python3", "-c", LINK_SINK, address,
                                                                        str(LINK_PORT), str(mb)])],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        proc = lab.exec("node-1", ["env", f"LINK_SEND={LINK_SEND}", "sh", "-c", RAW_SCRIPT, "raw", str(root), "-",
                                   "-", RAW_DIR, "link", address, str(LINK_PORT), str(mb)], timeout=300)
        t0, t1 = proc.stdout.split()
    finally:
        sink.kill()
    return float(t1) - float(t0)


def warm(gb: int) -> None:
    """Touch `gb` GB once and exit: this kind of VM backs its memory lazily, and the first touch of
    a page costs a host fault; a migration's target needs fresh memory (its source is kept), so
    every timed run starts from the same, warm, machine."""
    if gb <= 0:
        return
    t0 = time.monotonic()
    touch = f"b = bytearray({gb} << 30); b[::4096] = b'x' * len(b[::4096])"
    subprocess.run([sys.executable, "-c", touch], check=True)
    print(f"# warmed: touched {gb} GB and let it go ({time.monotonic() - t0:.1f} s)", file=sys.stderr, flush=True)


def wait_for_server(address: str) -> None:
    for _ in range(100):
        try:
            connect(address, PORT, 1).close()
            return
        except OSError:
            time.sleep(0.1)


def stamps(log: str, *marks: str) -> list[float | None]:
    """The time (s since CRIU started) of the first line holding each of `marks` in a CRIU log (a
    mark may name alternatives: "a|b")."""
    found: list[float | None] = [None] * len(marks)
    for line in log.splitlines():
        if not line.startswith("("):
            continue
        for i, mark in enumerate(marks):
            if found[i] is None and any(m in line for m in mark.split("|")):
                found[i] = float(line[1:line.index(")")])
    return found


class Phases:
    """A hook that reads CRIU's logs of the migration while both are still there (at settling):
    the source's dump log (the migration's own work folder) and the target's restore log (its
    containerd task folder)."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.dump, self.restore = "", ""

    async def __call__(self, step: str) -> None:
        if step != "settling":
            return
        n1, n2 = self.lab.node("node-1"), self.lab.node("node-2")
        dumps = sorted((n1.docker_root / "peakpack-criu").glob("*/work/dump.log"), key=os.path.getmtime)
        restores = sorted(n2.exec_root.glob("containerd/daemon/io.containerd.runtime.v2.task/*/*/work/restore.log"),
                          key=os.path.getmtime)
        self.dump = dumps[-1].read_text(errors="replace") if dumps else ""
        self.restore = restores[-1].read_text(errors="replace") if restores else ""

    def fill(self, row: Row) -> Row:
        first, last, end = stamps(self.dump, "page-xfer: Sending|page-xfer: Splicing",
                                  "Disconnect from the page server", "Dumping finished successfully")
        if first is not None and last is not None and end is not None:
            row.dump_pages_s, row.dump_rest_s = last - first, end - (last - first)
        # the read starts with patch 0005's populate of the pages it reads, where CRIU has it
        read, returned, done = stamps(self.restore, "Populating|Preadv", "`- returned", "Restore finished successfully")
        if read is not None and returned is not None:
            row.restore_read_s = returned - read
        lines = [x for x in self.restore.splitlines() if x.startswith("(")]
        if done is not None or lines:
            row.restore_criu_s = done if done is not None else float(lines[-1][1:lines[-1].index(")")])
        return row


def migrated(lab: Lab, mb: int, rnd: int, post_copy: bool, tls: bool = True, congestion: str = "cubic") -> Row:
    n1, n2 = (lab.layout.node(n) for n in ("node-1", "node-2"))
    for n in (n1, n2):
        docker(n, "rm", "-f", "mc", check=False)
    docker(n1, "run", "-d", "--name", "mc", "-p", f"{PORT}:{PORT}", IMAGE, *MEMCACHED, "-p", str(PORT))
    wait_for_server(n1.address)
    fill(n1.address, PORT, mb)
    lab.exec("node-1", ["sync"])
    stop, out = multiprocessing.Event(), multiprocessing.Queue()
    client = multiprocessing.Process(target=writer, args=([n1.address, n2.address], PORT, stop, out))
    client.start()
    time.sleep(1)
    inv = load_inventory(lab.inventory_path)
    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{lab.dir / 'bench.db'}") as store:
        phases = Phases(lab)
        m = Migration(shell.pool, shell.engines, store, inv, "mc", "node-1", "node-2", hook=phases,
                      settings=MigrationSettings(post_copy=post_copy, tls=tls, page_stream_congestion=congestion))
        result = shell.call(m.run())
    time.sleep(1)
    stop.set()
    acked, gap = out.get()
    client.join()
    where = n2 if result.state is MigrationState.SUCCEEDED else n1
    t = m.t
    return phases.fill(Row("post-copy" if post_copy else "pages", mb, rnd, (result.frozen_ms or 0) / 1000,
               (t.checkpoint_ms or 0) / 1000, (t.transfer_ms or 0) / 1000, (t.restore_ms or 0) / 1000,
               last_page_s=None if t.last_page_ms is None else t.last_page_ms / 1000, longest_gap_s=gap,
               items_lost=items_lost(where.address, PORT, mb), writes_acked=acked,
               writes_lost=writes_lost(where.address, PORT, acked),
               state=result.state.value + (f": {result.reason}" if result.reason else ""), load=os.getloadavg()[0],
               tls=tls, congestion=congestion))


class NewConnections:
    """New connections to `address` tried every 20 ms (0.25 s to connect and answer `version`)
    while a migration runs: when each was first answered again after the restore."""

    def __init__(self, address: str) -> None:
        self.address, self.answered = address, []  # type: ignore[var-annotated]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._try, daemon=True)
        self.thread.start()

    def _try(self) -> None:
        while not self.stop.is_set():
            try:
                with connect(self.address, PORT, 0.25) as s:
                    s.sendall(b"version\r\n")
                    if s.recv(64).startswith(b"VERSION"):
                        self.answered.append(time.monotonic())
            except OSError:
                pass
            time.sleep(0.02)

    def first_after(self, t: float) -> float | None:
        self.stop.set()
        self.thread.join()
        return next((a - t for a in self.answered if a >= t), None)


def migrated_on_segment(lab: Lab, mb: int, rnd: int, post_copy: bool, rollback: bool) -> Row:
    """memcached on the lab's segment network (its address moves with it), one client connection
    held throughout and never reopened; with `rollback`, the target's disk fills after the dump."""
    n1, n2 = (lab.layout.node(n) for n in ("node-1", "node-2"))
    for n in (n1, n2):
        docker(n, "rm", "-f", "mc", check=False)
    docker(n1, "run", "-d", "--name", "mc", "--network", SEGMENT_NETWORK, IMAGE, *MEMCACHED, "-p", str(PORT))
    address = docker(n1, "inspect", "-f", f"{{{{.NetworkSettings.Networks.{SEGMENT_NETWORK}.IPAddress}}}}",
                     "mc").stdout.strip()
    wait_for_server(address)
    fill(address, PORT, mb)
    lab.exec("node-1", ["sync"])

    async def fault(step: str) -> None:
        if rollback and step == "transferring":
            lab.fault("node-2", "fill-disk")

    inv = load_inventory(lab.inventory_path)
    with HeldConnection(address, PORT) as client:
        client.wait_for(100)
        probe = NewConnections(address)
        try:
            with RemoteShell(inv) as shell, Store.open(f"sqlite:///{lab.dir / 'bench.db'}") as store:
                m = Migration(shell.pool, shell.engines, store, inv, "mc", "node-1", "node-2", hook=fault,
                              settings=MigrationSettings(post_copy=post_copy))
                result = shell.call(m.run())
        finally:
            if rollback:
                lab.fault("node-2", "free-disk")
        t = m.t
        restored = None if t.frozen_at is None or t.restore_ms is None else t.frozen_at + (t.frozen_ms or 0) / 1000
        new_conn = probe.first_after(restored) if restored is not None else probe.first_after(time.monotonic())
        client.wait_for(client.seen.acked + 100, 30)
        seen = client.stop()
        lost = client.readback() if seen.error is None else -1
    if lost < 0:  # the connection ended: read the acknowledged writes back on a new one
        again = HeldConnection(address, PORT)
        lost = again.readback(seen.acked)
        again.sock.close()
    return Row("post-copy" if post_copy else "pages", mb, rnd, (result.frozen_ms or 0) / 1000,
               (t.checkpoint_ms or 0) / 1000, (t.transfer_ms or 0) / 1000, (t.restore_ms or 0) / 1000,
               last_page_s=None if t.last_page_ms is None else t.last_page_ms / 1000,
               longest_gap_s=seen.longest_gap_s, items_lost=items_lost(address, PORT, mb), writes_acked=seen.acked,
               writes_lost=lost, state=result.state.value + (f": {result.reason}" if result.reason else ""),
               load=os.getloadavg()[0], network="segment", kept=seen.error is None,
               new_conn_s=new_conn if restored is not None else None,
               fault="target disk full after the dump" if rollback else "")


def report_segment(rows: list[Row]) -> None:
    """One line per run on the segment network: the connection kept, writes, the gap beside the
    frozen time, and the first new connection after the restore."""
    segment = [r for r in rows if r.network == "segment"]
    if not segment:
        return
    print("\nsegment network, ONE connection never reopened (s):")
    print("  MB mode       fault     state        kept  acked  lost  frozen  gap  gap-frozen  new conn after restore")
    for r in segment:
        print(f"{r.mb:5d} {r.mode:10s} {'rollback' if r.fault else '-':9s} {r.state.split(':')[0]:12s} "
              f"{'yes' if r.kept else 'NO':4s} {r.writes_acked:6d} {r.writes_lost:5d} {r.frozen_s:7.2f} "
              f"{r.longest_gap_s or 0:5.2f} {(r.longest_gap_s or 0) - r.frozen_s:+10.2f}  "
              f"{'-' if r.new_conn_s is None else f'{r.new_conn_s:.2f}'}")


def med(rows: list[Row], attr: str) -> float | None:
    got = [getattr(r, attr) for r in rows if getattr(r, attr) is not None]
    return statistics.median(got) if got else None


def f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report_phases(rows: list[Row]) -> None:
    """Per size and route, medians over the rounds: the freeze's phases (CRIU's own, from its logs),
    the floor and the link beside them, and the ratios the targets are stated in."""
    print("\nmedians (s): frozen = dump (CRIU's page stream + the rest) + transfer + restore (CRIU's read of the "
          "pages / all of CRIU's restore / docker's start around it)")
    print("   MB route          frozen  dump (pages+rest)  transfer  restore (read/criu/+docker)  gap   floor "
          " frozen/floor  link  pages/link  tail  tail/GB  tail/link")
    for mb in sorted({r.mb for r in rows}):
        floor, link = med([r for r in rows if r.mb == mb and r.mode == "raw"], "frozen_s"), \
            med([r for r in rows if r.mb == mb and r.link_s is not None], "link_s")
        for mode, tls, cc in sorted({(r.mode, r.tls, r.congestion) for r in rows if r.mode != "raw"},
                                    key=lambda k: (k[0] != "pages", not k[1], k[2] != "cubic", k[2])):
            got = [r for r in rows if r.mb == mb and (r.mode, r.tls, r.congestion) == (mode, tls, cc)
                   and r.network == "ports"]
            if not got:
                continue
            route = f"{mode}{' TLS' if tls else ' plain'}{'' if cc == 'cubic' else ' ' + (cc or 'own')}"
            frozen, pages = med(got, "frozen_s"), med(got, "dump_pages_s")
            restore, criu = med(got, "restore_s"), med(got, "restore_criu_s")
            tails = [r.last_page_s - r.frozen_s for r in got if r.last_page_s is not None]
            tail = statistics.median(tails) if tails else None
            print(f"{mb:5d} {route:14s} {f(frozen):>6}  {f(med(got, 'dump_s')):>5} "
                  f"({f(pages)}+{f(med(got, 'dump_rest_s'))})  {f(med(got, 'transfer_s')):>6}    {f(restore):>5} "
                  f"({f(med(got, 'restore_read_s'))}/{f(criu)}/+{f(restore - criu if restore and criu else None)})"
                  f"  {f(med(got, 'longest_gap_s'))}  {f(floor)}  "
                  f"{f(frozen / floor if frozen and floor else None, 1)}x  {f(link)}  "
                  f"{f(pages / link if pages and link else None, 1)}x  {f(tail)}  "
                  f"{f(tail / (mb / 1024) if tail is not None else None)}  "
                  f"{f(tail / link if tail is not None and link else None, 1)}x")


def report(rows: list[Row]) -> None:
    report_segment(rows)
    report_phases([r for r in rows if r.network != "segment" or r.mode == "raw"])
    bad = [r for r in rows if r.items_lost or r.writes_lost or r.kept is False
           or not r.state.startswith(("SUCCEEDED", "restored", "ROLLED_BACK" if r.fault else "SUCCEEDED"))]
    acked = sum(r.writes_acked for r in rows)
    print(f"\n{len(rows)} runs; items lost in {sum(1 for r in rows if r.items_lost)}, acknowledged writes lost: "
          f"{sum(r.writes_lost for r in rows)} of {acked}; load average {min(r.load for r in rows):.1f}-"
          f"{max(r.load for r in rows):.1f}")
    for r in bad:
        print(f"  NOT CLEAN: {r.mode} {r.mb} MB round {r.round} {r.network}: {r.state}, items lost {r.items_lost}, "
              f"writes lost {r.writes_lost}, connection {'kept' if r.kept else 'lost' if r.kept is False else '-'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256,1024,2048")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--dir", type=Path, help="use the lab running there (else a 2-node lab is brought up)")
    ap.add_argument("--routes", default="pages,post-copy",
                    help="the migration routes to time, comma-separated: pages (the default route), post-copy")
    ap.add_argument("--out", type=Path, help="also write every measurement as a JSON line here")
    ap.add_argument("--network", choices=("ports", "segment"), default="ports",
                    help="ports: a published port, a client reconnecting to either node; segment: the lab's "
                    "segment network (the address moves), ONE client connection never reopened")
    ap.add_argument("--rollback", action="store_true",
                    help="with --network segment: also a run per size with the target's disk filled after the dump")
    ap.add_argument("--tls", choices=("on", "off", "both"), default="on",
                    help="the page streams' TLS ([migration] tls); both: every migration of the run twice, in turn")
    ap.add_argument("--congestion", default="cubic",
                    help="the page streams' TCP congestion control ([migration] page_stream_congestion), "
                    "comma-separated to run every migration once with each in turn; own: each node's own "
                    "(e.g. --congestion cubic,own)")
    ap.add_argument("--warm-gb", type=int, default=14,
                    help="touch this many GB before every timed run (0: don't): this VM backs memory lazily")
    a = ap.parse_args()
    routes = a.routes.split(",")
    if not routes or set(routes) - {"pages", "post-copy"}:
        ap.error(f"--routes {a.routes}: name pages and/or post-copy, comma-separated")
    own = a.dir is None
    lab = Lab(a.dir or Path(tempfile.mkdtemp(prefix="peakpack-bench-")))
    if own:
        lab.up(nodes=2, cpus=2)
    rows: list[Row] = []
    tls = {"on": (True,), "off": (False,), "both": (True, False)}[a.tls]
    congestions = ["" if c == "own" else c for c in a.congestion.split(",")]
    try:
        root = memcached_rootfs()
        memcached_image(list(lab.layout.nodes))
        for rnd in range(a.rounds):
            for mb in (int(x) for x in a.sizes.split(",")):
                runs = [("raw", False, True, "")] + [(m, False, t, c) for m in routes for t in tls for c in congestions]
                runs += [("pages", True, tls[0], congestions[0])] if a.rollback and a.network == "segment" else []
                link_s = link(lab, root, mb)
                for mode, rollback, secure, congestion in runs:
                    warm(a.warm_gb)
                    if mode == "raw":
                        row = raw(lab, root, mb, rnd)
                        row.link_s = link_s
                    elif a.network == "segment":
                        row = migrated_on_segment(lab, mb, rnd, mode == "post-copy", rollback)
                    else:
                        row = migrated(lab, mb, rnd, mode == "post-copy", secure, congestion)
                    rows.append(row)
                    print(json.dumps(asdict(row)), flush=True)
                    if a.out:
                        with a.out.open("a") as out:
                            out.write(json.dumps(asdict(row)) + "\n")
    finally:
        for n in lab.layout.nodes:
            docker(n, "rm", "-f", "mc", check=False)
        if own:
            lab.down()
    report(rows)


if __name__ == "__main__":
    main()
