"""`peakpack service install` into a temp root: the unit systemd would run, the files made private
to the service's user, and one-line refusals for secrets others can read or files that are missing."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.paths import REPO

ME = pwd.getpwuid(os.geteuid())
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="service install chowns files: root only (CI is root)")

INVENTORY = """\
[cluster]
name = "svc"
[[nodes]]
name = "head"
address = "192.0.2.10"
cpus = 4
memory_mb = 8192
role = "head"
[nodes.power]
idle_w = 80
max_w = 180
[[nodes]]
name = "node-1"
address = "192.0.2.11"
cpus = 4
memory_mb = 8192
[nodes.power]
idle_w = 80
max_w = 180
[nodes.ssh]
identity_file = "keys/id_ed25519"
known_hosts = "keys/known_hosts"
[nodes.bmc]
address = "192.0.2.111"
password_file = "secrets/node-1.bmc"
"""


def make_inventory(folder: Path) -> Path:
    (folder / "keys").mkdir(parents=True)
    (folder / "secrets").mkdir()
    for path, text, mode in (("keys/id_ed25519", "key", 0o600), ("keys/known_hosts", "hosts", 0o644),
                             ("secrets/node-1.bmc", "pw", 0o600), ("inventory.toml", INVENTORY, 0o644)):
        (folder / path).write_text(text)
        (folder / path).chmod(mode)
    return folder / "inventory.toml"


def install(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "peakpack", "service", "install", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@as_root
def test_install_writes_a_sandboxed_unit_and_makes_the_files_private(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path / "inv")
    root = tmp_path / "root"
    proc = install("--inventory", str(inv), "--user", ME.pw_name, "--prefix", str(root), "--metrics-port", "9464")
    assert proc.returncode == 0, proc.stderr
    unit = (root / "etc/systemd/system/peakpack.service").read_text()
    lines = set(unit.splitlines())
    assert {
        "Restart=always",
        "KillMode=mixed",
        f"User={ME.pw_name}",
        f"Group={grp.getgrgid(ME.pw_gid).gr_name}",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "ReadWritePaths=/var/lib/peakpack",
        "CapabilityBoundingSet=",
        "EnvironmentFile=/etc/peakpack/peakpack.env",
    } <= lines
    env = root / "etc/peakpack/peakpack.env"
    assert env.read_text() == 'PEAKPACK_DB="sqlite:////var/lib/peakpack/peakpack.db"\n'
    assert mode(env) == 0o600 and env.stat().st_uid == 0
    assert mode(inv.parent / "keys/known_hosts") == 0o644  # pinned keys: nobody but their owner writes them
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start.endswith(f"serve --inventory {inv} --metrics-port 9464")
    assert Path(exec_start.removeprefix("ExecStart=").split()[0]).exists()
    for private in (inv, inv.parent / "secrets/node-1.bmc", inv.parent / "keys/id_ed25519"):
        assert mode(private) == 0o600 and private.stat().st_uid == ME.pw_uid, private
    assert mode(root / "var/lib/peakpack") == 0o700
    assert "systemctl enable --now peakpack" in proc.stdout
    if shutil.which("systemd-analyze"):
        check = subprocess.run(["systemd-analyze", "verify", str(root / "etc/systemd/system/peakpack.service")],
                               capture_output=True, text=True)
        assert check.returncode == 0 and check.stderr == "", check.stderr  # warnings go to stderr only


@pytest.mark.parametrize("secret", ["secrets/node-1.bmc", "keys/id_ed25519"])
def test_a_secret_others_can_read_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path, secret: str) -> None:
    inv = make_inventory(tmp_path / "inv")
    (inv.parent / secret).chmod(0o644)
    proc = install("--inventory", str(inv), "--user", ME.pw_name, "--prefix", str(tmp_path / "root"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and str(inv.parent / secret) in proc.stderr
    assert "chmod 600" in proc.stderr
    assert not (tmp_path / "root").exists() and mode(inv) == 0o644


def test_a_missing_inventory_or_user_is_one_line(tmp_path: Path) -> None:
    proc = install("--inventory", str(tmp_path / "nope.toml"), "--prefix", str(tmp_path / "root"))
    assert proc.returncode == 2 and "--inventory" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    inv = make_inventory(tmp_path / "inv")
    proc = install("--inventory", str(inv), "--user", "no-such-user-pp", "--prefix", str(tmp_path / "root"))
    assert proc.returncode == 2 and "--user" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "root").exists()


def test_dry_run_prints_the_unit_and_changes_nothing(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path / "inv")
    proc = install("--inventory", str(inv), "--user", ME.pw_name, "--prefix", str(tmp_path / "root"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Restart=always" in proc.stdout and "would do:" in proc.stdout
    assert not (tmp_path / "root").exists() and mode(inv) == 0o644


@as_root
def test_files_the_user_cannot_reach_are_refused_before_anything_changes() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # pytest's own tmp dirs are closed to others
        top = Path(tmp)
        top.chmod(0o755)
        inv = make_inventory(top / "closed" / "inv")
        (top / "closed").chmod(0o700)
        proc = install("--inventory", str(inv), "--user", "nobody", "--prefix", str(top / "root"))
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        assert f"{top / 'closed'} is closed to it" in proc.stderr
        assert not (top / "root").exists() and inv.stat().st_uid == 0 and mode(inv) == 0o644


def unit_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_the_stop_timeout_outlasts_the_longest_step_of_the_code() -> None:
    from peakpack.migrate.copy import COPY_TIMEOUT_S
    from peakpack.migrate.transaction import CHECKPOINT_TIMEOUT_S, PULL_TIMEOUT_S, SYNC_TIMEOUT_S
    from peakpack.orchestrator.domain.config import demo_inventory
    from peakpack.orchestrator.faces.cli.service import longest_step_s, stop_timeout_s
    from peakpack.power.switch import POWER_OFF_WAIT_S

    inv = demo_inventory()
    steps = (COPY_TIMEOUT_S, CHECKPOINT_TIMEOUT_S, PULL_TIMEOUT_S, SYNC_TIMEOUT_S, POWER_OFF_WAIT_S,
             inv.planner.wake_timeout_seconds)
    assert longest_step_s(inv) == max(steps) and stop_timeout_s(inv) > max(steps)


@as_root
def test_a_password_stays_out_of_the_unit_and_odd_paths_are_escaped_for_systemd(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path / "my inv 100%")
    root = tmp_path / "root"
    secret = "postgresql://pp:s3cr%t\"pw@db.example/peakpack"
    proc = install("--inventory", str(inv), "--user", ME.pw_name, "--prefix", str(root), "--db", secret)
    assert proc.returncode == 0, proc.stderr
    unit = (root / "etc/systemd/system/peakpack.service").read_text()
    assert "s3cr" not in unit and "s3cr" not in proc.stdout
    env = root / "etc/peakpack/peakpack.env"
    assert env.read_text() == 'PEAKPACK_DB="postgresql://pp:s3cr%t\\"pw@db.example/peakpack"\n' and mode(env) == 0o600
    exec_start = unit_lines(unit)["ExecStart"]
    assert f'"{inv}"'.replace("%", "%%") in exec_start  # quoted (a space) and % doubled (a specifier)
    assert int(unit_lines(unit)["TimeoutStopSec"]) > 1800
    if shutil.which("systemd-analyze"):
        check = subprocess.run(["systemd-analyze", "verify", str(root / "etc/systemd/system/peakpack.service")],
                               capture_output=True, text=True)
        assert "ExecStart" not in check.stderr, check.stderr


def test_pinned_host_keys_others_may_write_are_refused(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path / "inv")
    (inv.parent / "keys/known_hosts").chmod(0o666)
    proc = install("--inventory", str(inv), "--user", ME.pw_name, "--prefix", str(tmp_path / "root"), "--dry-run")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "known_hosts" in proc.stderr and "chmod go-w" in proc.stderr
