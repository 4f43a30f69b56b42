"""The wheel installs one namespace, `peakpack`, over the design card's folders: every folder with
an `__init__.py` is listed in pyproject.toml (a folder left out would be missing from the wheel
while the checkout still works), and nothing else lands at the top level of site-packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.support.paths import REPO

ROOT = REPO


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_under_the_peakpack_namespace() -> None:
    """peakpack/ links to the card's folders; every folder with an __init__.py under it is listed."""
    setup = pyproject()["tool"]["setuptools"]
    found = {".".join(Path(base).relative_to(ROOT).parts)
             for base, _, files in os.walk(ROOT / "peakpack", followlinks=True) if "__init__.py" in files}
    assert found == set(setup["packages"])
    assert setup["package-dir"] == {"": "."}  # a plain path, no import hook: tools follow it


def test_each_module_has_one_import_name() -> None:
    """The card's folders are on the path too (the checkout's root): imported by their bare name
    they refuse, so no module is loaded twice under two names."""
    for folder in ("orchestrator", "migrate", "power", "db", "inventory", "lab", "qos"):
        assert (ROOT / "peakpack" / folder).resolve() == ROOT / folder
        proc = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=ROOT, capture_output=True, text=True)
        assert f"import peakpack.{folder}, not {folder}" in proc.stderr


def test_the_wheel_has_one_top_level_package(tmp_path: Path) -> None:
    """Built from a copy of the tracked files, so no build/ folder of an earlier build (which can
    hold modules deleted since) leaks into the wheel or is left in the checkout."""
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_symlink():  # peakpack/orchestrator -> ../orchestrator, ...
            (source / name).symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
                   check=True, capture_output=True)
    [wheel] = tmp_path.glob("peakpack-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"peakpack"}
    for data in ("peakpack/inventory/demo.toml", "peakpack/db/revisions/env.py",
                 "peakpack/orchestrator/faces/web/templates/index.html", "peakpack/db/repos/plans.py"):
        assert data in names
