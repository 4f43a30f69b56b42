"""Installing, updating and reading each node's QoS guard over SSH.

The guard is one file (`guard.py`, the standard library only) copied to the node's state folder
(`$PEAKPACK_QOS_DIR`, default /var/lib/peakpack/qos) with its settings (`guard.json`, from the
inventory's `[qos]` and the node's declared CPUs and memory), then started the way the node starts
services: a systemd unit `peakpack-guard.service` (restart always), or on a lab node, which has no
systemd, a script in its boot folder (`$PEAKPACK_BOOT_DIR`) that the lab runs at every power on,
and a detached process now. Three SSH commands per node; each file replaces the one there only once
its sha256 matches on the node (`COPY`); a running guard keeps its copy until the new one replaces
it, and the new one carries on from the quotas it finds.

`report_argv` is the one command the controller runs at each observation to learn what the guard
did since: its events after the last one stored, whether it runs, and which build.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import NodeSpec
from peakpack.orchestrator.domain.qos import GuardSettings
from peakpack.orchestrator.remote import SshPool

from .guard import DEFAULT_STATE_DIR

GUARD_FILE = Path(__file__).with_name("guard.py")
#: the node's guard folder, as a shell word (the lab sets $PEAKPACK_QOS_DIR per node)
STATE_DIR = f'"${{PEAKPACK_QOS_DIR:-{DEFAULT_STATE_DIR}}}"'
UNIT = "peakpack-guard.service"

#: replaces a file of the guard's folder atomically with stdin ($1: its name), only once what
#: arrived has the sha256 it was sent with ($2): a copy cut short (a dropped connection ends `cat`
#: as the end of its input would) never replaces a whole file with the part that arrived
COPY = f"""d={STATE_DIR}; mkdir -p "$d/holds" && cat > "$d/$1.new" || exit 1
if ! printf '%s  %s\\n' "$2" "$d/$1.new" | sha256sum -c --status; then
  rm -f "$d/$1.new"
  echo "$1 arrived incomplete or changed on the way (its sha256 is not $2): not installed; the one before stays" >&2
  exit 1
fi
mv -f "$d/$1.new" "$d/$1"
"""

#: starts (or restarts) the guard as the node starts its services; prints one line saying how
START = f"""set -e
d={STATE_DIR}
py=$(command -v python3) || {{ echo "python3 is missing; install it (the guard needs Python >= 3.9)" >&2; exit 1; }}
if [ -n "$PEAKPACK_BOOT_DIR" ]; then
  mkdir -p "$PEAKPACK_BOOT_DIR"
  b="$PEAKPACK_BOOT_DIR/50-peakpack-guard"
  printf '#!/bin/sh\\nexec %s %s/guard.py start --state-dir %s\\n' "$py" "$d" "$d" > "$b.new"
  chmod 755 "$b.new"
  mv -f "$b.new" "$b"
  "$py" "$d/guard.py" stop --state-dir "$d" >/dev/null
  "$py" "$d/guard.py" start --state-dir "$d"
elif [ -d /run/systemd/system ]; then
  cat > /etc/systemd/system/{UNIT}.new <<UNIT
[Unit]
Description=peakpack QoS guard (best-effort CPU suppress, memory eviction)
After=docker.service
Wants=docker.service

[Service]
ExecStart=$py $d/guard.py run --state-dir $d
Restart=always
RestartSec=2
OOMScoreAdjust=-900
Nice=-5

[Install]
WantedBy=multi-user.target
UNIT
  mv -f /etc/systemd/system/{UNIT}.new /etc/systemd/system/{UNIT}
  systemctl daemon-reload
  systemctl enable {UNIT} >/dev/null 2>&1
  systemctl restart {UNIT}
  echo "guard: systemd unit {UNIT} (re)started"
else
  echo "neither systemd nor a lab boot folder (PEAKPACK_BOOT_DIR): nothing would start the guard at boot" >&2
  exit 1
fi
"""


def guard_source() -> str:
    return GUARD_FILE.read_text()


def sha256(text: str) -> str:
    """The sha256 of a file as it is written on the node (UTF-8), in hex, as `sha256sum` prints it."""
    return hashlib.sha256(text.encode()).hexdigest()


def digest(text: str) -> str:
    """How the guard names a build of a file (its `file_digest`): 16 hex digits of its sha256."""
    return sha256(text)[:16]


def guard_json(spec: NodeSpec, settings: GuardSettings) -> str:
    """The node's guard.json: the inventory's `[qos]`, and the node's name, CPUs and memory as
    declared (the guard's capacity and memory limit)."""
    return json.dumps({**settings.by_key(), "cpus": spec.cpus, "memory_mb": spec.memory_mb, "node": spec.name},
                      indent=1, sort_keys=True) + "\n"


def report_argv(after: tuple[str, int] | None) -> list[str]:
    """The guard's report (one JSON document) with its events after `after` (log, seq); `{}` when
    no guard is installed."""
    log, seq = after or ("", 0)
    run = (f'd={STATE_DIR}; [ -f "$d/guard.py" ] || {{ echo "{{}}"; exit 0; }}; '
           f'exec python3 "$d/guard.py" report --state-dir "$d" --after {int(seq)} --log {shlex.quote(log)}')
    return ["sh", "-c", run]


@dataclass(frozen=True)
class GuardReport:
    """What a node's guard said at one observation (`guard.py report`)."""

    installed: bool
    running: bool = False
    version: str | None = None           # of guard.py on the node
    running_version: str | None = None   # of the guard process that runs
    settings: str | None = None          # digest of its guard.json
    log: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    lost: bool = False                   # events between the last stored and these were rotated away
    state: dict[str, Any] | None = None

    @classmethod
    def parse(cls, node: str, text: str) -> GuardReport:
        try:
            doc = json.loads(text)
        except ValueError:
            raise NodeError(node, f"the QoS guard's report is not JSON: {text[:80]!r}") from None
        if not isinstance(doc, dict) or not doc:
            return cls(installed=False)
        return cls(True, bool(doc.get("running")), doc.get("version"), doc.get("running_version"),
                   doc.get("settings"), str(doc.get("log") or ""), list(doc.get("events") or []),
                   bool(doc.get("lost")), doc.get("state"))

    def outdated(self, spec: NodeSpec, settings: GuardSettings) -> str | None:
        """Why this node's guard must be (re)installed; None: it runs, as peakpack would install it."""
        if not self.installed:
            return "no guard installed"
        if not self.running:
            return "the guard does not run"
        if self.running_version != digest(guard_source()):
            return f"the guard runs build {self.running_version}, this peakpack has {digest(guard_source())}"
        if self.settings != digest(guard_json(spec, settings)):
            return "its guard.json differs from the inventory's [qos]"
        return None


async def install(ssh: SshPool, spec: NodeSpec, settings: GuardSettings) -> str:
    """Copy the guard and its settings to the node and (re)start it; one line saying how."""
    node = spec.name
    for name, text in (("guard.py", guard_source()), ("guard.json", guard_json(spec, settings))):
        await ssh.run(node, ["sh", "-c", COPY, "sh", name, sha256(text)], input=text, timeout=60)
    started = await ssh.run(node, ["sh", "-c", START], timeout=120)
    return (started.stdout.strip().splitlines() or ["guard: started"])[-1]
