"""The house rules of docs/architecture.md, checked on the source: folder rules (what each folder
may import), an import graph with no circle and no arrow from a lower layer up, transports owned by
one module each, and no import hidden in a function without its reason. A rule that only lives in
a document is broken by the first hurried change."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.support.paths import REPO

ROOT = REPO
#: folder -> its module prefix in the `peakpack` namespace (pyproject.toml's package-dir)
PACKAGE_DIRS = {"peakpack": "peakpack", "orchestrator": "peakpack.orchestrator", "migrate": "peakpack.migrate",
                "power": "peakpack.power", "db": "peakpack.db", "lab": "peakpack.lab",
                "inventory": "peakpack.inventory", "qos": "peakpack.qos"}

#: the stages, lowest first: a folder may import only its own modules and those of the folders
#: listed for it, all of which sit on a lower layer (docs/architecture.md, "The folders")
LAYERS: dict[str, tuple[int, tuple[str, ...]]] = {
    "orchestrator": (0, ()),  # the package itself: an empty __init__
    "orchestrator/domain": (0, ()),
    "orchestrator/decide": (1, ("orchestrator/domain",)),
    "orchestrator/remote": (1, ("orchestrator/domain",)),
    "db": (1, ("orchestrator/domain",)),
    "lab": (1, ("orchestrator/domain",)),
    "inventory": (1, ()),
    "orchestrator/simulate": (2, ("orchestrator/domain", "orchestrator/decide")),
    "migrate": (2, ("orchestrator/domain", "orchestrator/remote")),
    "power": (2, ("orchestrator/domain", "orchestrator/decide", "orchestrator/remote")),
    # the nodes' QoS guard (guard.py runs on the nodes and imports nothing of peakpack: checked in
    # tests/unit/qos/test_guard.py) and how it is installed and read over SSH
    "qos": (2, ("orchestrator/domain", "orchestrator/remote")),
    "orchestrator/observe": (3, ("orchestrator/domain", "orchestrator/decide", "orchestrator/remote", "migrate",
                                 "qos")),
    "orchestrator/act": (3, ("orchestrator/domain", "orchestrator/decide")),
    "orchestrator/faces": (4, ("orchestrator/domain", "orchestrator/decide", "orchestrator/remote", "db", "lab",
                               "inventory", "orchestrator/simulate", "migrate", "power", "qos",
                               "orchestrator/observe", "orchestrator/act")),
    "peakpack": (5, ("orchestrator/faces",)),
}
#: the pure core: data in, data out; nothing here may reach a node, a database or a process
PURE = ("orchestrator/domain", "orchestrator/decide", "orchestrator/simulate")
IO_PACKAGES = ("asyncssh", "docker", "paramiko", "subprocess", "socket", "sqlalchemy", "alembic", "apscheduler",
               "pyghmi", "requests", "starlette", "uvicorn", "prometheus_client", "threading")
#: third-party packages that exactly these files (or folders) may import
OWNERS = {"asyncssh": ("orchestrator/remote/ssh.py",), "docker": ("orchestrator/remote/docker_api.py",),
          "paramiko": ("orchestrator/remote/docker_api.py",), "sqlalchemy": ("db/",), "alembic": ("db/",),
          "starlette": ("orchestrator/faces/web/",), "uvicorn": ("orchestrator/faces/web/",),
          "jinja2": ("orchestrator/faces/web/",), "pyghmi": ("lab/",)}


def sources() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py"))


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join([PACKAGE_DIRS[parts[0]], *parts[1:]])


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sources()}


def folder_of(path: Path) -> str:
    """The layer folder a file belongs to: the longest LAYERS key that contains it."""
    r = rel(path)
    return max((f for f in LAYERS if r == f or r.startswith(f + "/")), key=len)


def imports_of(path: Path) -> Iterator[tuple[str, ast.stmt, bool]]:
    """(absolute module, statement, inside a function) for every import of `path`; `from P import n`
    also yields P.n, which is a module when one of that name exists."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inside = {id(s) for f in functions for s in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node, id(node) in inside
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            yield name, node, id(node) in inside
            for alias in node.names:
                yield f"{name}.{alias.name}", node, id(node) in inside


