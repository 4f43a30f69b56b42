"""`peakpack compose up`: a compose project's deploy that runs `up` where each service runs now, so a
container peakpack moved is updated where it is and never started again on the node it left.

A compose deploy is a command run against one node's engine: `docker-compose up` there creates
every service of the project it does not find there, so after a migration it starts a second copy
on the node the container left. This reads where each service's containers are on every node (the
labels compose put on them, `owners.compose_of`), then runs on each node, over SSH,
`docker-compose -p PROJECT --project-directory DIR -f FILE... up -d --no-deps SERVICE...` for the
services there (`--no-deps`: a dependency is deployed where it runs, not next to its dependant). A
service that runs nowhere yet goes to the node the operator names (or the one node the project runs
on). The project's files must be the same at the same path on every node that deploys: their
checksums are compared before anything runs, and the nodes deploy one after the other, stopping at
the first that fails.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from peakpack.orchestrator.domain.errors import NodeError, PeakpackError
from peakpack.orchestrator.remote import SshPool

from . import owners
from .settle import PowerProbe

#: every container of the project named by $1 on this node, stopped ones too (`up` starts those)
PROJECT_SCRIPT = (f'ids=$(docker ps -aq --filter "label={owners.COMPOSE_PROJECT}=$1") || exit 1; '
                  'if [ -z "$ids" ]; then echo "[]"; else docker inspect $ids; fi')
#: compose 1.x where installed, else compose 2's `docker compose`
COMPOSE_SCRIPT = ('if command -v docker-compose >/dev/null 2>&1; then exec docker-compose "$@"; fi; '
                  'exec docker compose "$@"')
#: "HASH  PATH" or "missing PATH" for every path given
CHECKSUM_SCRIPT = 'for f; do if [ -f "$f" ]; then sha256sum -- "$f"; else echo "missing $f"; fi; done'
#: seconds one node's `up` may take (it may pull images)
UP_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Member:
    """A container of the project: where it is, and what compose recorded on it."""

    name: str
    node: str
    compose: owners.Compose


@dataclass(frozen=True)
class Project:
    """Where the project's containers are: every one found, and the nodes not read because their
    BMC says they are off."""

    members: tuple[Member, ...]
    off: tuple[str, ...]


def parse_members(node: str, project: str, text: str) -> list[Member]:
    """PROJECT_SCRIPT's output -> the project's containers on `node` (one-off `run` containers left out)."""
    try:
        docs = json.loads(text)
        found = [(str(d["Name"]).lstrip("/"), owners.compose_of(d["Config"].get("Labels") or {})) for d in docs]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise NodeError(node, f"docker inspect answered something unexpected: {text[:80]!r}") from None
    return [Member(name, node, c) for name, c in found if c is not None and c.project == project]


async def read_project(ssh: SshPool, nodes: Sequence[str], project: str, bmc_power: PowerProbe) -> Project:
    """The project's containers on every node. A node that does not answer is skipped only when its
    BMC says it is off; otherwise a service may run there, and deploying it elsewhere would start a
    second copy, so the deploy is refused."""

    async def one(node: str) -> list[Member] | None:
        try:
            res = await ssh.run(node, ["sh", "-c", PROJECT_SCRIPT, "sh", project], timeout=60)
        except NodeError as exc:
            if await asyncio.to_thread(bmc_power, node) is False:
                return None
            raise PeakpackError(f"{exc}; a service of {project} may run there: deploy once it answers") from None
        return parse_members(node, project, res.stdout)

    found = await asyncio.gather(*(one(n) for n in nodes))
    return Project(tuple(m for ms in found if ms is not None for m in ms),
                   tuple(n for n, ms in zip(nodes, found, strict=True) if ms is None))


def project_files(project: str, members: Iterable[Member], directory: str | None,
                  files: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The project's folder and files on the nodes: as given, else as compose recorded them on its
    containers (which must agree), else `docker-compose.yml` in the folder given."""
    recorded = {(m.compose.working_dir, m.compose.config_files) for m in members}
    if directory is None and len(recorded) > 1:
        shown = " and ".join(sorted(d for d, _ in recorded))
        raise PeakpackError(f"--project-directory: the containers of {project} were deployed from {shown}; "
                            "give --project-directory and --file")
    if directory is None and not recorded:
        raise PeakpackError(f"--project-directory: {project} runs on no node yet; give the folder of its files "
                            "(the same path on every node)")
    if directory is None:
        folder, seen_files = next(iter(recorded))
        return folder, tuple(files) or seen_files
    return directory, tuple(files) or (f"{directory.rstrip('/')}/docker-compose.yml",)


def candidates(project: str, members: Iterable[Member], node: str | None) -> list[str]:
    """The nodes that may deploy: where the project has containers, and `node` (new services)."""
    nodes = sorted({m.node for m in members} | ({node} if node else set()))
    if not nodes:
        raise PeakpackError(f"--node: {project} runs on no node yet; give --node NODE for where to create it")
    return nodes


