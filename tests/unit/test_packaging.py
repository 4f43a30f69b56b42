"""The wheel installs one namespace, `peakpack`, over the design card's folders: every folder with
an `__init__.py` is listed in pyproject.toml (a folder left out would be missing from the wheel
while the checkout still works), and nothing else lands at the top level of site-packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_under_the_peakpack_namespace() -> None:
    setup = pyproject()["tool"]["setuptools"]
    dirs = setup["package-dir"]
    found = set()
    for name, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            sub = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join([name, *sub]))
    assert found == set(setup["packages"])
    assert all(p == "peakpack" or p.startswith("peakpack.") for p in setup["packages"])


def test_the_wheel_has_one_top_level_package(tmp_path: Path) -> None:
    """Built from a copy of the tracked files, so no build/ folder of an earlier build (which can
    hold modules deleted since) leaks into the wheel or is left in the checkout."""
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
                   check=True, capture_output=True)
    [wheel] = tmp_path.glob("peakpack-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"peakpack"}
    for data in ("peakpack/inventory/demo.toml", "peakpack/db/migrations/env.py",
                 "peakpack/orchestrator/faces/web/templates/index.html", "peakpack/db/repos/plans.py"):
        assert data in names
