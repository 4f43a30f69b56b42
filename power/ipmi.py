"""IPMI over LAN through ipmitool (the only module that speaks IPMI).

The password never appears on a command line or in a log: ipmitool reads it from the inventory's
0600 password file (`-f`). Cipher suite 17 (SHA-256, AES-128) unless the inventory says
otherwise; 0-2 are refused when the inventory is loaded. Every switch is confirmed by reading the
state back within a timeout.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from enum import StrEnum

from peakpack.orchestrator.domain.errors import PowerError
from peakpack.orchestrator.domain.model import BmcConfig, Inventory, NodeSpec


class Chassis(StrEnum):
    STATUS = "status"
    ON = "on"
    SOFT = "soft"   # ACPI shutdown: the OS stops cleanly
    OFF = "off"     # hard off


def ipmitool_argv(bmc: BmcConfig, *command: str) -> list[str]:
    if bmc.password_file is None:
        raise PowerError("bmc.password_file: missing; give a 0600 file with the BMC password")
    return ["ipmitool", "-I", "lanplus", "-C", str(bmc.cipher_suite), "-H", bmc.address, "-p", str(bmc.port),
            "-U", bmc.username, "-f", str(bmc.password_file), "-N", "2", "-R", "3", *command]


def _bmc(spec: NodeSpec) -> BmcConfig:
    if spec.bmc is None:
        raise PowerError(f"node {spec.name}: no [nodes.bmc] in the inventory; it cannot be power-managed")
    pw = spec.bmc.password_file
    try:
        if pw is None or not pw.read_text().strip():
            raise PowerError(f"node {spec.name}: bmc.password_file {pw} is empty; write the BMC password into it")
    except OSError as exc:
        raise PowerError(f"node {spec.name}: bmc.password_file {pw}: {exc.strerror}") from None
    return spec.bmc


def ipmitool(spec: NodeSpec, *command: str, timeout: float = 30) -> str:
    bmc = _bmc(spec)
    argv = ipmitool_argv(bmc, *command)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PowerError(
            f"node {spec.name}: BMC {bmc.address}:{bmc.port} did not answer within {timeout:g} s"
        ) from None
    except FileNotFoundError:
        raise PowerError("ipmitool is not installed; run scripts/install-system-deps.sh") from None
    if proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[-1]
        raise PowerError(f"node {spec.name}: BMC {spec.bmc.address}:{spec.bmc.port}: {msg}")  # type: ignore[union-attr]
    return proc.stdout


_STATUS = re.compile(r"Chassis Power is (on|off)", re.I)


def parse_status(text: str) -> bool:
    m = _STATUS.search(text)
    if not m:
        raise ValueError(f"unexpected chassis status: {text.strip()[:80]!r}")
    return m.group(1).lower() == "on"


def is_on(spec: NodeSpec) -> bool:
    out = ipmitool(spec, "chassis", "power", Chassis.STATUS)
    try:
        return parse_status(out)
    except ValueError as exc:
        raise PowerError(f"node {spec.name}: BMC answered garbage: {exc}") from None


def switch(spec: NodeSpec, command: Chassis, confirm_within: float = 30.0) -> None:
    """Send a chassis command and wait until the BMC reports the wanted state."""
    want = command is Chassis.ON
    if is_on(spec) == want:
        return
    ipmitool(spec, "chassis", "power", command)
    deadline = time.monotonic() + confirm_within
    while time.monotonic() < deadline:
        if is_on(spec) == want:
            return
        time.sleep(0.5)
    raise PowerError(f"node {spec.name}: BMC accepted `power {command}` but still reports "
                     f"{'off' if want else 'on'} after {confirm_within:g} s")


def power_probe(inventory: Inventory) -> Callable[[str], bool | None]:
    """For the observer: a node's BMC power state, None when it has no BMC or does not answer."""

    def probe(node: str) -> bool | None:
        spec = inventory.node(node)
        if spec.bmc is None:
            return None
        try:
            return is_on(spec)
        except PowerError:
            return None

    return probe


_DCMI = re.compile(r"Instantaneous power reading:\s*([\d.]+)\s*Watts", re.I)


def parse_dcmi(text: str) -> float | None:
    """`ipmitool dcmi power reading` -> watts, or None when the BMC does not offer a reading."""
    m = _DCMI.search(text)
    return float(m.group(1)) if m else None


def dcmi_power(spec: NodeSpec) -> float | None:
    try:
        return parse_dcmi(ipmitool(spec, "dcmi", "power", "reading", timeout=10))
    except PowerError:
        return None
