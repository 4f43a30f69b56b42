"""Containers another tool owns (compose, swarm, Kubernetes, Nomad, ECS) stay where they are unless
the operator opts a compose container in; the project's files must then be on its target; a name
that runs on two nodes holds both with the owner that started the second copy and the fix, on the
plan's snapshot, the controller's log and the web page; an unsettled migration of that container
explains it instead."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from starlette.testclient import TestClient

from peakpack.db.store import Store
from peakpack.migrate import owners, spec
from peakpack.orchestrator.act.controller import Controller, ControllerSettings
from peakpack.orchestrator.decide.solve import hold_unsettled, make_plan
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.model import Container, NodeState
from peakpack.orchestrator.domain.ports import Observation
from peakpack.orchestrator.faces.web.app import create_app
from peakpack.orchestrator.observe.cluster import NodeView, one_copy_each
from tests.unit.migrate.test_spec import variant

COMPOSE = {"com.docker.compose.project": "shop", "com.docker.compose.service": "counter",
           "com.docker.compose.oneoff": "False", "com.docker.compose.project.working_dir": "/srv/shop",
           "com.docker.compose.project.config_files": "docker-compose.yml,docker-compose.override.yml",
           "com.docker.compose.container-number": "1", "com.docker.compose.version": "1.29.2"}
SWARM = {"com.docker.swarm.service.name": "shop_web", "com.docker.swarm.task.id": "y0k3x9",
         "com.docker.stack.namespace": "shop"}
KUBERNETES = {"io.kubernetes.pod.name": "web-7d9", "io.kubernetes.pod.namespace": "prod",
              "io.kubernetes.container.name": "web"}
NOMAD = {"com.hashicorp.nomad.alloc_id": "45b9fe13-0c85-9b87-0f3d-1c82774d9b5f", "com.hashicorp.nomad.job_name": "web"}
ECS = {"com.amazonaws.ecs.task-arn": "arn:aws:ecs:eu-west-1:1:task/prod/0f9a",
       "com.amazonaws.ecs.task-definition-family": "web"}


def labelled(labels: dict[str, str], name: str = "shop_counter_1", **changes: Any) -> dict[str, Any]:
    """A movable service container (test_migrate_spec.SERVICE) with these labels."""
    return variant(Name=f"/{name}", Config__Labels=labels, **changes)


def test_a_compose_container_stays_with_the_owner_and_the_fix() -> None:
    assert spec.why_immovable(labelled(COMPOSE), "node-1") == (
        "managed by docker compose project shop (node-1:/srv/shop); its next `up` there would start it again; label "
        "it `peakpack.migrate=true` once the project runs from every node (its files on each, deploys through "
        "`peakpack compose up -p shop`), or move the project")


def test_the_opt_in_lets_only_a_compose_container_move() -> None:
    assert spec.why_immovable(labelled({**COMPOSE, "peakpack.migrate": "true"})) is None
    assert spec.why_immovable(labelled({**COMPOSE, "peakpack.migrate": "TRUE"})) is None
    for labels, who, what in ((SWARM, "swarm service shop_web of stack shop", "swarm replaces its task"),
                              (KUBERNETES, "Kubernetes pod prod/web-7d9", "the kubelet starts it again"),
                              (NOMAD, "Nomad job web (allocation 45b9fe13)", "Nomad restarts its task"),
                              (ECS, "Amazon ECS task web", "the ECS agent stops its task")):
        for opt_in in ({}, {"peakpack.migrate": "true"}):
            why = spec.why_immovable(labelled({**labels, **opt_in}), "node-1")
            assert why is not None and why.startswith(f"managed by {who}; {what}"), why
            assert why.endswith("`peakpack.migrate=true` cannot change that"), why


def test_what_is_no_owner_moves_as_before() -> None:
    oneoff = {**COMPOSE, "com.docker.compose.oneoff": "True"}  # `docker-compose run`: no `up` starts it again
    for labels in ({}, {"team": "shop"}, oneoff, {"peakpack.migrate": "true"}):
        assert owners.owner_of(labels) is None
        assert spec.why_immovable(labelled(labels)) is None


@pytest.mark.parametrize("value", ["yes", "no", "", "ture", "1"])
def test_a_migrate_label_that_is_neither_true_nor_false_keeps_it_put_with_the_fix(value: str) -> None:
    for labels in ({}, COMPOSE):
        why = spec.why_immovable(labelled({**labels, "peakpack.migrate": value}))
        assert why == (f"label peakpack.migrate: {value!r} is neither true nor false; use false (it stays) or true "
                       "(a compose container may move)")
    assert spec.why_immovable(labelled({**COMPOSE, "peakpack.migrate": "false"})) == (
        "opted out with the label peakpack.migrate=false")


def test_compose_files_are_read_as_compose_1_and_2_record_them() -> None:
    one = owners.compose_of(COMPOSE)
    assert one is not None and one.config_files == ("/srv/shop/docker-compose.yml",
                                                    "/srv/shop/docker-compose.override.yml")
    two = owners.compose_of({**COMPOSE, "com.docker.compose.project.config_files": "/srv/shop/compose.yaml"})
    assert two is not None and two.config_files == ("/srv/shop/compose.yaml",)


def test_a_scaled_compose_service_moves_only_at_scale_one() -> None:
    opted = {**COMPOSE, "peakpack.migrate": "true"}
    one = labelled(opted, Mounts=[])
    two = labelled({**opted, "com.docker.compose.container-number": "2"}, name="shop_counter_2", Mounts=[])
    other = labelled({**opted, "com.docker.compose.service": "db"}, name="shop_db_1", Mounts=[])
    assert spec.immovable([one, other], "node-1") == {}
    why = spec.immovable([one, two, other], "node-1")
    assert set(why) == {"shop_counter_1", "shop_counter_2"}
    assert why["shop_counter_1"].startswith("service counter of docker compose project shop has 2 containers here "
                                            "(shop_counter_1, shop_counter_2)")


def test_an_opted_in_compose_container_needs_its_project_files_on_the_target() -> None:
    d = labelled({**COMPOSE, "peakpack.migrate": "true"}, Mounts=[])
    files = ["/srv/shop/docker-compose.yml", "/srv/shop/docker-compose.override.yml"]
    assert spec.needed_paths(d) == files and spec.shared_paths([d]) == sorted(files)
    here = spec.NodeFacts(networks={"appnet": {"Name": "appnet"}, "backnet": {"Name": "backnet"}})
    there = replace(here, paths=frozenset(files[:1]))
    assert spec.why_not_onto(d, here, there, "node-2") == (
        "/srv/shop/docker-compose.override.yml of its docker compose project does not exist on node-2; put the "
        "project's files there first (its deploys run where it runs)")
    assert spec.why_not_onto(d, here, replace(here, paths=frozenset(files)), "node-2") is None
    assert spec.needed_paths(labelled(COMPOSE)) == []  # one that stays put needs nothing anywhere


def copy_on(node: str, created: str, labels: dict[str, str]) -> tuple[str, dict[str, Any]]:
    return node, {**labelled(labels), "Created": created}


def recreated() -> str:
    """The hold's reason after compose's `up` on node-1 started again what had moved to node-2."""
    return spec.why_twice("shop_counter_1", copy_on("node-1", "2026-11-28T00:07:48Z", COMPOSE),
                          copy_on("node-2", "2026-11-28T00:07:29Z", {**COMPOSE, "peakpack.migrate": "true"}))


def test_a_name_on_two_nodes_says_which_owner_started_it_again_and_what_to_do() -> None:
    moved = copy_on("node-2", "2026-11-28T00:07:29.800664508Z", {**COMPOSE, "peakpack.migrate": "true"})
    again = copy_on("node-1", "2026-11-28T00:07:29.8006646Z", COMPOSE)  # 92 ns later, fewer digits
    why = spec.why_twice("shop_counter_1", again, moved)
    assert why == (
        "container shop_counter_1 runs on both node-1 and node-2: docker compose project shop (node-1:/srv/shop) "
        "started it again on node-1; keep one copy (`docker rm -f shop_counter_1` on the node whose copy goes; the "
        "one on node-1 is the newer, created 2026-11-28 00:07:29 UTC), then deploy the project through `peakpack "
        "compose up -p shop`, never `up` on one node")
    assert spec.why_twice("shop_counter_1", moved, again).startswith(
        "container shop_counter_1 runs on both node-2 and node-1: docker compose project shop (node-1:/srv/shop) "
        "started it again on node-1;")
    unowned = spec.why_twice("cache", copy_on("node-1", "2026-11-28T00:00:00Z", {}),
                             copy_on("node-3", "2026-11-28T01:00:00Z", {}))
    assert "nothing on it names what started it again on node-3 (no owner's labels: a systemd unit or a script " \
           "that runs `docker run --name cache`?)" in unowned
    assert unowned.endswith("then label it `peakpack.migrate=false` if something starts it by name")


def view(node: str, docs: list[dict[str, Any]]) -> NodeView:
    names = [spec.name_of(d) for d in docs]
    return NodeView(NodeState(node), [Container(n, node, 0.1, 16) for n in names],
                    inspected=dict(zip(names, docs, strict=True)))


def test_the_observer_holds_both_nodes_with_that_reason_and_plans_one_copy() -> None:
    _, again = copy_on("node-1", "2026-11-28T00:07:48Z", COMPOSE)
    _, moved = copy_on("node-2", "2026-11-28T00:07:29Z", {**COMPOSE, "peakpack.migrate": "true"})
    db = labelled({}, name="db")
    views = [view("node-1", [again]), view("node-2", [moved, db]), view("node-3", [])]
    containers, held = one_copy_each(views)
    assert [(c.name, c.node) for c in containers] == [("shop_counter_1", "node-1"), ("db", "node-2")]
    assert set(held) == {"node-1", "node-2"} and held["node-1"] == held["node-2"]
    assert "docker compose project shop (node-1:/srv/shop) started it again on node-1" in held["node-1"]


def test_an_unsettled_migration_of_that_container_explains_the_second_copy_instead() -> None:
    class Open:
        id, container, source, target = 7, "shop_counter_1", "node-1", "node-2"

    inv = demo_inventory()
    twice = recreated()
    snap = replace(demo_snapshot(inv), held={"node-1": twice, "node-2": twice, "node-3": "not observed"})
    held = hold_unsettled(snap, [Open()]).held
    assert held["node-1"] == held["node-2"] == "migration 7 of shop_counter_1 (node-1 -> node-2) is not settled"
    assert held["node-3"] == "not observed"
    other = replace(snap, held={"node-1": twice.replace("shop_counter_1", "other_1")})
    assert hold_unsettled(other, [Open()]).held["node-1"].startswith("container other_1 runs on both")


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as s:
        yield s


def test_the_controller_logs_the_hold_and_the_web_page_shows_it(store: Store) -> None:
    inv = demo_inventory()
    twice = recreated()
    snap = replace(demo_snapshot(inv), held={"node-1": twice, "node-2": twice})
    log = io.StringIO()
    controller = Controller(inv, store, ControllerSettings(dry_run=True, policy="noop", time_limit_s=2),
                            console=Console(file=log, width=1000), observe=lambda: Observation(snap))
    controller.run_once()
    assert f"held: node-1, node-2: {twice}\n" in log.getvalue()
    store.plans.save(make_plan(inv, snap, policy="noop"), "demo", snap)
    html = TestClient(create_app(store, inv), base_url="http://127.0.0.1").get("/").text
    assert html.count("docker compose project shop (node-1:/srv/shop) started it again on node-1") >= 2
