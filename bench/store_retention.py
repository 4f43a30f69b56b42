"""A store that lives for years, measured (a measurement, not a test):

    .venv/bin/python bench/store_retention.py                      # a year of 1,000 nodes, 2 containers each
    .venv/bin/python bench/store_retention.py --nodes 100 --days 30 --epoch-seconds 600

Fills a SQLite store with what `serve` writes for a cluster over DAYS (every epoch: one demand
row per container, one energy row per node and per container, two energy samples per node: the
RAPL zone and the busy time), then measures, before and after `[store]` retention has caught up
(default settings: 14 days of raw rows, then hours):

- an epoch's store work for the whole cluster: the previous demand rows (`demand.latest`, and the
  old unbounded form beside it), the forecast's window, each node's latest samples, the new rows,
  the reconciliation, power-rule and budget queries, a plan stored, one round of retention;
- the database: its file and the pages that hold data (the rest is free for reuse; VACUUM
  gives it back to the filesystem, which the script also times).

The default epoch is one hour, so a year of 1,000 nodes fits a development machine (about 61M
rows, a few GB); `--epoch-seconds 600` (the inventory's default) writes six times as many. The
figures are of one run on a noisy shared machine: compare the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peakpack.db.store import Store
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.model import StoreConfig
from peakpack.orchestrator.domain.records import DemandRecord, EnergyRow, EnergySample
from peakpack.orchestrator.domain.states import PlanStatus
from peakpack.orchestrator.observe.cluster import PREVIOUS_EPOCHS


def stamp(t: datetime) -> str:
    """A UTC instant as the store keeps it in SQLite (`schema.UtcDateTime`: naive UTC)."""
    return t.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def fill(store: Store, nodes: int, per_node: int, days: int, epoch: timedelta, now: datetime) -> int:
    """Every epoch's rows of the cluster over `days` ending at `now`; how many rows. Written
    through the driver in large transactions with the three tables' indexes built afterwards (the
    same database, much faster to make than row by row through the repositories)."""
    tables = ("container_demand", "energy", "energy_samples")
    epochs = int(timedelta(days=days) / epoch)
    seconds = epoch.total_seconds()
    raw = store.engine.raw_connection()
    cur = raw.cursor()
    cur.execute("PRAGMA synchronous=OFF")
    indexes = cur.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                          f"AND tbl_name IN ({', '.join('?' * len(tables))})", tables).fetchall()
    for name, _ in indexes:
        cur.execute(f"DROP INDEX {name}")
    rows = 0
    for e in range(epochs):
        t = now - (epochs - e) * epoch
        start, end = stamp(t), stamp(t + epoch)
        cur.executemany(
            "INSERT INTO container_demand (at, container, node, interval_s, cpu, cpu_time_ns, memory_mb, source) "
            "VALUES (?, ?, ?, ?, 0.4, ?, 256.0, 'cgroup')",
            [(start, f"app-{n}-{k}", f"node-{n}", seconds, int(e * seconds * 0.4e9))
             for n in range(nodes) for k in range(per_node)])
        cur.executemany(
            "INSERT INTO energy (node, container, start, \"end\", energy_j, source, idle_j, residual_j) "
            "VALUES (?, ?, ?, ?, ?, 'rapl', ?, ?)",
            [(f"node-{n}", f"app-{n}-{k}", start, end, 30.0 * seconds, None, None)
             for n in range(nodes) for k in range(per_node)]
            + [(f"node-{n}", None, start, end, 90.0 * seconds, 40.0 * seconds, 5.0 * seconds) for n in range(nodes)])
        cur.executemany(
            "INSERT INTO energy_samples (node, at, source, zone, energy_uj, max_energy_range_uj, boot_id, busy_ns) "
            "VALUES (?, ?, ?, ?, ?, ?, 'b', ?)",
            [(f"node-{n}", start, "rapl", "package-0", int(e * seconds * 9e7), 2**48, None) for n in range(nodes)]
            + [(f"node-{n}", start, "busy", "", None, None, int(e * seconds * 1e9)) for n in range(nodes)])
        rows += nodes * (2 * per_node + 3)
        if e % 200 == 199:
            raw.commit()
        if e % max(1, epochs // 20) == 0:
            print(f"  filled {e / epochs:4.0%} ({rows:,} rows)", file=sys.stderr, flush=True)
    raw.commit()
    print("  building the indexes", file=sys.stderr, flush=True)
    for _, sql in indexes:
        cur.execute(sql)
    raw.commit()
    cur.execute("PRAGMA synchronous=NORMAL")
    raw.close()
    return rows


def epoch_work(store: Store, nodes: int, per_node: int, epoch: timedelta, now: datetime,
               retention: StoreConfig) -> dict[str, float]:
    """One epoch's store traffic for the whole cluster, timed part by part (seconds)."""
    timed: dict[str, float] = {}

    def timing(name: str, fn) -> object:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        result = fn()
        timed[name] = time.perf_counter() - t0
        return result

    inv = demo_inventory()
    snap = demo_snapshot(inv)
    plan = make_plan(inv, snap, policy="noop")
    timing("previous demand rows (bounded)", lambda: store.demand.latest(since=now - PREVIOUS_EPOCHS * epoch))
    timing("previous demand rows (whole table, as before)", lambda: store.demand.latest())
    timing("forecast window (2 h)", lambda: store.demand.history(since=now - timedelta(hours=2)))
    timing("latest samples of every node", lambda: [store.energy.samples(f"node-{n}", s, since=now - 3 * epoch)
                                                   for n in range(nodes) for s in ("busy", "rapl")])
    at = now + timedelta(seconds=1)
    timing("new demand rows", lambda: store.demand.add(
        [DemandRecord(at, f"app-{n}-{k}", f"node-{n}", epoch.total_seconds(), 0.4, 1, 256.0, "cgroup")
         for n in range(nodes) for k in range(per_node)]))
    timing("new samples and energy rows", lambda: (
        store.energy.add_samples([EnergySample(f"node-{n}", at, "rapl", energy_uj=1) for n in range(nodes)]),
        store.energy.add([EnergyRow(f"node-{n}", now, at, 1.0, "rapl") for n in range(nodes)])))
    timing("reconcile, rules, budgets, expiry", lambda: (
        store.migrations.unfinished(), store.power.events(state="ONGOING"), store.plans.unfinished_actions(),
        store.plans.history(status=PlanStatus.APPLYING), store.power.woken_since(now - timedelta(hours=1)),
        store.migrations.moved_since(now - timedelta(hours=2)), store.disruption_since(now - timedelta(hours=1)),
        store.plans.expire(), store.approvals.pending()))
    timing("plan stored", lambda: store.plans.save(plan, "bench", snap))
    timing("one round of retention", lambda: store.prune(retention, now))
    return timed


