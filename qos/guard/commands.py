"""The commands: run (foreground, for systemd), start (detached), stop, status, report; `main` is what
the archive runs."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import time
from typing import Any

from . import DEFAULT_STATE_DIR, PROTOCOL
from .events import events_after
from .loop import Guard
from .node import file_digest, own_file, read, write_atomic


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="guard.pyz", description="peakpack's QoS guard (docs/qos.md)")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("run", "start", "stop", "status", "report"):
        s = sub.add_parser(name)
        s.add_argument("--state-dir", default=env.get("PEAKPACK_QOS_DIR", DEFAULT_STATE_DIR))
        if name in ("run", "start"):
            s.add_argument("--node", default=None, help="the node's inventory name (default: guard.json, "
                                                        "$NODE_NAME, the host name)")
            s.add_argument("--docker-host", default=env.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
            s.add_argument("--node-cgroup", default=env.get("PEAKPACK_NODE_CGROUP", "host"),
                           help="the node's cgroup parent (a lab node: /ppXXXX-nN), or host")
            s.add_argument("--no-psi", action="store_true", help="act as on a kernel without PSI")
        if name == "report":
            s.add_argument("--after", type=int, default=0, help="events with seq > AFTER ...")
            s.add_argument("--log", default="", help="... of this log (another log: all of its events; *: any log)")
    return p.parse_args(argv)


def running_pid(state_dir: str) -> int | None:
    try:
        pid = int((read(os.path.join(state_dir, "guard.pid")) or "").strip())
    except ValueError:
        return None
    command = (read(f"/proc/{pid}/cmdline") or "").split("\0")
    # guard.py: a guard of before the archive, which an update stops
    return pid if "run" in command and any(part.endswith(("guard.pyz", "guard.py")) for part in command) else None


def cmd_run(args: argparse.Namespace) -> int:
    os.makedirs(args.state_dir, exist_ok=True)
    lock = open(os.path.join(args.state_dir, "guard.lock"), "w")  # held (locked) for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # one guard per state folder, that is per node
    except OSError:
        print(f"guard: another guard holds {args.state_dir}/guard.lock (pid {running_pid(args.state_dir)})",
              file=sys.stderr)
        return 1
    write_atomic(os.path.join(args.state_dir, "guard.pid"), f"{os.getpid()}\n")
    guard = Guard(args)

    def stop(*_: object) -> None:
        guard.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    guard.run()
    return 0


def cmd_start(args: argparse.Namespace, argv: list[str]) -> int:
    """Detached (double fork, new session), so the SSH session or boot hook that starts it may end;
    a running guard is left alone."""
    os.makedirs(args.state_dir, exist_ok=True)
    pid = running_pid(args.state_dir)
    if pid:
        print(f"guard: already running (pid {pid})")
        return 0
    run_argv = [sys.executable, own_file(), "run", *argv[1:]]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            log = os.open(os.path.join(args.state_dir, "guard.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.execv(run_argv[0], run_argv)
        os._exit(0)
    os.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pid = running_pid(args.state_dir)
        if pid:
            print(f"guard: started (pid {pid})")
            return 0
        time.sleep(0.05)
    print(f"guard: did not start; see {args.state_dir}/guard.log", file=sys.stderr)
    return 1


def cmd_stop(args: argparse.Namespace) -> int:
    pid = running_pid(args.state_dir)
    if not pid:
        print("guard: not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    print(f"guard: stopped (pid {pid})")
    return 0


def report(state_dir: str, after: int, log: str) -> dict[str, Any]:
    """What the controller reads at each observation, as one JSON document: whether the guard
    runs and which build (of this file and of guard.json), its events since the last one stored
    (all of them when the log is not the one the controller knows), and its current view."""
    current = (read(os.path.join(state_dir, "log.id")) or "").strip()
    events, lost = events_after(state_dir, after if log in (current, "*") else 0)
    try:
        state = json.loads(read(os.path.join(state_dir, "state.json")) or "null")
    except ValueError:
        state = None
    pid = running_pid(state_dir)
    return {"protocol": PROTOCOL, "running": pid is not None, "pid": pid, "log": current,
            "version": file_digest(own_file()),
            "running_version": (state or {}).get("version") if pid else None,
            "settings": file_digest(os.path.join(state_dir, "guard.json")),
            "events": events, "lost": lost and current == log, "state": state}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.cmd == "run":
        return cmd_run(args)
    if args.cmd == "start":
        return cmd_start(args, argv)
    if args.cmd == "stop":
        return cmd_stop(args)
    if args.cmd == "report":
        sys.stdout.write(json.dumps(report(args.state_dir, args.after, args.log)) + "\n")
        return 0
    pid = running_pid(args.state_dir)
    print(json.dumps({"running": pid is not None, "pid": pid,
                      "state": json.loads(read(os.path.join(args.state_dir, "state.json")) or "null")}))
    return 0 if pid else 3
