"""The import rules of docs/architecture.md, checked on the source: a rule that only lives in a
document is broken by the first hurried change."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "migrate", "power", "db", "lab", "inventory")

#: the pure core: data in, data out; nothing here may reach a node, a database or a process
CORE = ("orchestrator/errors.py", "orchestrator/model.py", "orchestrator/names.py", "orchestrator/plan.py",
        "orchestrator/planning.py", "orchestrator/capacity.py", "orchestrator/config.py",
        "orchestrator/planner/", "orchestrator/simulate/", "orchestrator/settings.py", "orchestrator/forecast.py",
        "orchestrator/demand.py", "orchestrator/review.py", "orchestrator/predict.py", "orchestrator/budgets.py")
IO_MODULES = ("asyncssh", "docker", "paramiko", "subprocess", "socket", "sqlalchemy", "apscheduler", "pyghmi",
              "requests", "db", "migrate", "power", "lab", "orchestrator.remote", "orchestrator.observe",
              "orchestrator.controller", "orchestrator.wiring", "orchestrator.cli")

#: third-party packages that exactly one module may import
OWNERS = {"asyncssh": ("orchestrator/remote/ssh.py",), "docker": ("orchestrator/remote/engine.py",),
          "paramiko": ("orchestrator/remote/engine.py",)}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Absolute names of every module `path` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def importers(prefix: str) -> set[str]:
    return {str(p.relative_to(ROOT)) for p in sources()
            if any(m == prefix or m.startswith(prefix + ".") for m in imports(p))}


def test_the_import_walker_sees_relative_and_absolute_imports() -> None:
    found = imports(ROOT / "orchestrator/wiring.py")
    assert {"orchestrator.controller", "migrate.batch", "power.policy"} <= found


@pytest.mark.parametrize("a, b", [("power", "migrate"), ("migrate", "power")])
def test_power_and_migrate_never_import_each_other(a: str, b: str) -> None:
    assert {p for p in importers(b) if p.startswith(a + "/")} == set()


def test_only_the_cli_imports_the_lab() -> None:
    outside = {p for p in importers("lab") if not p.startswith(("lab/", "orchestrator/cli/"))}
    assert outside == set()


def test_the_core_imports_no_io_package() -> None:
    for path in sources():
        rel = str(path.relative_to(ROOT))
        if not rel.startswith(CORE):
            continue
        bad = {m for m in imports(path) for io in IO_MODULES if m == io or m.startswith(io + ".")}
        assert bad == set(), f"{rel} imports {sorted(bad)}"


@pytest.mark.parametrize("package", sorted(OWNERS))
def test_one_module_owns_each_transport(package: str) -> None:
    assert importers(package) <= set(OWNERS[package])


@pytest.mark.parametrize("package", ["starlette", "uvicorn", "jinja2"])
def test_only_the_web_page_serves_http(package: str) -> None:
    assert {p for p in importers(package) if not p.startswith("orchestrator/web/")} == set()


@pytest.mark.parametrize("package", ["orchestrator.cli", "lab", "orchestrator.remote", "migrate", "power"])
def test_the_web_page_reads_the_store_and_applies_through_orchestrator_apply(package: str) -> None:
    assert {p for p in importers(package) if p.startswith("orchestrator/web/")} == set()