def internal_edges(path: Path) -> set[str]:
    """The project's modules `path` imports (a package's __init__ only when it is imported itself)."""
    found = set()
    known = modules()
    for name, _, _ in imports_of(path):
        if name in known:
            found.add(name)
    # `from pkg import module` names the module, not the package's __init__
    for name, node, _ in imports_of(path):
        if isinstance(node, ast.ImportFrom) and name in known and any(
                f"{name}.{a.name}" in known for a in node.names) and all(
                f"{name}.{a.name}" in known for a in node.names):
            found.discard(name)
    found.discard(module_name(path))
    return found


def graph() -> dict[str, set[str]]:
    return {m: internal_edges(p) for m, p in modules().items()}


def importers(prefix: str) -> set[str]:
    return {rel(p) for p in sources()
            if any(m == prefix or m.startswith(prefix + ".") for m, _, _ in imports_of(p))}


def test_the_import_walker_sees_relative_and_absolute_imports() -> None:
    found = internal_edges(ROOT / "orchestrator/faces/wiring.py")
    assert {"peakpack.migrate.node_ops", "peakpack.power.policy", "peakpack.orchestrator.domain.ports",
            "peakpack.db.store"} <= found


def test_every_source_file_has_a_layer() -> None:
    assert all(folder_of(p) for p in sources())


def test_every_folder_imports_only_its_own_and_the_folders_below_it() -> None:
    by_module = {m: folder_of(p) for m, p in modules().items()}
    broken = []
    for path in sources():
        folder = folder_of(path)
        rank, allowed = LAYERS[folder]
        for target in internal_edges(path):
            there = by_module[target]
            if there != folder and there not in allowed:
                broken.append(f"{rel(path)} imports {target} ({there})")
            elif there != folder and LAYERS[there][0] >= rank:
                broken.append(f"{rel(path)} imports {target} from a layer not below its own")
    assert broken == []


def test_the_import_graph_has_no_circle() -> None:
    """Tarjan's strongly connected components over every import, TYPE_CHECKING ones included."""
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert circles == []


