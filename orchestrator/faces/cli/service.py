"""`peakpack service install`: run the controller for real on the head node, as a systemd service.

The service runs as its own system user with only what it needs: network (SSH to the nodes,
IPMI to the BMCs, the metrics port), its data dir for the store, and read access to the inventory
and the files it names (SSH key, BMC passwords, web token), which are made readable by that user
only. Everything else of the system is read-only or hidden (systemd's sandboxing options).

Stopping: SIGTERM goes to the controller alone (`KillMode=mixed`: not to the ipmitool or ssh it
runs, so a wake-up in progress is not cut and its node not quarantined), which lets the action in
flight finish and settle; `TimeoutStopSec` is derived from the code's own timeouts
(`stop_timeout_s`), so systemd never kills it in the middle of a step. `Restart=always`: a stopped
or crashed controller comes back and reconciles. The store URL (it may hold a password) is in a
root-only environment file, not in the world-readable unit.
"""

from __future__ import annotations

import grp
import math
import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from ...domain import inputs
from ...domain.errors import PeakpackError
from ...domain.model import Inventory
from .common import RequiredInventory, checked, load_inventory
from .web import MetricsPortOpt

app = typer.Typer(help="Run peakpack as a systemd service on the head node.", no_args_is_help=True)

UNIT_NAME = "peakpack.service"
UNIT_DIR = Path("/etc/systemd/system")
DATA_DIR = Path("/var/lib/peakpack")
#: PEAKPACK_DB for the service: root-only, read by systemd before it drops to the service's user
ENV_FILE = Path("/etc/peakpack/peakpack.env")
HOME_DIRS = (Path("/home"), Path("/root"), Path("/run/user"))


@dataclass(frozen=True)
class ServiceFiles:
    """What the service reads: the inventory, its secrets (kept private) and other files."""

    inventory: Path
    secrets: tuple[Path, ...]   # BMC passwords, SSH private keys, the web token: 0600, owned by the user
    readable: tuple[Path, ...]  # known_hosts files: owned by the user


def service_files(inv: Inventory, inventory: Path) -> ServiceFiles:
    from ...domain.config import _secret_file  # lazy: start-up speed (each command loads only what it uses)

    secrets: list[Path] = []
    readable: list[Path] = []
    for i, n in enumerate(inv.nodes):
        if n.ssh is not None and n.ssh.identity_file is not None:
            # the same rule as BMC passwords: a private key others can read is refused
            path = n.ssh.identity_file
            secrets.append(_secret_file(f"nodes[{i}].ssh.identity_file", path.parent, path.name, "the SSH key"))
        if n.ssh is not None and n.ssh.known_hosts is not None:
            readable.append(n.ssh.known_hosts)
        if n.bmc is not None and n.bmc.password_file is not None:
            secrets.append(n.bmc.password_file)
    if inv.web.token_file is not None:
        secrets.append(inv.web.token_file)
    unique = lambda paths: tuple(dict.fromkeys(paths))  # noqa: E731 - nodes often share one key
    return ServiceFiles(inventory.resolve(), unique(secrets), unique(p for p in readable if p not in secrets))


def command_line() -> list[str]:
    """How systemd starts this very installation of peakpack (the venv's entry point)."""
    script = Path(sys.executable).parent / "peakpack"
    return [str(script)] if script.exists() else [sys.executable, "-m", "peakpack"]


def longest_step_s(inv: Inventory) -> float:
    """The longest single step a stop may have to wait for, from the code's own timeouts: one
    copy of a migration (pre-copy or the frozen delta, or an image), its checkpoint, an image
    pull, the flush before the freeze; a node's wake-up (the inventory's wake timeout) or
    switch-off."""
    # lazy: start-up speed (the migration and the live services load only for `service install`)
    from peakpack.migrate.copy import COPY_TIMEOUT_S
    from peakpack.migrate.transaction import CHECKPOINT_TIMEOUT_S, PULL_TIMEOUT_S, SYNC_TIMEOUT_S
    from peakpack.power.switch import POWER_OFF_WAIT_S

    return max(COPY_TIMEOUT_S, CHECKPOINT_TIMEOUT_S, PULL_TIMEOUT_S, SYNC_TIMEOUT_S,
               inv.planner.wake_timeout_seconds, POWER_OFF_WAIT_S)


