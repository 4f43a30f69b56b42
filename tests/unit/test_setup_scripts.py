"""The README's two set-up commands run as written where you are root and `sudo` is not installed
(a fresh Debian 12), CI runs the README's test command, and as anyone else they stop at once with
one line saying to run them as root."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.paths import REPO

SETUP = ["./scripts/quickstart.sh", "./scripts/test.sh"]


def setup_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block is not None
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_commands_need_no_sudo_and_ci_runs_the_test_command() -> None:
    assert setup_commands() == SETUP
    for command in SETUP:
        assert os.access(REPO / command, os.X_OK), f"{command} is not executable"
    assert "scripts/test.sh" in (REPO / ".ci/run").read_text()


def test_no_script_calls_sudo() -> None:
    scripts = [*(REPO / "scripts").glob("*.sh"), REPO / ".ci/run"]
    for script in scripts:
        code = [line.split("#")[0] for line in script.read_text().splitlines()]
        assert not any(re.search(r"\bsudo\b", line) for line in code), script


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become nobody")
@pytest.mark.parametrize("command", SETUP)
def test_as_another_user_they_stop_with_one_line(command: str) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # a copy nobody can read, wherever CI cloned
        Path(tmp).chmod(0o755)
        shutil.copytree(REPO / "scripts", Path(tmp) / "scripts")
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", command],
                              cwd=tmp, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert "run it as root" in line
