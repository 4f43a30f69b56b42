"""The tools that own containers on a Docker host and start one again where it was once it is gone
from there, recognised by the labels each puts on every container it creates: compose (its next
`up` on that node), swarm, Kubernetes through dockershim or cri-dockerd, Nomad and the Amazon ECS
agent (their reconcilers). Pure, so the one rule "can this container move" (`spec.why_immovable`)
and the observer's hold of a name running on two nodes (`spec.why_twice`) say the same thing.

Only compose leaves where its containers run to the operator: its deploys are commands run on a
node, so once the project's files are on every node and deploys go through `peakpack compose up`
(which runs `up` where each service runs now), the label `peakpack.migrate=true` lets a compose
container move. The others place their containers themselves; those move only through them.

Not recognisable: a container that a systemd unit, a cron job or a script starts by name with
`docker run` carries no mark of it (its cgroup is dockerd's, not the unit's; only a unit that
passes `--cgroup-parent` would show), so such containers must be labelled `peakpack.migrate=false`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: the labels compose (1.x and 2.x) puts on every container it creates
COMPOSE_PROJECT = "com.docker.compose.project"
COMPOSE_SERVICE = "com.docker.compose.service"
COMPOSE_WORKING_DIR = "com.docker.compose.project.working_dir"
COMPOSE_CONFIG_FILES = "com.docker.compose.project.config_files"
#: "True" on a `docker-compose run` container, which no `up` starts again
COMPOSE_ONEOFF = "com.docker.compose.oneoff"
SWARM_SERVICE = "com.docker.swarm.service.name"
SWARM_TASK = "com.docker.swarm.task.id"
STACK = "com.docker.stack.namespace"
KUBERNETES_POD = "io.kubernetes.pod.name"
KUBERNETES_NAMESPACE = "io.kubernetes.pod.namespace"
NOMAD_ALLOC = "com.hashicorp.nomad.alloc_id"
NOMAD_JOB = "com.hashicorp.nomad.job_name"
ECS_TASK = "com.amazonaws.ecs.task-arn"
ECS_FAMILY = "com.amazonaws.ecs.task-definition-family"

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Compose:
    """A compose service's container: its project, service, and the project's folder and files
    as compose recorded them (absolute here; compose 1.x records the files relative to the folder)."""

    project: str
    service: str
    working_dir: str
    config_files: tuple[str, ...]


def compose_of(labels: Labels) -> Compose | None:
    """The compose project a container belongs to, or None (no project, or a one-off container)."""
    project = labels.get(COMPOSE_PROJECT)
    if not project or str(labels.get(COMPOSE_ONEOFF, "")).lower() == "true":
        return None
    folder = str(labels.get(COMPOSE_WORKING_DIR) or "")
    files = tuple(posixpath.join(folder, f.strip()) for f in str(labels.get(COMPOSE_CONFIG_FILES) or "").split(",")
                  if f.strip())
    return Compose(str(project), str(labels.get(COMPOSE_SERVICE) or ""), folder, files)


@dataclass(frozen=True)
class Owner:
    """Who owns a container (`what`), what it does once the container is gone from its node
    (`recreates`), what the operator does so the container may move (`fix`) or after the owner
    started a second copy (`after`), and whether `peakpack.migrate=true` lets it move (`opt_in`)."""

    what: str
    recreates: str
    fix: str
    after: str
    opt_in: bool = False

    def why_stays(self) -> str:
        return f"managed by {self.what}; {self.recreates}; {self.fix}"


#: what the owners that place containers themselves add to their fix
NO_OPT_IN = "`peakpack.migrate=true` cannot change that"


def _compose(labels: Labels, node: str | None) -> Owner | None:
    c = compose_of(labels)
    if c is None:
        return None
    where = f"{node}:{c.working_dir}" if node else c.working_dir
    deploy = f"`peakpack compose up -p {c.project}`"
    return Owner(f"docker compose project {c.project} ({where})", "its next `up` there would start it again",
                 f"label it `peakpack.migrate=true` once the project runs from every node (its files on each, "
                 f"deploys through {deploy}), or move the project",
                 f"deploy the project through {deploy}, never `up` on one node", opt_in=True)


def _swarm(labels: Labels, node: str | None) -> Owner | None:
    service, task = labels.get(SWARM_SERVICE), labels.get(SWARM_TASK)
    if not service and not task:
        return None
    what = f"swarm service {service}" if service else f"swarm task {str(task)[:12]}"
    stack = f" of stack {labels[STACK]}" if labels.get(STACK) else ""
    fix = f"move it with swarm (placement constraints); {NO_OPT_IN}"
    return Owner(what + stack, "swarm replaces its task whenever this container goes", fix, fix)


def _kubernetes(labels: Labels, node: str | None) -> Owner | None:
    pod = labels.get(KUBERNETES_POD)
    if not pod:
        return None
    fix = f"let Kubernetes move the pod (cordon the node, evict the pod); {NO_OPT_IN}"
    return Owner(f"Kubernetes pod {labels.get(KUBERNETES_NAMESPACE) or 'default'}/{pod}",
                 "the kubelet starts it again wherever its pod is", fix, fix)


def _nomad(labels: Labels, node: str | None) -> Owner | None:
    alloc = labels.get(NOMAD_ALLOC)
    if not alloc:
        return None
    job = f"Nomad job {labels[NOMAD_JOB]} (allocation {alloc[:8]})" if labels.get(NOMAD_JOB) else \
        f"Nomad allocation {alloc[:8]}"
    fix = f"let Nomad move it (`nomad alloc stop {alloc[:8]}`); {NO_OPT_IN}"
    return Owner(job, "Nomad restarts its task where its allocation is", fix, fix)


def _ecs(labels: Labels, node: str | None) -> Owner | None:
    task = labels.get(ECS_TASK)
    if not task:
        return None
    family = labels.get(ECS_FAMILY) or task.rsplit("/", 1)[-1]
    fix = f"let ECS place it (drain the container instance); {NO_OPT_IN}"
    return Owner(f"Amazon ECS task {family}", "the ECS agent stops its task when this container goes and its "
                 "service starts another", fix, fix)


#: every owner recognised, asked in this order (a container carries one owner's labels)
RECOGNISED: tuple[Callable[[Labels, str | None], Owner | None], ...] = (_compose, _swarm, _kubernetes, _nomad, _ecs)


def owner_of(labels: Labels, node: str | None = None) -> Owner | None:
    """The tool that would start this container again on `node` (named in the reason when given)
    once it is gone from there, or None when its labels name none."""
    return next((o for recognise in RECOGNISED if (o := recognise(labels, node)) is not None), None)