def stop_timeout_s(inv: Inventory) -> int:
    """TimeoutStopSec: the step in flight, then the settling after it, which runs the same kinds of
    commands under the same bounds: twice the longest step."""
    return math.ceil(2 * longest_step_s(inv))


def unit_word(arg: str) -> str:
    """One word of a unit's command line as systemd reads it: `%` (specifiers) and `$`
    (variables) doubled, and quoted when it holds a space, a quote or a backslash."""
    word = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./$-]+", word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def env_line(key: str, value: str) -> str:
    """`KEY="value"` for an EnvironmentFile (no specifiers or variables there: quotes only)."""
    return f'{key}="' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_text(user: str, group: str, files: ServiceFiles, serve_args: list[str], stop_s: int) -> str:
    """The systemd unit: restarts always, runs as `user`, sandboxed to what the controller does;
    its store URL comes from ENV_FILE."""
    exec_start = [*command_line(), "serve", "--inventory", str(files.inventory), *serve_args]
    paths = [files.inventory, *files.secrets, *files.readable, Path(exec_start[0])]
    in_home = any(p.is_relative_to(h) for p in paths for h in HOME_DIRS)
    return f"""\
# Written by `peakpack service install`; rerun it after changing the inventory's files.
[Unit]
Description=peakpack controller: keeps the cluster packed at peak energy efficiency
After=network-online.target
Wants=network-online.target
# restart however often it stops: it reconciles what it left before it acts again
StartLimitIntervalSec=0

[Service]
Type=simple
User={user}
Group={group}
# PEAKPACK_DB (the store URL, which may hold a password): readable by root only
EnvironmentFile={ENV_FILE}
Environment=HOME={DATA_DIR}
ExecStart={" ".join(unit_word(a) for a in exec_start)}
Restart=always
RestartSec=10s
# SIGTERM to the controller only (not to ipmitool or ssh it runs); it lets the action in flight
# finish and settle, and starts nothing new: twice the longest step (stop_timeout_s).
KillMode=mixed
TimeoutStopSec={stop_s}
StateDirectory={DATA_DIR.name}
StateDirectoryMode=0700
ReadWritePaths={DATA_DIR}
UMask=0077
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
ProtectHome={"read-only" if in_home else "yes"}
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
# SSH and IPMI to the nodes, the metrics port, name resolution.
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6

[Install]
WantedBy=multi-user.target
"""


def _reachable(path: Path, account: pwd.struct_passwd) -> Path | None:
    """The first directory above `path` that `account` cannot enter, if any."""
    groups = {account.pw_gid, *(g.gr_gid for g in grp.getgrall() if account.pw_name in g.gr_mem)}
    for d in reversed(path.parents):
        st = d.stat()
        bit = (stat.S_IXUSR if st.st_uid == account.pw_uid else
               stat.S_IXGRP if st.st_gid in groups else stat.S_IXOTH)
        if account.pw_uid != 0 and not st.st_mode & bit:
            return d
    return None


def _account(user: str, prefix: Path, dry_run: bool, done: list[str]) -> pwd.struct_passwd | None:
    """The service's user, created as a system user when missing (only when installing into /)."""
    try:
        return pwd.getpwnam(user)
    except KeyError:
        pass
    if prefix != Path("/"):
        raise PeakpackError(f"--user: no user {user!r}; with --prefix the user must exist (it is created "
                            "only when installing into /)")
    cmd = ["useradd", "--system", "--user-group", "--home-dir", str(DATA_DIR), "--no-create-home",
           "--shell", "/usr/sbin/nologin", "--comment", "peakpack controller", user]
    done.append(shlex.join(cmd))
    if dry_run:
        return None
    subprocess.run(cmd, check=True)
    return pwd.getpwnam(user)


def _own(path: Path, account: pwd.struct_passwd | None, mode: int | None, dry_run: bool, done: list[str]) -> None:
    if account is not None and not dry_run:
        os.chown(path, account.pw_uid, account.pw_gid)
        if mode is not None:
            path.chmod(mode)
    done.append(f"chown {account.pw_name if account else '<user>'} {path}" + (f"; chmod {mode:o}" if mode else ""))


