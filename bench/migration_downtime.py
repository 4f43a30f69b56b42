"""Live-migration downtime on the real lab for containers holding 16, 64 and 256 MB of touched
memory (a measurement, not a test; needs root and scripts/install-system-deps.sh).

    sudo .venv/bin/python bench/migration_downtime.py [--sizes 16,64,256] [--dir DIR]

Brings up a 2-node lab (or uses a running one with --dir), migrates one container per size from
node-1 to node-2 and prints frozen time, total time, their ratio and the checkpoint's size and
throughput. These VMs are noisy: compare ratios within one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from db.store import Store  # noqa: E402
from migrate.handler import Migration  # noqa: E402
from lab import Lab  # noqa: E402
from orchestrator.remote import RemoteShell  # noqa: E402
from orchestrator.config import load_inventory  # noqa: E402

#: a shell variable of N MB of 'x' keeps N MB of anonymous memory touched
HOLD = 'x=$(head -c "$1"m /dev/zero | tr "\\0" x); echo ready; while :; do sleep 1; done'


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16,64,256")
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    own = args.dir is None
    lab = Lab(args.dir or Path(tempfile.mkdtemp(prefix="peakpack-bench-")))
    if own:
        lab.up(nodes=2, cpus=2, log=lambda text: print(f"# {text}", file=sys.stderr))
    try:
        inv = load_inventory(lab.inventory_path)
        print(f"{'MB':>5} {'checkpoint MB':>13} {'frozen s':>9} {'total s':>8} {'frozen/total':>12} {'MB/s frozen':>11} {'state':>10}")
        with Store.open(f"sqlite:///{lab.dir / 'bench.db'}") as store, RemoteShell(inv) as shell:
            for mb in (int(x) for x in args.sizes.split(",")):
                name = f"hold{mb}"
                lab.exec("node-1", ["docker", "run", "-d", "--name", name, "--network", "none",
                                    "peakpack/busybox:lab", "sh", "-c", HOLD, "sh", str(mb)])
                deadline = time.monotonic() + 300
                while "ready" not in lab.exec("node-1", ["docker", "logs", name]).stdout:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{name} did not fill its memory in time")
                    time.sleep(0.5)
                r = shell.call(Migration(shell.pool, store, inv, name, "node-1", "node-2").run())
                m = next(x for x in store.list_migrations() if x.id == r.migration_id)
                size = (m.bytes or 0) / 1e6
                frozen, total = (m.frozen_ms or 0) / 1000, (m.total_ms or 0) / 1000
                print(f"{mb:5d} {size:13.1f} {frozen:9.2f} {total:8.2f} {frozen / total if total else 0:12.2f} "
                      f"{size / frozen if frozen else 0:11.1f} {m.state.value:>10}", flush=True)
                lab.exec("node-2", ["docker", "rm", "-f", name])
    finally:
        if own:
            lab.down(log=lambda _: None)


if __name__ == "__main__":
    main()
