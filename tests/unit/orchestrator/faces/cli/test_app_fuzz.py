"""Bad input, generated: every option and argument of every command (read from the command tree,
so a new one is covered the day it is added) gets every class of bad value its kind can receive,
and every number of the example inventory and of the demo snapshot gets every class of bad
number. Each must end in exit status 2 with one line on stderr naming what to fix, never a
traceback, and never reach anything that acts (the lab, SSH, the controller loop, the web server,
the simulator: those are replaced by tripwires here).

The classes: numbers that are infinite, NaN, beyond every integer type, absurd for any field;
text that is not UTF-8, spans lines, is empty or huge; files that are not UTF-8 or are devices,
folders where a file is expected and files where a folder is; store URLs of an unknown scheme,
files that are not databases, folders; snapshot times without a time zone. Commands run in this process
(`app.main(argv)`), so a few hundred cases take seconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from peakpack.orchestrator.faces.cli.app import app, main
from tests.support.paths import REPO

DEMO = REPO / "inventory" / "demo.toml"
SNAPSHOT = REPO / "inventory" / "demo-snapshot.json"
EXAMPLE = REPO / "inventory" / "example.toml"

#: infinite, not a number, beyond float64 and int64, absurd for any field peakpack has
BAD_NUMBERS = ("inf", "-inf", "nan", "1e400", "1e30", str(2**70), str(-(2**70)))
#: what arrives in argv: bytes that are not UTF-8 (Python's surrogate escapes), a line break,
#: nothing, far too much
BAD_TEXT = ("\udcff\udcfeab", "ab\ncd", "", "x" * 5000)
#: store URLs that cannot be a store
BAD_URLS = ("nosuch://host/db", "sqlite:///{folder}", "sqlite:///{not_a_db}", "not a url", "sqlite:///{missing}/x.db")


class Tripwire(AssertionError):
    """A bad value reached something that acts."""


def commands() -> Iterator[tuple[list[str], Any]]:
    """(path, command) for every command of the CLI, leaves of every group."""

    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, [*path, name])
        else:
            yield path, cmd

    yield from walk(typer.main.get_command(app), [])


def kind(param: Any) -> str:
    """What a parameter takes, from its declaration: flag, choice, number, file, folder, text."""
    if getattr(param, "is_flag", False):
        return "flag"
    td = param.type_descriptor
    info = td.parameter_info
    if td.is_choice or (isinstance(td.annotation, type) and issubclass(td.annotation, __import__("enum").Enum)):
        return "choice"
    if param.nargs == -1:
        return "variadic"
    if td.annotation in (int, float):
        return "number"
    if td.is_path:
        return "folder" if not info.file_okay else "file" if info.exists else "output"
    return "text"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "folder").mkdir()
    (root / "trace").mkdir()
    (root / "trace" / "vm-1").write_text("10\n20\n30\n")
    (root / "not-utf8.txt").write_bytes(b"\xff\xfe[cluster]\nname = \"\xe9\"\n")
    (root / "not-a-db").write_text("just text\n")
    (root / "plain.txt").write_text("hello\n")
    return {"root": root, "folder": root / "folder", "trace": root / "trace", "not_utf8": root / "not-utf8.txt",
            "not_a_db": root / "not-a-db", "plain": root / "plain.txt", "missing": root / "missing"}


def valid(param: Any, files: dict[str, Path]) -> list[str]:
    """A value that is fine for `param` (for the parameters a case does not fuzz but needs)."""
    name = param.name
    by_name = {"inventory": str(DEMO), "snapshot": str(SNAPSHOT), "container": "web-1", "to": "node-2",
               "node": "node-1", "plan_id": "1", "trace": str(files["trace"]), "http_port": "0",
               "out_dir": str(files["root"] / "report"), "command": "true", "kind": "plans"}
    if name in by_name:
        return [by_name[name]]
    k = kind(param)
    if k == "choice":
        return [str(param.type_descriptor.choices[0])]
    if k == "number":
        return ["1"]
    if k in ("file", "output"):
        return [str(files["plain"])]
    if k == "folder":
        return [str(files["folder"])]
    return ["x"]


def bad_values(param: Any, files: dict[str, Path]) -> list[str]:
    """Every class of bad value `param`'s kind can receive."""
    k = kind(param)
    if k == "number":
        return list(BAD_NUMBERS)
    if k == "choice":
        return ["nope", *BAD_TEXT]
    if k == "file":
        return [str(files["folder"]), str(files["not_utf8"]), str(files["missing"]), "/dev/zero"]
    if k == "output":
        return [str(files["folder"]), str(files["missing"] / "deeper" / "x")]
    if k == "folder":
        return [str(files["plain"]), str(files["plain"] / "sub")]
    if k == "text":
        urls = [u.format(folder=files["folder"], not_a_db=files["not_a_db"], missing=files["missing"])
                for u in BAD_URLS] if param.name == "db" else []
        return [*BAD_TEXT, *urls]
    return []  # flags; variadic arguments (a command line for a lab node) take any text


def argv_for(path: list[str], cmd: Any, target: Any, value: str, files: dict[str, Path]) -> list[str]:
    """The command line of `path` with `value` for `target` and a valid value for every other
    required parameter (and the safe options: dry runs, one epoch)."""
    options: list[str] = []
    arguments: list[str] = []
    for p in cmd.params:
        chosen = [value] if p is target else valid(p, files) if p.required else None
        if chosen is None:
            continue
        if isinstance(p, typer.core.TyperArgument):
            arguments += chosen
        else:
            options += [p.opts[0], *chosen]
    safe = {"serve": ["--dry-run", "--once"], "service": ["--dry-run"]}.get(path[0], [])
    return [*path, *options, *safe, *arguments] if path[-1] != "exec" else [*path, *options, "--", *arguments]