@app.command()
def install(
    inventory: RequiredInventory,
    user: Annotated[str, typer.Option("--user", callback=checked(inputs.user_name),
                                      help="System user the service runs as (created if missing).")] = "peakpack",
    prefix: Annotated[Path, typer.Option("--prefix", file_okay=False, callback=checked(inputs.folder),
                                         help="Write the unit and data dir under this root.")] = Path("/"),
    db: Annotated[Optional[str], typer.Option("--db", help="Store URL; default: SQLite in the data dir.")] = None,
    metrics_port: MetricsPortOpt = None,
    metrics_addr: Annotated[Optional[str], typer.Option("--metrics-addr", callback=checked(inputs.host),
                                                        help="Address for the metrics endpoint (serve's default: "
                                                        "127.0.0.1).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the unit and what would be done; "
                                          "change nothing.")] = False,
) -> None:
    """Write a systemd unit for the controller, its user and data dir; print the systemctl commands."""
    from peakpack.db.connect import parse_url  # lazy: start-up speed (each command loads only what it uses)

    if db is not None:
        url = parse_url(db)
        if url.get_backend_name() == "sqlite" and not Path(url.database or "").is_relative_to(DATA_DIR):
            raise PeakpackError(f"--db: the service may write only {DATA_DIR} (ProtectSystem=strict); keep its "
                                "SQLite file there, or leave --db out")
    inv = load_inventory(inventory)
    files = service_files(inv, inventory)
    if not dry_run and os.geteuid() != 0:
        raise PeakpackError("service install: run it as root (it creates a user, chowns the inventory's files and "
                            "writes the unit), or pass --dry-run")
    done: list[str] = []
    account = _account(user, prefix, dry_run, done)
    hidden = [p for p in (files.inventory, *files.secrets, *files.readable) if p.is_relative_to("/tmp")
              or p.is_relative_to("/var/tmp")]
    if hidden and prefix == Path("/"):
        raise PeakpackError(f"--inventory: {hidden[0]} is under a temporary dir the service cannot see "
                            "(PrivateTmp); keep the inventory and its files under /etc/peakpack")
    if account is not None:
        for path in (files.inventory, *files.secrets, *files.readable, Path(command_line()[0])):
            blocked = _reachable(path, account)
            if blocked is not None:
                raise PeakpackError(f"--inventory: user {user!r} cannot reach {path}: {blocked} is closed to it; "
                                    f"keep the inventory and its files under /etc/peakpack (or chmod o+x {blocked})")
    _own(files.inventory, account, 0o600, dry_run, done)
    for path in files.secrets:
        _own(path, account, 0o600, dry_run, done)
    for path in files.readable:  # pinned host keys: the user's, and nobody else may change them
        _own(path, account, 0o644, dry_run, done)
    data = prefix / DATA_DIR.relative_to("/")
    unit_path = prefix / UNIT_DIR.relative_to("/") / UNIT_NAME
    serve_args = ([] if metrics_port is None else ["--metrics-port", str(metrics_port)]) + \
        ([] if metrics_addr is None else ["--metrics-addr", metrics_addr])
    group = user if account is None else grp.getgrgid(account.pw_gid).gr_name  # useradd --user-group
    text = unit_text(user, group, files, serve_args, stop_timeout_s(inv))
    env_path = prefix / ENV_FILE.relative_to("/")
    if not dry_run:
        data.mkdir(parents=True, exist_ok=True)
        unit_path.parent.mkdir(parents=True, exist_ok=True)
        unit_path.write_text(text)
        env_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never readable by others
        with os.fdopen(fd, "w") as env:
            env.write(env_line("PEAKPACK_DB", db or f"sqlite:///{DATA_DIR / 'peakpack.db'}") + "\n")
        os.chown(env_path, 0, 0)
        env_path.chmod(0o600)
    _own(data, account, 0o700, dry_run, done)
    done.append(f"{'write' if dry_run else 'wrote'} {unit_path}")
    done.append(f"{'write' if dry_run else 'wrote'} {env_path} (root, mode 600): PEAKPACK_DB, the store's URL")
    say = sys.stdout.write  # the unit verbatim: never wrapped to the terminal
    if dry_run:
        say(f"# {unit_path}\n{text}\n")
    say("\n".join(("would do:" if dry_run else "done:", *(f"  {d}" for d in done))) + "\n")
    if shutil.which("systemd-analyze") and not dry_run:
        check = subprocess.run(["systemd-analyze", "verify", str(unit_path)], capture_output=True, text=True)
        say(f"systemd-analyze verify: {check.stderr.strip() or 'ok'}\n")
    say("then run:\n  systemctl daemon-reload\n  systemctl enable --now peakpack\n"
        "  systemctl status peakpack; journalctl -u peakpack -f\n")
