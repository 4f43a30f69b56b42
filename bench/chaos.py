"""Chaos: N live migrations on the real lab, each hit by a random fault at a random moment, then
healed and reconciled; prints what happened to the containers (a measurement, not a test; needs
root and scripts/install-system-deps.sh).

    .venv/bin/python bench/chaos.py [--migrations 100] [--seed 1] [--max-minutes 80] [--dir DIR]

Three containers with an in-memory counter (each prints "<process id> <count>") are moved around a
3-node lab, with the inventory's defaults (TLS on every page stream). Per migration: a random
container, a random target, a random fault (network partition, dockerd killed, a full disk, a power
cut of the source or the target, the migrating process killed with SIGKILL, a second controller
taking the store's lease over and settling the migration while the first goes on until it is
fenced, or none) injected at a random step after a random delay of up to a second, from a thread
(so it lands within the step, not only at its start). The migrating controller holds the store's
lease ("chaos-a"), the reconciling one takes it over ("chaos-b"), as a standby would. `--migrations` counts the faulted
ones, those whose fault fired (a step may never come, or a migration may end before the delay);
the others run too and are counted apart. Then every fault is undone,
reconciliation runs until nothing is unsettled, and every container is checked:
- lost: running on no node; doubled: running on two; left over: a stopped copy on a second node;
- state lost: running, but as a new process (its counter restarted).
A power cut kills the containers of its node, and so does a killed dockerd once it starts again
(docker without live-restore stops them, and in the lab leaves them exited). A container that ran
on the node hit that way while no finished checkpoint of it existed (the journal has no
checkpointing step done before the fault, or its migration had ended) died with its node, as it
would have without any migration (docs/migration.md names the case): it is counted apart, and
when left exited the bench starts it again, as an operator would. Any other container found
stopped is lost, and any other new process is state lost: peakpack had a checkpoint to restore.
Printed: migrations tried, faults by kind, outcomes by state, the counts above (targets: 0 lost,
0 doubled, 0 state lost), and the time from the fault to everything settled.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.faults import Fault
from peakpack.lab.node import start_node, stop_node
from peakpack.migrate.batch import reconcile_migrations
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.errors import FencedError
from peakpack.orchestrator.domain.model import Inventory
from peakpack.orchestrator.domain.records import MigrationRecord, StepRecord
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.power.ipmi import power_probe

REPO = Path(__file__).resolve().parents[1]
IMAGE = "peakpack/busybox:lab"
COUNTER = 'id=$RANDOM; i=0; while :; do i=$((i+1)); echo "$id $i"; sleep 0.1; done'
STEPS = ("creating", "precopy", "arming", "checkpointing", "transferring", "restoring", "verifying", "settling")
FAULTS = ("none", "partition", "kill-dockerd", "fill-disk", "power-cut", "sigkill", "takeover")
KILLED = """
import os, signal, sys, threading
from peakpack.db.store import Store
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.remote.shell import RemoteShell
inventory, db, name, source, target, step, delay = sys.argv[1:]
inv = load_inventory(inventory)

async def die(now):
    if now == step:  # from a thread: the step runs on meanwhile, so the kill lands within it
        timer = threading.Timer(float(delay), os.kill, (os.getpid(), signal.SIGKILL))
        timer.daemon = True  # a migration that ends first ends the process before it
        timer.start()

with RemoteShell(inv) as shell, Store.open(db) as store:
    shell.call(Migration(shell.pool, shell.engines, store, inv, name, source, target, hook=die).run())
