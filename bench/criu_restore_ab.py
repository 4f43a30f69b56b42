"""Raw CRIU restore time, two builds in turn (a measurement, not a test): a process holding MB of
touched memory is dumped once (by --a) into a folder on this host's disk, then restored with
`criu restore -d` by --a and --b alternately, each restore killed and its pid freed before the next.
Prints every time, the medians and the median of the pairs' ratios A/B (pairs keep the ratio
meaningful on a machine whose speed drifts). Run as root.

    .venv/bin/python bench/criu_restore_ab.py --b /path/to/other/criu [--a criu] [--mb 1024] [--pairs 10]

--b is typically a build without one of scripts/criu-patches/ (e.g. patch 0005, which populates
the pages a restore reads before reading them): build it from the same source with that patch left
out. The images stay in the page cache (read once before the first restore), so the figure is the
restore's, not the disk's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

#: a process in a session of its own (CRIU dumps a session leader without --shell-job) holding
#: argv[1] MB, one byte written per page; "ready" appears in argv[2] once it is all touched
HOLDER = """
import os, sys, time
os.setsid()
b = bytearray(int(sys.argv[1]) << 20)
b[::4096] = b"x" * len(b[::4096])
for fd in (0, 1, 2):
    os.close(fd)
open(sys.argv[2], "w").close()
time.sleep(3600)
"""


def dumped(criu: str, mb: int, folder: Path) -> int:
    """The holder's pid, once `criu` has dumped it into `folder` (which kills it)."""
    ready = folder / "ready"
    proc = subprocess.Popen(["python3", "-c", HOLDER, str(mb), str(ready)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not ready.exists():
        if proc.poll() is not None:
            raise SystemExit("the memory holder exited before it was ready")
        time.sleep(0.1)
    ready.unlink()
    subprocess.run([criu, "dump", "-t", str(proc.pid), "-D", str(folder), "-o", "dump.log"], check=True)
    proc.wait()
    for image in folder.glob("pages-*.img"):
        image.read_bytes()  # into the page cache
    return proc.pid


def restored(criu: str, folder: Path, pid: int) -> float:
    """Seconds `criu restore -d` took; the restored process is then killed and its pid freed."""
    t0 = time.monotonic()
    subprocess.run([criu, "restore", "-D", str(folder), "-d", "-o", "restore.log"], check=True,
                   stderr=subprocess.DEVNULL)
    took = time.monotonic() - t0
    os.kill(pid, 9)
    while Path(f"/proc/{pid}").exists():
        time.sleep(0.02)
    time.sleep(0.5)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default="criu", help="the build measured (default: criu on PATH)")
    ap.add_argument("--b", required=True, help="the build it is measured against")
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--pairs", type=int, default=10)
    args = ap.parse_args()
    a, b = (shutil.which(x) or x for x in (args.a, args.b))
    folder = Path(tempfile.mkdtemp(prefix="criu-restore-ab-", dir="/var/tmp"))
    try:
        pid = dumped(a, args.mb, folder)
        times: dict[str, list[float]] = {"A": [], "B": []}
        for _ in range(args.pairs):
            times["A"].append(restored(a, folder, pid))
            times["B"].append(restored(b, folder, pid))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for name, binary in (("A", a), ("B", b)):
        print(f"{name} {binary}: " + " ".join(f"{t:.3f}" for t in times[name]))
    ratio = statistics.median(x / y for x, y in zip(times["A"], times["B"], strict=True))
    print(f"{args.mb} MB restore, medians of {args.pairs}: A {statistics.median(times['A']):.3f} s, "
          f"B {statistics.median(times['B']):.3f} s, pairs' ratio A/B {ratio:.2f}")


if __name__ == "__main__":
    main()
