"""The `cloudsim-planetlab` scenario: the setup of Beloglazov & Buyya's CloudSim study, so our
numbers compare with theirs.

800 hosts, half HP ProLiant ML110 G4 (2 cores x 1860 MIPS), half G5 (2 x 2660 MIPS), SPECpower
curves; one VM per trace file, four VM types by contiguous quarters of the sorted file list;
300 s steps; a migration takes RAM / (half of 1 Gbit/s) and costs the VM 10% of its CPU meanwhile.
As in CloudSim's run, RAM only sets migration time (memory use after start is modelled as zero).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..domain.errors import PeakpackError
from ..domain.inputs import read_text
from ..domain.model import PowerCurve

G4 = PowerCurve((86, 89.4, 92.6, 96, 99.5, 102, 106, 108, 112, 114, 117))
G5 = PowerCurve((93.7, 97, 101, 105, 110, 116, 121, 125, 129, 133, 135))
VM_MIPS = (2500, 2000, 1000, 500)
VM_RAM_MB = (870, 1740, 1740, 613)
STEP_SECONDS = 300
BANDWIDTH_MB_S = 1000 / 8  # 1 Gbit/s


@dataclass(frozen=True)
class Scenario:
    name: str
    host_core_mips: np.ndarray   # per host
    host_cores: np.ndarray
    host_curves: tuple[PowerCurve, ...]
    host_kind: tuple[str, ...]
    vm_names: tuple[str, ...]
    vm_mips: np.ndarray          # requested MIPS per VM
    vm_ram_mb: np.ndarray
    utilization: np.ndarray      # VMs x steps, fraction of requested MIPS
    step_seconds: int = STEP_SECONDS

    @property
    def host_mips(self) -> np.ndarray:
        return self.host_core_mips * self.host_cores

    @property
    def steps(self) -> int:
        return int(self.utilization.shape[1])

    def demand(self, step: int) -> np.ndarray:
        """MIPS each VM asks for at `step` (before the per-host one-core limit)."""
        return self.utilization[:, step] * self.vm_mips

    def migration_seconds(self, vm: int) -> float:
        return float(self.vm_ram_mb[vm] / (BANDWIDTH_MB_S / 2))


def read_traces(folder: Path) -> tuple[tuple[str, ...], np.ndarray]:
    if not folder.is_dir():
        raise PeakpackError(
            f"--trace: {folder} is not a folder; give a PlanetLab day, e.g. ../shared/data/planetlab/20110303"
        )
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise PeakpackError(f"--trace: {folder} holds no trace files")
    rows = []
    for f in files:
        try:
            values = [int(line) for line in read_text(f, "--trace").split()]
        except ValueError:
            raise PeakpackError(f"--trace: {f} is not a PlanetLab trace (one integer percentage per line)") from None
        if not values or min(values) < 0 or max(values) > 100:
            raise PeakpackError(f"--trace: {f} has no values, or values outside 0..100 (percent)")
        rows.append(values)
    steps = min(len(r) for r in rows)
    return tuple(f.name for f in files), np.array([r[:steps] for r in rows], dtype=float) / 100.0


def cloudsim_planetlab(folder: Path, hosts: int = 800) -> Scenario:
    names, util = read_traces(folder)
    n = len(names)
    vm_type = np.minimum(np.arange(n) * 4 // n, 3)  # contiguous quarters of the sorted list
    half = hosts // 2
    return Scenario(
        name="cloudsim-planetlab",
        host_core_mips=np.array([1860.0] * half + [2660.0] * (hosts - half)),
        host_cores=np.array([2] * hosts),
        host_curves=tuple([G4] * half + [G5] * (hosts - half)),
        host_kind=tuple(["G4"] * half + ["G5"] * (hosts - half)),
        vm_names=names,
        vm_mips=np.array([VM_MIPS[t] for t in vm_type], dtype=float),
        vm_ram_mb=np.array([VM_RAM_MB[t] for t in vm_type], dtype=float),
        utilization=util,
    )


SCENARIOS = {"cloudsim-planetlab": cloudsim_planetlab}


def load_scenario(name: str, folder: Path) -> Scenario:
    if name not in SCENARIOS:
        raise PeakpackError(f"--scenario: unknown {name!r}; use one of {', '.join(SCENARIOS)}")
    return SCENARIOS[name](folder)
