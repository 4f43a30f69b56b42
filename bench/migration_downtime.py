"""Live-migration downtime on the real lab for containers holding 16, 64 and 256 MB of touched
memory and 0, 64 and 512 MB of volume data, plus as much again written into their writable layer
(a measurement, not a test; needs root and scripts/install-system-deps.sh).

    .venv/bin/python bench/migration_downtime.py [--sizes 16,64,256] [--volumes 0,64,512] [--dir DIR]

Brings up a 2-node lab (or uses a running one with --dir). For every pair it migrates one
container from node-1 to node-2 and prints the frozen time, the total time and the bytes moved
while frozen, with the frozen time split into CRIU dump, transfer, restore and orchestration (the
rest: restart policy, docker's own bookkeeping, verification); next to it, the plain path on one
node in the same run: `docker checkpoint create` + `docker start --checkpoint` of an identical
container. Ratios printed at the end:
- volume effect: frozen time with 512 MB of volume data and 512 MB in the layer / with none
  (target <= 1.10: volume and layer data move before the freeze);
- orchestration overhead: (frozen - transfer) / plain (target <= 1.3: what we add on top of
  docker's own checkpoint and restore, the node-to-node copy aside).
These VMs are noisy: compare ratios within one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.remote.shell import RemoteShell

IMAGE = "peakpack/busybox:lab"
#: $2 MB of random data in the writable layer (copied like a volume, before the freeze), then a
#: shell variable of $1 MB of 'x' keeps that much anonymous memory touched
HOLD = ('head -c "$2"m /dev/urandom > /layer.bin; x=$(head -c "$1"m /dev/zero | tr "\\0" x); echo ready; '
        'while :; do sleep 1; done')


@dataclass
class Row:
    mb: int
    volume_mb: int
    frozen: float
    total: float
    frozen_mb: float
    dump: float
    transfer: float
    restore: float
    plain: float
    state: str

    @property
    def orchestration(self) -> float:
        return self.frozen - self.dump - self.transfer - self.restore


def run(lab: Lab, node: str, *argv: str) -> str:
    proc = lab.exec(node, list(argv))
    if proc.returncode:
        raise SystemExit(f"{node}: {' '.join(argv[:4])}: {proc.stderr.strip()}")
    return proc.stdout


def start(lab: Lab, node: str, name: str, mb: int, volume_mb: int) -> None:
    """A container holding `mb` MB of memory, `volume_mb` MB in a volume and as much in its layer."""
    mount: list[str] = []
    if volume_mb:
        run(lab, node, "docker", "volume", "create", f"{name}-data")
        run(lab, node, "docker", "run", "--rm", "-v", f"{name}-data:/data", IMAGE, "sh", "-c",
            f"head -c {volume_mb}m /dev/urandom > /data/blob")
        mount = ["-v", f"{name}-data:/data"]
    run(lab, node, "docker", "run", "-d", "--name", name, "--network", "none", *mount, IMAGE, "sh", "-c", HOLD,
        "sh", str(mb), str(volume_mb))
    deadline = time.monotonic() + 300
    while "ready" not in run(lab, node, "docker", "logs", name):
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} did not fill its memory in time")
        time.sleep(0.5)


def remove(lab: Lab, node: str, name: str) -> None:
    lab.exec(node, ["docker", "rm", "-f", name])
    lab.exec(node, ["docker", "volume", "rm", "-f", f"{name}-data"])


def plain(lab: Lab, mb: int, volume_mb: int) -> float:
    """docker's own checkpoint + restore of an identical container on one node: seconds frozen."""
    name = f"plain{mb}v{volume_mb}"
    start(lab, "node-1", name, mb, volume_mb)
    t0 = time.monotonic()
    run(lab, "node-1", "docker", "checkpoint", "create", name, "cp")
    run(lab, "node-1", "docker", "start", "--checkpoint", "cp", name)
    frozen = time.monotonic() - t0
    remove(lab, "node-1", name)
    return frozen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16,64,256")
    ap.add_argument("--volumes", default="0,64,512", help="MB of data in a volume, and as much again in the layer")
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    own = args.dir is None
    lab = Lab(args.dir or Path(tempfile.mkdtemp(prefix="peakpack-bench-")))
    if own:
        lab.up(nodes=2, cpus=2, log=lambda text: print(f"# {text}", file=sys.stderr))
    rows: list[Row] = []
    try:
        inv = load_inventory(lab.inventory_path)
        print(f"{'MB':>4} {'vol+layer MB':>12} {'frozen s':>8} {'total s':>7} {'MB frozen':>9} {'dump s':>6} "
              f"{'xfer s':>6} {'rest. s':>7} {'orch. s':>7} {'plain s':>7} {'frozen/plain':>12} {'state':>9}")
        with Store.open(f"sqlite:///{lab.dir / 'bench.db'}") as store, RemoteShell(inv) as shell:
            for mb in (int(x) for x in args.sizes.split(",")):
                for volume_mb in (int(x) for x in args.volumes.split(",")):
                    name = f"hold{mb}v{volume_mb}"
                    start(lab, "node-1", name, mb, volume_mb)
                    m = Migration(shell.pool, shell.engines, store, inv, name, "node-1", "node-2")
                    r = shell.call(m.run())
                    t = m.t
                    row = Row(mb, volume_mb, (t.frozen_ms or 0) / 1e3, (t.total_ms or 0) / 1e3, (t.bytes or 0) / 1e6,
                              (t.checkpoint_ms or 0) / 1e3, (t.transfer_ms or 0) / 1e3, (t.restore_ms or 0) / 1e3,
                              plain(lab, mb, volume_mb), r.state.value)
                    rows.append(row)
                    print(f"{mb:4d} {volume_mb:12d} {row.frozen:8.2f} {row.total:7.2f} {row.frozen_mb:9.1f} "
                          f"{row.dump:6.2f} {row.transfer:6.2f} {row.restore:7.2f} {row.orchestration:7.2f} "
                          f"{row.plain:7.2f} {row.frozen / row.plain:12.2f} {row.state:>9}", flush=True)
                    remove(lab, "node-2", name)
    finally:
        if own:
            lab.down(log=lambda _: None)
    by = {(r.mb, r.volume_mb): r for r in rows}
    vols = sorted({r.volume_mb for r in rows})
    for mb in sorted({r.mb for r in rows}):
        if len(vols) > 1 and (mb, vols[0]) in by and (mb, vols[-1]) in by:
            print(f"{mb} MB: frozen with {vols[-1]} MB of volume and layer each / with {vols[0]} MB: "
                  f"{by[(mb, vols[-1])].frozen / by[(mb, vols[0])].frozen:.2f} (target <= 1.10)")
    overhead = [(r.frozen - r.transfer) / r.plain for r in rows if r.plain]
    if overhead:
        print(f"orchestration overhead (frozen - transfer) / plain: max {max(overhead):.2f}, "
              f"mean {sum(overhead) / len(overhead):.2f} (target <= 1.3)")


if __name__ == "__main__":
    main()