"""


def where(lab: Lab, name: str) -> dict[str, bool]:
    """node -> running? for every node holding a copy."""
    found = {}
    for n in lab.layout.nodes:
        proc = lab.exec(n.name, ["docker", "inspect", "-f", "{{.State.Running}}", name], timeout=60)
        if proc.returncode == 0:
            found[n.name] = proc.stdout.strip() == "true"
    return found


def process_id(lab: Lab, node: str, name: str) -> int | None:
    out = lab.exec(node, ["docker", "logs", "--tail", "1", name], timeout=60).stdout.split()
    return int(out[0]) if out else None


def lead(store: Store, owner: str, other: str) -> Store:
    """`store` fenced with the lease `owner` takes over from `other` (as a standby would)."""
    token = store.lease.acquire(owner, 600, replacing=other)
    if token is None:
        raise SystemExit(f"{owner} could not take the lease")
    store.fence(token)
    return store


def take_over(inv: Inventory, db: str, probe: object) -> None:
    """A second controller takes the lease and settles what is open, while the first goes on."""
    with RemoteShell(inv) as shell, Store.open(db) as store:
        shell.call(reconcile_migrations(shell.pool, shell.engines, lead(store, "chaos-b", "chaos-a"), probe,
                                        inventory=inv))


def inject(lab: Lab, kind: str, node: str) -> None:
    if kind == "partition":
        lab.fault(node, Fault.PARTITION)
    elif kind == "kill-dockerd":
        lab.fault(node, Fault.KILL_DOCKERD)
    elif kind == "fill-disk":
        lab.fault(node, Fault.FILL_DISK)
    elif kind == "power-cut":
        stop_node(lab.node(node))


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # SQLite keeps no zone


def died_with_node(n: str, side: str, at: datetime, ran_on: str, m: MigrationRecord, steps: list[StepRecord]) -> bool:
    """Container `n`, on `ran_on` before migration `m`, came back as a new process after a power
    cut or a killed dockerd on `side` at `at`: it died with that node unless a finished checkpoint
    of it existed then (peakpack should have restored it from that)."""
    if n != m.container:
        return side == ran_on
    if m.finished_at is not None and _utc(m.finished_at) <= at:  # settled before the fault: an ordinary container
        return side == (m.target if m.state is MigrationState.SUCCEEDED else m.source)
    checkpointed = any(s.step == "checkpointing" and s.state == "DONE" and s.finished_at is not None
                       and _utc(s.finished_at) <= at for s in steps)
    return side == m.source and not checkpointed


def heal(lab: Lab) -> None:
    for n in lab.layout.nodes:
        start_node(n)
    lab.clear_faults()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--migrations", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-minutes", type=float, default=80.0)
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.max_minutes * 60
    own = args.dir is None
    lab = Lab(args.dir or Path(tempfile.mkdtemp(prefix="peakpack-chaos-")))
    if own:
        lab.up(nodes=3, cpus=2, log=lambda text: print(f"# {text}", file=sys.stderr))
    names = ["chaos-a", "chaos-b", "chaos-c"]
    db = f"sqlite:///{lab.dir / 'chaos.db'}"
    faults: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    lost = doubled = left_over = state_lost = died = tried = faulted = 0
    recovery: list[float] = []
    try:
        for i, name in enumerate(names):
            lab.exec(f"node-{i + 1}", ["docker", "run", "-d", "--name", name, "--network", "none", "--restart",
                                       "unless-stopped", "--stop-timeout", "1", IMAGE, "sh", "-c", COUNTER])
        time.sleep(2)
        inv = load_inventory(lab.inventory_path)
        probe = power_probe(inv)
        ids = {n: process_id(lab, f"node-{i + 1}", n) for i, n in enumerate(names)}
        node_of = {n: f"node-{i + 1}" for i, n in enumerate(names)}
        while faulted < args.migrations:
            if time.monotonic() > deadline:
                print(f"# time is up after {faulted} faulted migrations", file=sys.stderr)
                break
            healthy = {n: [node for node, up in where(lab, n).items() if up] for n in names}
            healthy = {n: nodes for n, nodes in healthy.items() if len(nodes) == 1}  # lost/doubled ones were counted
            if not healthy:
                print("# no container left to migrate", file=sys.stderr)
                break
            name = rng.choice(sorted(healthy))
            source = healthy[name][0]
            target = rng.choice([n.name for n in lab.layout.nodes if n.name != source])
            kind, step, delay = rng.choice(FAULTS), rng.choice(STEPS), rng.uniform(0, 1.0)
            side = rng.choice((source, target))
            label = kind if kind in ("none", "sigkill", "takeover") else \
                f"{kind} ({'source' if side == source else 'target'})"
            hit_at: list[float] = []
            hit_wall: list[datetime] = []
            threads: list[threading.Thread] = []
            tried += 1
            if kind == "sigkill":
                killed = subprocess.run([sys.executable, "-c", KILLED, str(lab.inventory_path), db, name, source,
                                         target, step, f"{delay:.2f}"], cwd=REPO, capture_output=True, timeout=900)
                if killed.returncode == -signal.SIGKILL:  # else the migration ended before the timer fired
                    hit_at.append(time.monotonic())
            else:
                async def hook(now: str, kind: str = kind, step: str = step, side: str = side,
                               delay: float = delay, hit_wall: list = hit_wall, hit_at: list = hit_at,
                               threads: list = threads) -> None:
                    if now == step and kind != "none":
                        def later() -> None:
                            time.sleep(delay)
                            hit_wall.append(datetime.now(UTC))
                            hit_at.append(time.monotonic())
                            if kind == "takeover":
                                take_over(inv, db, probe)
                            else:
                                inject(lab, kind, side)
                        threads.append(threading.Thread(target=later, daemon=True))
                        threads[-1].start()

                with RemoteShell(inv) as shell, Store.open(db) as store:
                    try:
                        shell.call(Migration(shell.pool, shell.engines, lead(store, "chaos-a", "chaos-b"), inv, name,
                                             source, target, hook=hook, bmc_power=probe).run())
                    except FencedError:
                        pass  # the second controller took over: it settles the migration
                for t in threads:  # a fault scheduled late in the last step has landed before healing
                    t.join(300)
            if hit_at:  # a fault counts once it fired: its step may never come, or end first
                faulted += 1
                faults[label] += 1
            heal(lab)
            with RemoteShell(inv) as shell, Store.open(db) as store:
                lead(store, "chaos-b", "chaos-a")
                for _ in range(5):
                    shell.call(reconcile_migrations(shell.pool, shell.engines, store, probe, inventory=inv))
                    if not store.migrations.unfinished():
                        break
                    time.sleep(3)
                last = max(store.migrations.history(), key=lambda m: m.id)
                steps = store.migrations.steps(last.id)
                outcomes[last.state.value] += 1
            if hit_at:
                recovery.append(time.monotonic() - hit_at[0])
            killer = kind in ("power-cut", "kill-dockerd") and bool(
                hit_wall
            )  # these kill every container of their node
            for n in names:
                copies = where(lab, n)
                up = [node for node, is_up in copies.items() if is_up]
                if not up and len(copies) == 1 and killer and died_with_node(n, side, hit_wall[0], node_of[n],
                                                                             last, steps):
                    died += 1
                    lab.exec(next(iter(copies)), ["docker", "start", n], timeout=120)
                    copies = where(lab, n)
                    up = [node for node, is_up in copies.items() if is_up]
                    ids[n] = process_id(lab, up[0], n) if up else ids[n]
                lost += not up
                doubled += len(up) > 1
                left_over += len(copies) > len(up) and bool(up)
                if not up:
                    print(f"# lost: {n} ({copies}) after {kind} on {side} at {step} "
                          f"(migration {last.id} {last.state.value}: {last.reason})", file=sys.stderr)
                else:
                    now_id = process_id(lab, up[0], n)
                    if now_id != ids[n]:
                        if killer and died_with_node(n, side, hit_wall[0], node_of[n], last, steps):
                            died += 1
                        else:
                            state_lost += 1
                            print(f"# state lost: {n} on {up[0]} after {kind} on {side} at {step} "
                                  f"(migration {last.id} {last.state.value}: {last.reason})", file=sys.stderr)
                        ids[n] = now_id
                    node_of[n] = up[0]
            print(f"{tried:3d} {name} {source}->{target} {kind:12s} at {step:13s} +{delay:.2f}s"
                  f"{'' if hit_at or kind == 'none' else ' (not fired)'}: {last.state.value}", flush=True)
    finally:
        if own:
            lab.down(log=lambda _: None)
    print(f"\nmigrations tried: {tried} ({faulted} with a fault that fired, {tried - faulted} without)")
    print("faults fired: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())))
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print(f"containers lost: {lost} (target 0); doubled: {doubled} (target 0); stopped copies left over: "
          f"{left_over}; state lost: {state_lost}; died with their node or daemon before a checkpoint: "
          f"{died}")
    if recovery:
        recovery.sort()
        print(f"time from fault to settled: median {recovery[len(recovery) // 2]:.1f} s, max {recovery[-1]:.1f} s")


if __name__ == "__main__":
    main()
