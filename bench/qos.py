"""The QoS guard against a best-effort CPU hog, on the real lab (a measurement, not a test; needs
root and scripts/install-system-deps.sh).

    .venv/bin/python bench/qos.py [--dir DIR] [--seconds 15] [--hogs 2] [--repeat 1]

Node-1 of a 1-CPU, 512 MB lab (brought up in a temporary folder and taken down after, or the lab
already up in `--dir`) runs a latency-sensitive busybox httpd that the host times every 20 ms. Its
guard is installed as peakpack installs it (`qos install`). Four phases of `--seconds` each:

    alone      the web, probed; no hog
    hog alone  the hogs (`--hogs` busy loops labelled peakpack.qos=be), no probing, guard stopped:
               the CPU the hogs get alone
    no guard   the hogs and the probed web, guard stopped (the hogs only have the lowest weight)
    guard      the same with the guard running, started with the hogs: the window includes the
               guard's reaction

and a fifth, `guard steady`, right after (the cap the guard holds). Printed per phase: p50 and p99
latency, the web's stall (PSI `some` share) and the hogs' cores; then the ratios the issue sets
targets for (p99 with the guard <= 1.5x p99 alone, while the hogs keep >= 50% of the CPU they get
alone) and the reaction time: hogs started -> quota written (`cpu_suppress`), and first breach ->
quota written. Every number is from this one run: the host's cores are shared with other jobs, so
run it a few times (`--repeat`) and read ranges.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peakpack.lab import Lab
from tests.support.qos_load import (
    HOG,
    WEB,
    Probe,
    guard_command,
    guard_events,
    percentile,
    pid_of,
    remove,
    run,
    window,
)

REPO = Path(__file__).resolve().parents[1]
NODE = "node-1"


def phase(name: str, probe: Probe | None, web: int | None, hogs: list[int], seconds: float) -> dict:
    """One window: latencies (when probed), the web's stall and the hogs' cores."""
    pids = [p for p in (web, *hogs) if p is not None]
    latencies, spans = window(probe, pids, seconds)
    by_pid = dict(zip(pids, spans, strict=True))
    row = {"phase": name, "hog_cores": round(sum(by_pid[p][0] for p in hogs), 3) if hogs else None,
           "web_stall": round(by_pid[web][1], 3) if web is not None else None}
    if latencies:
        row.update(p50_ms=round(percentile(latencies, 0.5), 2), p99_ms=round(percentile(latencies, 0.99), 2),
                   requests=len(latencies))
    print(json.dumps(row), flush=True)
    return row


def start_hogs(lab: Lab, n: int) -> tuple[list[int], float]:
    names = [f"hog{i}" for i in range(1, n + 1)]
    for name in names:
        run(lab, NODE, name, HOG, qos="be")
    started = [lab.exec(NODE, ["docker", "inspect", "-f", "{{.State.StartedAt}}", h]).stdout.strip() for h in names]
    first = min(datetime.fromisoformat(s[:26] + "+00:00").timestamp() for s in started)
    return [pid_of(lab, NODE, h) for h in names], first


def once(lab: Lab, seconds: float, n: int) -> dict:
    hog_names = [f"hog{i}" for i in range(1, n + 1)]
    remove(lab, NODE, "web", *hog_names)
    run(lab, NODE, "web", WEB, qos=None, publish="8080:80")
    time.sleep(1)
    probe = Probe(lab.node(NODE).address)
    web = pid_of(lab, NODE, "web")
    guard_command(lab, NODE, "stop")
    alone = phase("alone", probe, web, [], seconds)
    hogs, _ = start_hogs(lab, n)
    hog_alone = phase("hog alone", None, None, hogs, seconds)
    no_guard = phase("no guard", probe, web, hogs, seconds)
    remove(lab, NODE, *hog_names)
    seen = len(guard_events(lab, NODE))
    guard_command(lab, NODE, "start")
    time.sleep(2)  # the guard's first checks, with nothing to do yet
    hogs, hogs_at = start_hogs(lab, n)
    guarded = phase("guard", probe, web, hogs, seconds)
    steady = phase("guard steady", probe, web, hogs, seconds)
    suppress = [e for e in guard_events(lab, NODE, "cpu_suppress") if e["seq"] > seen][:1]
    remove(lab, NODE, "web", *hog_names)
    return {
        "p99_guard_over_alone": round(guarded["p99_ms"] / alone["p99_ms"], 2),
        "p99_steady_over_alone": round(steady["p99_ms"] / alone["p99_ms"], 2),
        "p99_no_guard_over_alone": round(no_guard["p99_ms"] / alone["p99_ms"], 2),
        "hog_cpu_guard_over_alone": round(guarded["hog_cores"] / hog_alone["hog_cores"], 2),
        "hog_cpu_steady_over_alone": round(steady["hog_cores"] / hog_alone["hog_cores"], 2),
        "reaction_s": round(suppress[0]["ts"] - hogs_at, 2) if suppress else None,
        "first_breach_to_quota_s": round(suppress[0]["ts"] - suppress[0]["first_breach_ts"], 2) if suppress else None,
        "targets_met": bool(suppress) and guarded["p99_ms"] <= 1.5 * alone["p99_ms"]
        and guarded["hog_cores"] >= 0.5 * hog_alone["hog_cores"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, help="a lab already up (its node-1 is used); default: a new one")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--hogs", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    own = args.dir is None
    lab = Lab(Path(tempfile.mkdtemp(prefix="peakpack-qosbench-")) if own else args.dir)
    if own:
        lab.up(nodes=1, cpus=1, memory_mb=512, log=lambda _: None)
    try:
        subprocess.run([sys.executable, "-m", "peakpack", "qos", "install", "--inventory", str(lab.inventory_path),
                        NODE], check=True, cwd=REPO, capture_output=True)
        with open("/proc/loadavg") as f:
            print(json.dumps({"load_average": f.read().split()[:3], "hogs": args.hogs, "seconds": args.seconds}))
        for _ in range(args.repeat):
            print(json.dumps(once(lab, args.seconds, args.hogs)), flush=True)
    finally:
        if own:
            lab.down(log=lambda _: None)


if __name__ == "__main__":
    main()