def placement(project: str, members: Iterable[Member], services: Sequence[str],
              node: str | None) -> dict[str, list[str]]:
    """Node -> the services it deploys: where each service's containers are; a service that runs
    nowhere yet goes to `node`, or to the one node the project runs on. A service with containers
    on two nodes is refused: any `up` would leave one of them out of date or start a third."""
    where: dict[str, set[str]] = {}
    for m in members:
        where.setdefault(m.compose.service, set()).add(m.node)
    result: dict[str, list[str]] = {}
    homes = sorted({n for ns in where.values() for n in ns})
    for service in services:
        nodes = sorted(where.get(service, ()))
        if len(nodes) > 1:
            names = sorted({m.name for m in members if m.compose.service == service})
            name = names[0] if len(names) == 1 else "NAME"
            raise PeakpackError(f"{service}: service {service} of {project} has containers on {' and '.join(nodes)} "
                                f"({', '.join(names)}); keep one (`docker rm -f {name}` on the other node), then "
                                "deploy")
        if not nodes and node is None and len(homes) != 1:
            raise PeakpackError(f"--node: service {service} of {project} runs on no node yet and the project runs on "
                                f"{', '.join(homes) or 'none'}; give --node NODE for where to create it")
        result.setdefault(nodes[0] if nodes else node or homes[0], []).append(service)
    return {n: result[n] for n in sorted(result)}


def chosen(project: str, defined: Sequence[str], asked: Sequence[str]) -> list[str]:
    """The services to deploy: those asked for (each one the files define), else all of them."""
    unknown = [s for s in asked if s not in defined]
    if unknown:
        raise PeakpackError(f"SERVICE: {unknown[0]} is not a service of {project}; its files define "
                            f"{', '.join(defined) or 'none'}")
    return list(asked) or list(defined)


def compose_argv(project: str, directory: str, files: Sequence[str], *args: str) -> list[str]:
    """A compose command for the project, as it runs on a node."""
    return ["sh", "-c", COMPOSE_SCRIPT, "sh", "-p", project, "--project-directory", directory,
            *(a for f in files for a in ("-f", f)), *args]


def up_argv(project: str, directory: str, files: Sequence[str], services: Sequence[str]) -> list[str]:
    return compose_argv(project, directory, files, "up", "-d", "--no-deps", *services)


def parse_checksums(text: str) -> dict[str, str | None]:
    """CHECKSUM_SCRIPT's output -> path: sha256 (None: missing)."""
    sums: dict[str, str | None] = {}
    for line in text.splitlines():
        if line.startswith("missing "):
            sums[line.removeprefix("missing ")] = None
        elif line.strip():
            digest, _, path = line.partition("  ")
            sums[path] = digest
    return sums


def why_files_differ(files: Sequence[str], sums: Mapping[str, Mapping[str, str | None]]) -> str | None:
    """Why the project's files (`sums`: node -> path -> sha256, None when missing) cannot deploy
    on these nodes: a file missing on one, or not the same on two; None when they are the same."""
    nodes = sorted(sums)
    for path in files:
        for node in nodes:
            if sums[node].get(path) is None:
                return f"{path}: not on {node}; put the project's files at the same path on every node it runs on"
        differ = [n for n in nodes if sums[n][path] != sums[nodes[0]][path]]
        if differ:
            return (f"{path}: differs between {nodes[0]} and {differ[0]}; put the same project files on every node "
                    "it runs on")
    return None


async def check_files(ssh: SshPool, nodes: Sequence[str], files: Sequence[str]) -> None:
    """Refuse, in one line, files that are missing or not the same on the nodes that deploy."""
    answers = await asyncio.gather(*(ssh.run(n, ["sh", "-c", CHECKSUM_SCRIPT, "sh", *files], timeout=60)
                                     for n in nodes))
    why = why_files_differ(files, {n: parse_checksums(a.stdout) for n, a in zip(nodes, answers, strict=True)})
    if why is not None:
        raise PeakpackError(why)


async def services_of(ssh: SshPool, node: str, project: str, directory: str, files: Sequence[str]) -> list[str]:
    """The services the project's files define, as compose itself reads them on `node`."""
    res = await ssh.run(node, compose_argv(project, directory, files, "config", "--services"), timeout=120)
    return [s for s in res.stdout.split() if s]


@dataclass(frozen=True)
class NodeUp:
    """One node's `up`: the services it deployed, whether it succeeded, and compose's output."""

    node: str
    services: tuple[str, ...]
    ok: bool
    output: str


def printable(output: str) -> str:
    """Compose's output as lines: what a terminal would show of a line it redrew with carriage returns."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in output.replace("\r\n", "\n").split("\n")).strip()


async def deploy(ssh: SshPool, project: str, directory: str, files: Sequence[str],
                 where: Mapping[str, Sequence[str]]) -> list[NodeUp]:
    """`up -d --no-deps` of each node's services, one node after the other, stopping at the first
    that fails (a broken project file fails on the first node, not on all)."""
    done: list[NodeUp] = []
    for node, services in where.items():
        res = await ssh.run(node, up_argv(project, directory, files, services), timeout=UP_TIMEOUT_S, check=False)
        done.append(NodeUp(node, tuple(services), res.ok, printable(res.stderr + res.stdout)))
        if not res.ok:
            break
    return done
