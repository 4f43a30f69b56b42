"""IPMI (power/ipmi.py), pure: the password never on the command line, answers parsed or refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from peakpack.orchestrator.domain.errors import PowerError
from peakpack.orchestrator.domain.model import BmcConfig
from peakpack.power.ipmi import ipmitool_argv, parse_dcmi, parse_status


def test_ipmitool_never_gets_the_password_on_its_command_line(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    argv = ipmitool_argv(BmcConfig("10.0.0.1", 623, "admin", pw, 17), "chassis", "power", "status")
    assert "s3cret" not in " ".join(argv) and "-P" not in argv
    assert argv[argv.index("-f") + 1] == str(pw) and argv[argv.index("-C") + 1] == "17"
    with pytest.raises(PowerError, match="password_file"):
        ipmitool_argv(BmcConfig("10.0.0.1"), "chassis", "power", "status")



def test_ipmi_answers_are_parsed_or_refused() -> None:
    assert parse_status("Chassis Power is on\n") is True and parse_status("Chassis Power is off") is False
    with pytest.raises(ValueError):
        parse_status("Error: something")
    assert parse_dcmi("    Instantaneous power reading:   142 Watts\n") == 142.0
    assert parse_dcmi("DCMI request failed") is None