def size(store: Store) -> tuple[int, int]:
    """(file bytes, bytes of pages holding data)."""
    with store.engine.connect() as c:
        page = c.exec_driver_sql("PRAGMA page_size").scalar() or 0
        pages = c.exec_driver_sql("PRAGMA page_count").scalar() or 0
        free = c.exec_driver_sql("PRAGMA freelist_count").scalar() or 0
    return page * pages, page * (pages - free)


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def report(label: str, timed: dict[str, float]) -> None:
    print(f"\n{label}: epoch store work {sum(v for k, v in timed.items() if 'as before' not in k):.2f} s")
    for name, seconds in timed.items():
        print(f"  {name:48s} {seconds * 1000:9.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--containers-per-node", type=int, default=2)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--epoch-seconds", type=int, default=3600)
    ap.add_argument("--dir", type=Path, default=None, help="where the store goes (default: a temp folder)")
    args = ap.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="peakpack-bench-store-"))
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'year.db'}"
    epoch = timedelta(seconds=args.epoch_seconds)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    retention = StoreConfig()
    print(f"{args.nodes} nodes x {args.containers_per_node} containers, {args.days} days at one epoch per "
          f"{args.epoch_seconds} s; store {url}; retention {retention}")
    with Store.open(url) as store:
        t0 = time.perf_counter()
        rows = fill(store, args.nodes, args.containers_per_node, args.days, epoch, now)
        print(f"filled {rows:,} rows in {time.perf_counter() - t0:.0f} s")
        before_size = size(store)
        before = epoch_work(store, args.nodes, args.containers_per_node, epoch, now, retention)
        report("a year of raw rows (before retention)", before)
        t0 = time.perf_counter()
        rounds = 0
        catch_up = StoreConfig(retention.raw_days, retention.hourly_days, retention.history_days, 10**6)
        while store.prune(catch_up, now):
            rounds += 1
        caught_up = time.perf_counter() - t0
        after_size = size(store)
        after = epoch_work(store, args.nodes, args.containers_per_node, epoch, now, retention)
        report(f"after retention caught up ({rounds} rounds of 1M rows, {caught_up:.0f} s)", after)
        t0 = time.perf_counter()
        with store.engine.connect() as c:
            c.exec_driver_sql("VACUUM")
        vacuumed = time.perf_counter() - t0
        final = size(store)
    print("\nsize: file / data")
    print(f"  before retention   {gb(before_size[0])} / {gb(before_size[1])}")
    print(f"  after retention    {gb(after_size[0])} / {gb(after_size[1])}")
    print(f"  after VACUUM       {gb(final[0])} ({vacuumed:.0f} s)")
    total = lambda t: sum(v for k, v in t.items() if "as before" not in k)  # noqa: E731
    print(f"\nratios: data after/before {after_size[1] / before_size[1]:.3f}; epoch store work after/before "
          f"{total(after) / total(before):.2f}; previous demand rows bounded/whole table "
          f"{before['previous demand rows (bounded)'] / before['previous demand rows (whole table, as before)']:.4f}")


if __name__ == "__main__":
    main()
