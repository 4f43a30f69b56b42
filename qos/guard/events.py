"""Events and state: every action one JSON line in events.jsonl (rotated), and the reads the
controller's report takes."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from .node import read, write_atomic


class EventLog:
    """Append-only JSON lines, each written whole in one write(): a reader never sees half a line.
    `seq` grows per node and survives restarts and rotation (`events.jsonl.1`); `log` is a random
    id kept in `log.id`, so a wiped state folder (seq from 1 again) is a new log to the controller."""

    def __init__(self, state_dir: str, node: str, max_bytes: int) -> None:
        self.path = os.path.join(state_dir, "events.jsonl")
        self.node, self.max_bytes = node, max_bytes
        self.seq = max(last_seq(self.path), last_seq(self.path + ".1"))
        id_path = os.path.join(state_dir, "log.id")
        self.log_id = (read(id_path) or "").strip()
        if not self.log_id:
            self.log_id = os.urandom(6).hex()
            write_atomic(id_path, self.log_id + "\n")

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        event = {"seq": self.seq, "ts": round(time.time(), 3), "node": self.node, "log": self.log_id, "kind": kind,
                 **fields}
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        try:
            if os.path.getsize(self.path) + len(line) > self.max_bytes:
                os.replace(self.path, self.path + ".1")
        except OSError:
            pass
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return event


def last_seq(path: str) -> int:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["seq"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def events_after(state_dir: str, after: int) -> tuple[list[dict[str, Any]], bool]:
    """Events with seq > `after`, oldest first, and whether some in between were rotated away."""
    base = os.path.join(state_dir, "events.jsonl")
    found = []
    for path in (base + ".1", base):
        for line in (read(path) or "").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("seq"), int) and event["seq"] > after:
                found.append(event)
    lost = bool(found) and found[0]["seq"] > after + 1
    return found, lost
