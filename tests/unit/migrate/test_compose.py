"""`peakpack compose up` decides, before anything runs, where each service of a project deploys
(where its containers are; new ones on --node or the project's one node), from which files (as
compose recorded them, the same on every node that deploys), and refuses in one line what would
start a second copy; then nodes deploy one after the other, stopping at the first failure. The
nodes are a fake SSH pool; the real lab test is tests/integration/test_owners.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from peakpack.migrate import compose, owners
from peakpack.orchestrator.domain.errors import NodeError, PeakpackError
from peakpack.orchestrator.remote import CommandResult


def member(name: str, node: str, service: str, folder: str = "/srv/shop",
           files: tuple[str, ...] = ("/srv/shop/docker-compose.yml",)) -> compose.Member:
    return compose.Member(name, node, owners.Compose("shop", service, folder, files))


WEB = member("shop_web_1", "node-1", "web")
DB = member("shop_db_1", "node-1", "db")
MOVED = member("shop_counter_1", "node-2", "counter")


def test_each_service_deploys_where_its_container_runs_and_new_ones_where_told() -> None:
    assert compose.placement("shop", [WEB, DB, MOVED], ["web", "db", "counter"], None) == {
        "node-1": ["web", "db"], "node-2": ["counter"]}
    assert compose.placement("shop", [WEB, MOVED], ["web", "cache"], "node-3") == {
        "node-1": ["web"], "node-3": ["cache"]}
    assert compose.placement("shop", [WEB, DB], ["web", "cache"], None) == {"node-1": ["web", "cache"]}


def test_what_would_start_a_second_copy_is_refused_in_one_line() -> None:
    again = member("shop_counter_1", "node-1", "counter")
    with pytest.raises(PeakpackError) as split:
        compose.placement("shop", [again, MOVED], ["counter"], None)
    assert str(split.value) == ("counter: service counter of shop has containers on node-1 and node-2 "
                                "(shop_counter_1); keep one (`docker rm -f shop_counter_1` on the other node), "
                                "then deploy")
    with pytest.raises(PeakpackError, match=r"^--node: service cache of shop runs on no node yet and the project "
                                            r"runs on node-1, node-2; give --node NODE"):
        compose.placement("shop", [WEB, MOVED], ["cache"], None)
    with pytest.raises(PeakpackError, match=r"^--node: shop runs on no node yet; give --node NODE"):
        compose.candidates("shop", [], None)
    assert compose.candidates("shop", [MOVED, WEB], "node-3") == ["node-1", "node-2", "node-3"]
    with pytest.raises(PeakpackError, match=r"^SERVICE: cahce is not a service of shop; its files define web, db$"):
        compose.chosen("shop", ["web", "db"], ["cahce"])
    assert compose.chosen("shop", ["web", "db"], []) == ["web", "db"]


def test_the_files_are_those_compose_recorded_unless_given() -> None:
    assert compose.project_files("shop", [WEB, MOVED], None, []) == ("/srv/shop", ("/srv/shop/docker-compose.yml",))
    assert compose.project_files("shop", [WEB], None, ["/srv/shop/prod.yml"]) == ("/srv/shop", ("/srv/shop/prod.yml",))
    assert compose.project_files("shop", [], "/opt/shop/", []) == ("/opt/shop/", ("/opt/shop/docker-compose.yml",))
    with pytest.raises(PeakpackError, match=r"^--project-directory: shop runs on no node yet"):
        compose.project_files("shop", [], None, [])
    elsewhere = member("shop_db_1", "node-3", "db", "/home/ana/shop", ("/home/ana/shop/docker-compose.yml",))
    with pytest.raises(PeakpackError, match=r"^--project-directory: the containers of shop were deployed from "
                                            r"/home/ana/shop and /srv/shop; give --project-directory and --file$"):
        compose.project_files("shop", [WEB, elsewhere], None, [])


def test_files_missing_or_different_on_a_node_that_deploys_are_refused() -> None:
    files = ["/srv/shop/docker-compose.yml", "/srv/shop/.env"]
    same = compose.parse_checksums("aa  /srv/shop/docker-compose.yml\nbb  /srv/shop/.env\n")
    assert same == {"/srv/shop/docker-compose.yml": "aa", "/srv/shop/.env": "bb"}
    assert compose.why_files_differ(files, {"node-1": same, "node-2": same}) is None
    missing = compose.parse_checksums("aa  /srv/shop/docker-compose.yml\nmissing /srv/shop/.env\n")
    assert compose.why_files_differ(files, {"node-1": same, "node-2": missing}) == (
        "/srv/shop/.env: not on node-2; put the project's files at the same path on every node it runs on")
    edited = {**same, "/srv/shop/docker-compose.yml": "cc"}
    assert compose.why_files_differ(files, {"node-1": same, "node-2": edited}) == (
        "/srv/shop/docker-compose.yml: differs between node-1 and node-2; put the same project files on every node "
        "it runs on")


def test_up_runs_compose_for_the_project_with_no_dependencies() -> None:
    argv = compose.up_argv("shop", "/srv/shop", ["/srv/shop/a.yml", "/srv/shop/b.yml"], ["web", "db"])
    assert argv == ["sh", "-c", compose.COMPOSE_SCRIPT, "sh", "-p", "shop", "--project-directory", "/srv/shop",
                    "-f", "/srv/shop/a.yml", "-f", "/srv/shop/b.yml", "up", "-d", "--no-deps", "web", "db"]
    assert compose.printable("Recreating x ... \r\nRecreating x ... \rRecreating x ... done\r\n") == (
        "Recreating x ... \nRecreating x ... done")


def inspected(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"Name": f"/{name}", "State": {"Running": True}, "Config": {"Labels": labels}}


LABELS = {"com.docker.compose.project": "shop", "com.docker.compose.service": "counter",
          "com.docker.compose.oneoff": "False", "com.docker.compose.project.working_dir": "/srv/shop",
          "com.docker.compose.project.config_files": "docker-compose.yml"}


class Nodes:
    """Each node's answers: its containers' inspect documents, or no answer at all; `up` fails
    where told."""

    def __init__(self, docs: dict[str, list[dict[str, Any]]], down: Sequence[str] = (),
                 failing: Sequence[str] = ()) -> None:
        self.docs, self.down, self.failing = docs, down, failing
        self.ran: list[tuple[str, tuple[str, ...]]] = []

    async def run(self, node: str, argv: Sequence[str], **_: Any) -> CommandResult:
        if node in self.down:
            raise NodeError(node, "SSH to 10.0.0.13:22 failed: timed out")
        self.ran.append((node, tuple(argv)))
        if argv[2] == compose.PROJECT_SCRIPT:
            return CommandResult(0, json.dumps(self.docs.get(node, [])), "")
        return CommandResult(1 if node in self.failing else 0, "", f"{node} said so")


def test_the_project_is_read_on_every_node_and_a_silent_node_that_may_be_on_refuses_the_deploy() -> None:
    oneoff = inspected("shop_counter_run_1a2b", {**LABELS, "com.docker.compose.oneoff": "True"})
    other = inspected("blog_web_1", {**LABELS, "com.docker.compose.project": "blog"})
    nodes = Nodes({"node-2": [inspected("shop_counter_1", LABELS), oneoff, other]}, down=["node-3"])
    found = asyncio.run(compose.read_project(nodes, ["node-1", "node-2", "node-3"], "shop",  # type: ignore[arg-type]
                                             {"node-3": False}.get))
    assert found.members == (member("shop_counter_1", "node-2", "counter"),) and found.off == ("node-3",)
    with pytest.raises(PeakpackError, match=r"^node node-3: SSH to 10.0.0.13:22 failed: timed out; a service of "
                                            r"shop may run there: deploy once it answers$"):
        asyncio.run(compose.read_project(nodes, ["node-1", "node-3"], "shop", {"node-3": None}.get))  # type: ignore[arg-type]
    with pytest.raises(NodeError, match="node node-1: docker inspect answered something unexpected"):
        compose.parse_members("node-1", "shop", "[{}]")


def test_nodes_deploy_one_after_the_other_and_stop_at_the_first_failure() -> None:
    nodes = Nodes({}, failing=["node-2"])
    where = {"node-1": ["web"], "node-2": ["counter"], "node-3": ["db"]}
    done = asyncio.run(compose.deploy(nodes, "shop", "/srv/shop", ["/srv/shop/docker-compose.yml"], where))  # type: ignore[arg-type]
    assert [(d.node, d.services, d.ok, d.output) for d in done] == [
        ("node-1", ("web",), True, "node-1 said so"), ("node-2", ("counter",), False, "node-2 said so")]
    assert [n for n, _ in nodes.ran] == ["node-1", "node-2"]