@pytest.fixture(autouse=True)
def tripwires(monkeypatch: pytest.MonkeyPatch, files: dict[str, Path]) -> None:
    """Whatever acts raises: a bad value must be refused before it gets there."""
    from peakpack.lab import Lab
    from peakpack.orchestrator.act.controller import Controller
    from peakpack.orchestrator.faces.web import server
    from peakpack.orchestrator.remote.shell import RemoteShell
    from peakpack.orchestrator.simulate import loop

    def trip(what: str) -> Any:
        def tripped(*_: Any, **__: Any) -> Any:
            raise Tripwire(f"a bad value reached {what}")

        return tripped

    for obj, attr in ((Lab, "up"), (Lab, "down"), (Lab, "fault"), (Lab, "exec"), (Controller, "run_forever"),
                      (Controller, "run_once"), (server, "run"), (server, "serving_in_background"),
                      (RemoteShell, "__init__"), (loop, "simulate")):
        monkeypatch.setattr(obj, attr, trip(f"{getattr(obj, '__name__', obj)}.{attr}"))
    monkeypatch.setenv("PEAKPACK_DB", f"sqlite:///{files['root'] / 'pp.db'}")
    monkeypatch.setenv("PEAKPACK_LAB_DIR", str(files["root"] / "lab"))
    monkeypatch.setenv("COLUMNS", "200")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def assert_refused(argv: list[str], code: int, stderr: str, names: str | None = None) -> None:
    shown = f"peakpack {' '.join(map(repr, argv))}"
    assert "Traceback" not in stderr, f"{shown}: traceback\n{stderr}"
    assert code == 2, f"{shown}: exit {code}, not 2\n{stderr}"
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, f"{shown}: not one line\n{stderr}"
    if names is not None:
        assert names in stderr, f"{shown}: the line does not name {names}\n{stderr}"


def cases(files: dict[str, Path]) -> Iterator[tuple[list[str], str]]:
    """(argv, the field the error must name) for every parameter and every bad value of its kind."""
    for path, cmd in commands():
        for p in cmd.params:
            for value in bad_values(p, files):
                hint = p.opts[0] if p.opts and p.opts[0].startswith("-") else None
                yield argv_for(path, cmd, p, value, files), hint or ""


def test_every_parameter_refuses_every_class_of_bad_value(files: dict[str, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    seen = 0
    for argv, names in cases(files):
        code, stderr = run(argv, capsys)
        # a flag is named by itself (`--time-limit`), except where the store's URL is judged
        assert_refused(argv, code, stderr, names or None)
        seen += 1
    assert seen > 200  # every command, every parameter: the tree was walked


def numeric_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line index, key) of every `key = number` line, and every number of a `key = [..]` list."""
    for i, line in enumerate(text.splitlines()):
        m = re.match(r"^(\w+)\s*=\s*(\[?[-\d.]+)", line)
        if m:
            yield i, m.group(1)


@pytest.mark.parametrize("bad", BAD_NUMBERS + ("-1",))
def test_every_number_of_the_inventory_refuses_bad_numbers(bad: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    lines = EXAMPLE.read_text().splitlines()
    keys = list(numeric_lines(EXAMPLE.read_text()))
    assert len(keys) > 30
    for i, key in keys:
        mutated = list(lines)
        mutated[i] = re.sub(r"=\s*(\[)?[-\d.]+", lambda m: f"= {m.group(1) or ''}{bad}", lines[i], count=1)
        inv = tmp_path / "inv.toml"
        inv.write_text("\n".join(mutated) + "\n")
        argv = ["config", "show", "--inventory", str(inv)]
        code, stderr = run(argv, capsys)
        assert_refused(argv, code, stderr, key)


def snapshot_mutations() -> Iterator[tuple[str, Any]]:
    """(field, a snapshot document with that field made bad) for the snapshot's numbers and time."""
    doc = json.loads(SNAPSHOT.read_text())
    for key in ("cpu", "memory_mb"):
        for bad in (float("inf"), float("nan"), 1e30, 2**70, -1):
            mutated = json.loads(json.dumps(doc))
            mutated["containers"][0][key] = bad
            yield key, mutated
    for when in ("2026-11-23T10:00:00", "2026-11-23 10:00", "yesterday", "9999-99-99T00:00:00Z"):
        yield "taken_at", {**doc, "taken_at": when}
    yield "version", {**doc, "version": 2**70}
    for port in ("0/tcp", "65536/tcp", "99999/udp"):  # a published port is a port
        mutated = json.loads(json.dumps(doc))
        mutated["containers"][0]["ports"] = ["8080/tcp", port]
        yield "ports", mutated


def test_every_field_of_a_snapshot_refuses_bad_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for key, mutated in snapshot_mutations():
        snap = tmp_path / "snap.json"
        snap.write_text(json.dumps(mutated))
        for argv in (["plan", "--inventory", str(DEMO), "--snapshot", str(snap)],
                     ["serve", "--inventory", str(DEMO), "--snapshot", str(snap), "--dry-run"]):
            code, stderr = run(argv, capsys)
            assert_refused(argv, code, stderr, key)
