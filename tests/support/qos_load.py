"""Real contention on a lab node, for the QoS tests (tests/integration/test_qos.py) and the bench
(bench/qos.py): a latency-sensitive HTTP server timed by a client on the host, best-effort CPU
hogs and a best-effort container that grows its memory, and what the node's cgroups and its QoS
guard say about them. Everything is read from the host: lab nodes share its kernel and files."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from peakpack.lab import Lab
from peakpack.lab.image import LAB_IMAGE
from peakpack.qos.guard.parse import parse_cpus
from peakpack.qos.report import ARCHIVE

CGROUP = Path("/sys/fs/cgroup")
#: busybox httpd forks a child per request: each request needs the CPU at once, so it waits when
#: the node is busy
WEB = "mkdir -p /www && echo hello > /www/index.html && exec httpd -f -p 80 -h /www"
HOG = "while :; do :; done"
#: grows by 4 MiB five times a second (tail keeps every line it has not printed: /dev/zero has none)
GROW = "while :; do head -c 4194304 /dev/zero; sleep 0.2; done | tail"


def run(lab: Lab, node: str, name: str, command: str, *, qos: str | None, publish: str | None = None) -> None:
    labels = [] if qos is None else ["--label", f"peakpack.qos={qos}"]
    ports = [] if publish is None else ["-p", publish]
    proc = lab.exec(node, ["docker", "run", "-d", "--name", name, *labels, *ports, "--stop-timeout", "1",
                           LAB_IMAGE, "sh", "-c", command])
    assert proc.returncode == 0, proc.stderr


def remove(lab: Lab, node: str, *names: str) -> None:
    lab.exec(node, ["docker", "rm", "-f", *names])


def pid_of(lab: Lab, node: str, name: str) -> int:
    proc = lab.exec(node, ["docker", "inspect", "-f", "{{.State.Pid}}", name])
    return int(proc.stdout.strip() or 0)


def running(lab: Lab, node: str, name: str) -> bool:
    proc = lab.exec(node, ["docker", "inspect", "-f", "{{.State.Running}}", name])
    return proc.stdout.strip() == "true"


def cgroup_dir(pid: int, hierarchy: str) -> Path:
    """The container's folder in one hierarchy: "cpu", "cpuacct", "memory" (v1) or "unified" (v2)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        if (hierarchy == "unified" and hid == "0") or hierarchy in controllers.split(","):
            return CGROUP / hierarchy / path.lstrip("/")
    raise LookupError(f"pid {pid} has no {hierarchy} cgroup")


@dataclass
class Counters:
    """A container's CPU time and CPU stall (PSI `some`) counters, to take deltas of."""

    pid: int
    at: float = 0.0
    cpu_ns: int = 0
    some_us: int = 0

    def read(self) -> Counters:
        cpu = int((cgroup_dir(self.pid, "cpuacct") / "cpuacct.usage").read_text())
        some = 0
        for line in (cgroup_dir(self.pid, "unified") / "cpu.pressure").read_text().splitlines():
            if line.startswith("some"):
                some = int(line.rsplit("total=", 1)[1])
        return Counters(self.pid, time.monotonic(), cpu, some)

    def since(self, before: Counters) -> tuple[float, float]:
        """(cores used, share of the time stalled) between `before` and these."""
        dt = self.at - before.at
        return (self.cpu_ns - before.cpu_ns) / 1e9 / dt, (self.some_us - before.some_us) / 1e6 / dt


def window(probe: Probe | None, pids: list[int], seconds: float) -> tuple[list[float], list[tuple[float, float]]]:
    """One window of `seconds`: the probe's latencies (when given, it probes meanwhile) and each
    container's (cores, stall share) over it."""
    latencies: list[float] = []
    thread = threading.Thread(target=lambda: latencies.extend(probe.measure(seconds))) if probe else None
    if thread:
        thread.start()
    before = [Counters(p).read() for p in pids]
    time.sleep(seconds)
    spans = [Counters(p).read().since(b) for p, b in zip(pids, before, strict=True)]
    if thread:
        thread.join()
    return latencies, spans


def cores_and_stall(pids: list[int], seconds: float) -> tuple[float, float]:
    """Summed cores and the largest stall share of these containers over `seconds`."""
    _, spans = window(None, pids, seconds)
    return sum(c for c, _ in spans), max(s for _, s in spans)


def quota_us(pid: int) -> int:
    return int((cgroup_dir(pid, "cpu") / "cpu.cfs_quota_us").read_text())


def throttled(pid: int) -> int:
    """Periods in which the container's own quota ran out (cpu.stat nr_throttled)."""
    stat = dict(line.split() for line in (cgroup_dir(pid, "cpu") / "cpu.stat").read_text().splitlines())
    return int(stat["nr_throttled"])


def cpus_of(where: int | str) -> list[int]:
    """The CPUs a container (by pid) or a cgroup parent (by name) may run on."""
    folder = cgroup_dir(where, "cpuset") if isinstance(where, int) else CGROUP / "cpuset" / where
    return parse_cpus((folder / "cpuset.cpus").read_text())


@dataclass
class Probe:
    """GETs `http://address:port/` every `period` s from a thread; the latencies in ms."""

    address: str
    port: int = 8080
    period: float = 0.02
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _first: int = 0

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                conn = http.client.HTTPConnection(self.address, self.port, timeout=5)
                conn.request("GET", "/")
                conn.getresponse().read()
                conn.close()
                self.latencies.append((time.perf_counter() - t0) * 1e3)
            except OSError:
                self.errors += 1
            time.sleep(max(0.0, self.period - (time.perf_counter() - t0)))

    def start(self) -> None:
        """Probe in the background until `stop`."""
        self._stop.clear()
        self._first = len(self.latencies)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> list[float]:
        """The latencies since `start`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.latencies[self._first:]

    def measure(self, seconds: float) -> list[float]:
        """Probe for `seconds`; the latencies of that window."""
        self.start()
        time.sleep(seconds)
        return self.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def guard_events(lab: Lab, node: str, kind: str | None = None) -> list[dict]:
    """The node's guard events (its events.jsonl), oldest first."""
    path = lab.node(node).qos_dir / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [e for e in events if kind is None or e["kind"] == kind]


def wait_for(predicate, seconds: float, step: float = 0.5) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def guard_command(lab: Lab, node: str, command: str) -> None:
    """`guard.pyz start|stop` on the node, as its boot hook or an operator runs it."""
    d = lab.node(node).qos_dir
    proc = lab.exec(node, ["python3", f"{d}/{ARCHIVE}", command, "--state-dir", str(d)])
    assert proc.returncode == 0, proc.stderr