def test_a_circle_is_found_when_there_is_one() -> None:
    """The check above can fail: the same walk finds a planted circle."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    seen: set[str] = set()

    def reaches(v: str, goal: str) -> bool:
        if v in seen:
            return False
        seen.add(v)
        return any(w == goal or reaches(w, goal) for w in edges[v])

    assert reaches("a", "a") and not reaches("d", "d")


@pytest.mark.parametrize("a, b", [("power", "migrate"), ("migrate", "power")])
def test_power_and_migrate_never_import_each_other(a: str, b: str) -> None:
    assert {p for p in importers(f"peakpack.{b}") if p.startswith(a + "/")} == set()


def test_only_the_faces_import_the_lab_and_the_composition_root() -> None:
    for target in ("peakpack.lab", "peakpack.orchestrator.faces.wiring"):
        outside = {p for p in importers(target) if not p.startswith(("lab/", "orchestrator/faces/"))}
        assert outside == set(), target


def test_the_pure_core_imports_no_io_package() -> None:
    for path in sources():
        if folder_of(path) not in PURE:
            continue
        bad = {m for m, _, _ in imports_of(path) for io in IO_PACKAGES if m == io or m.startswith(io + ".")}
        assert bad == set(), f"{rel(path)} imports {sorted(bad)}"


@pytest.mark.parametrize("package", sorted(OWNERS))
def test_one_place_owns_each_transport(package: str) -> None:
    assert {p for p in importers(package) if not p.startswith(OWNERS[package])} == set()


@pytest.mark.parametrize("package", ["peakpack.orchestrator.faces.cli", "peakpack.lab", "peakpack.orchestrator.remote",
                                     "peakpack.migrate", "peakpack.power", "peakpack.orchestrator.faces.wiring"])
def test_the_web_page_reads_the_store_and_applies_through_what_it_is_handed(package: str) -> None:
    assert {p for p in importers(package) if p.startswith("orchestrator/faces/web/")} == set()


def test_an_import_inside_a_function_says_why() -> None:
    """Lazy imports stay for start-up speed, each with its reason in a comment on its line or the
    line above; none hides a circle (the graph check above sees them too)."""
    silent = []
    for path in sources():
        lines = path.read_text().splitlines()
        for _, node, inside in imports_of(path):
            if not inside:
                continue
            said = lines[node.lineno - 1: node.end_lineno]

            def part_of_the_block(line: str) -> bool:
                return not line.strip() or line.strip().startswith(("from ", "import ", "#"))

            i = node.lineno - 2  # a block of imports shares one reason: walk through it both ways
            while i >= 0 and part_of_the_block(lines[i]):
                said.append(lines[i])
                i -= 1
            i = node.end_lineno or node.lineno
            while i < len(lines) and part_of_the_block(lines[i]):
                said.append(lines[i])
                i += 1
            if not any("# lazy:" in line for line in said):
                silent.append(f"{rel(path)}:{node.lineno}")
    assert sorted(set(silent)) == []


#: what observation may not import: the store's writers and the guards' installer (it reads; the
#: epoch's `record_observation` and `install_guards` write)
WRITERS = ("peakpack.db", "peakpack.qos.deploy", "peakpack.migrate.transaction", "peakpack.migrate.batch",
           "peakpack.migrate.pinning", "peakpack.power")
#: the repositories' methods that write (domain/ports.py): observation calls none of them
WRITES = {"add", "add_samples", "record", "save", "begin", "finish", "set_status", "set_action_state", "close",
          "quarantine", "clear_quarantine", "set_idle_since", "step_started", "step_finished", "expire", "prune",
          "request", "acquire", "renew", "release"}
REPOS = {"plans", "migrations", "pinning", "power", "energy", "demand", "traffic", "savings", "pressure", "qos",
         "lease", "approvals"}


def test_observation_only_reads() -> None:
    """observe/ imports no writer and calls no repository's write: what it read is stored by the
    epoch's own step (`act/epoch.record_observation`), and guards are installed by another."""
    broken = []
    for path in (ROOT / "orchestrator/observe").rglob("*.py"):
        broken += [f"{rel(path)} imports {t}" for t in internal_edges(path)
                   if any(t == w or t.startswith(w + ".") for w in WRITERS)]
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr in REPOS):
                broken.append(f"{rel(path)}:{node.lineno} writes {node.func.value.attr}.{node.func.attr}")
    assert broken == []


def test_the_composition_root_holds_no_behaviour() -> None:
    """faces/wiring.py constructs and hands over: no class, and its functions are one return of
    what they built (after plain assignments), no loop, branch, try, or function of its own."""
    tree = ast.parse((ROOT / "orchestrator/faces/wiring.py").read_text())
    broken = [f"class {n.name}" for n in tree.body if isinstance(n, ast.ClassDef)]
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if not body or not isinstance(body[-1], ast.Return) or not all(isinstance(s, ast.Assign) for s in body[:-1]):
            broken.append(f"{fn.name}: not assignments then one return")
        broken += [f"{fn.name}:{n.lineno} {type(n).__name__}" for s in fn.body for n in ast.walk(s)
                   if isinstance(n, (ast.For, ast.While, ast.If, ast.IfExp, ast.Try, ast.With, ast.Lambda,
                                     ast.FunctionDef, ast.AsyncFunctionDef, ast.ListComp, ast.DictComp))]
    assert broken == []
