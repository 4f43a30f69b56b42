"""Loading and validating inventories (TOML) and snapshots (JSON).

pydantic does the checking; this module turns its errors into the one line an operator needs:
the file, the field path (`nodes[1].cpus`) and what to do. The validated result is converted to
the frozen dataclasses of `model.py`, so nothing downstream depends on pydantic.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tomllib
from dataclasses import fields, replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from . import budgets, inputs
from .errors import InventoryError, PeakpackError, SnapshotError
from .guard import INVENTORY_KEYS, GuardSettings, QosSettings
from .model import (
    BmcConfig,
    Clients,
    ClusterConfig,
    ClusterSnapshot,
    Container,
    ContainerClass,
    Inventory,
    NodeRole,
    NodeSpec,
    NodeState,
    PowerCurve,
    QosClass,
    ReviewConfig,
    SshConfig,
    StoreConfig,
    WebConfig,
)
from .settings import NESTED, MigrationSettings, PlannerSettings, RemoteSettings

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
WEAK_CIPHER_SUITES = (0, 1, 2)

Name = Annotated[str, Field(pattern=NAME_RE, max_length=63)]
#: every number of the schema has the bounds of `inputs` (finite, sane for the field, small
#: enough for the solver's integers, the store and `timedelta`)
Port = Annotated[int, Field(**inputs.PORT.pydantic())]
PositiveSeconds = Annotated[float, Field(**inputs.POSITIVE_SECONDS.pydantic())]
Watts = Annotated[float, Field(**inputs.WATTS.pydantic())]
Count = Annotated[int, Field(**inputs.COUNT.pydantic())]


class _Strict(BaseModel):
    #: inf and nan are valid TOML and JSON floats, but no setting or observation is infinite
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _Cluster(_Strict):
    name: Name
    #: also `[planner]` cap and memory_cap, of an older inventory: checked as the planner's
    cap: Any = None
    memory_cap: Any = None
    epoch_seconds: Annotated[int, Field(**inputs.EPOCH_SECONDS.pydantic())] = 600
    traffic_read_seconds: Annotated[int, Field(**inputs.TRAFFIC_READ_SECONDS.pydantic())] = 90


class _Power(_Strict):
    idle_w: Watts | None = None
    max_w: Annotated[float, Field(gt=0, le=inputs.WATTS.hi)] | None = None
    curve_w: list[Watts] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> _Power:
        if self.curve_w is not None:
            if self.idle_w is not None or self.max_w is not None:
                raise ValueError("give either curve_w or idle_w + max_w, not both")
            if len(self.curve_w) != 11:
                raise ValueError("curve_w needs 11 values (watts at 0%, 10%, ..., 100% load)")
            if any(b < a for a, b in zip(self.curve_w, self.curve_w[1:])):
                raise ValueError("curve_w must not decrease with load")
        elif self.idle_w is None or self.max_w is None:
            raise ValueError("give idle_w and max_w, or curve_w with 11 values")
        elif self.max_w < self.idle_w:
            raise ValueError("max_w must be >= idle_w")
        return self

    def curve(self) -> PowerCurve:
        if self.curve_w is not None:
            return PowerCurve(tuple(self.curve_w))
        assert self.idle_w is not None and self.max_w is not None
        return PowerCurve.linear(self.idle_w, self.max_w)


class _Ssh(_Strict):
    user: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]*$")] = "root"
    port: Port = 22
    identity_file: str | None = None
    known_hosts: str | None = None


class _Bmc(_Strict):
    address: str
    port: Port = 623
    username: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9._@-]+$")] = "admin"
    password_file: str
    cipher_suite: Annotated[int, Field(ge=0, le=17)] = 17


class _Node(_Strict):
    name: Name
    address: str
    cpus: Annotated[int, Field(**inputs.NODE_CPUS.pydantic())]
    memory_mb: Annotated[int, Field(**inputs.NODE_MEMORY_MB.pydantic())]
    role: Literal["worker", "head"] = "worker"
    power_managed: bool | None = None
    power: _Power
    ssh: _Ssh | None = None
    bmc: _Bmc | None = None


class _Web(_Strict):
    token_file: str
    token_for_reads: bool = False
    hosts: list[Annotated[str, Field(min_length=1, max_length=253)]] = []


class _Review(_Strict):
    plan_ttl_seconds: PositiveSeconds = 3600.0


class _Budgets(_Strict):
    """`[budgets]`: see orchestrator/domain/budgets.py."""

    migrations_per_epoch: Count | None = None
    migrations_per_hour: Count | None = None
    migrations_per_node: Annotated[int, Field(ge=1, le=inputs.COUNT.hi)] = 1
    power_offs_per_hour: Count | None = None


class _Window(_Strict):
    """`[[windows]]`: see orchestrator/domain/budgets.py."""

    days: str
    start: str
    end: str
    what: Literal["no-migrations", "no-power-offs"]
    timezone: str = "UTC"

    @field_validator("days")
    @classmethod
    def _days(cls, v: str) -> str:
        budgets.parse_days(v)
        return v

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, v: str) -> str:
        budgets.parse_clock(v)
        return v

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        return budgets.check_timezone(v)

    @field_validator("end")
    @classmethod
    def _not_empty(cls, v: str, info: Any) -> str:
        if info.data.get("start") == v:
            raise ValueError(f"{v!r} equals start; give a different end (before start: past midnight)")
        return v

    def window(self) -> budgets.Window:
        return budgets.Window(budgets.parse_days(self.days), budgets.parse_clock(self.start),
                              budgets.parse_clock(self.end), budgets.WindowRule(self.what),
                              self.timezone)


class _Inventory(_Strict):
    cluster: _Cluster
    nodes: Annotated[list[_Node], Field(min_length=1)]
    power_policy: dict[str, Any] = {}  # older `[planner]` keys (`POWER_KEYS`): checked as the planner's
    planner: PlannerSettings = PlannerSettings()
    budgets: _Budgets = _Budgets()
    windows: list[_Window] = []
    web: _Web | None = None
    review: _Review = _Review()
    migration: MigrationSettings = MigrationSettings()
    remote: RemoteSettings = RemoteSettings()
    store: StoreConfig = StoreConfig()
    qos: dict[str, Any] = {}  # checked by `_Qos`, made from the guard's own declaration


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _describe(err: Any) -> str:
    """One pydantic error as `field: what to do`."""
    kind, ctx = err["type"], err.get("ctx") or {}
    loc = _loc(tuple(p for p in err["loc"] if not str(p).startswith("function-")))
    messages = {
        "extra_forbidden": "unknown key; remove it or check its spelling",
        "unexpected_keyword_argument": "unknown key; remove it or check its spelling",
        "missing": "required; add it",
        "greater_than": f"must be > {ctx.get('gt')}",
        "greater_than_equal": f"must be >= {ctx.get('ge')}",
        "less_than_equal": f"must be <= {ctx.get('le')}",
        "less_than": f"must be < {ctx.get('lt')}",
        "string_pattern_mismatch": "may contain only letters, digits, '.', '_' and '-' "
        "(starting with a letter or digit)",
        "too_short": "must not be empty",
        "literal_error": f"must be one of {ctx.get('expected')}",
        "finite_number": "must be a finite number (inf and nan are not)",
    }
    if kind in messages:
        return f"{loc}: {messages[kind]}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{loc}: {msg[0].lower() + msg[1:] if msg else kind}"


def _validation_line(prefix: str, exc: ValidationError) -> str:
    errors = exc.errors()
    first = _describe(errors[0])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{prefix}: {first}{more}"


def _check_address(field: str, value: str) -> None:
    try:
        inputs.host(value, field)
    except PeakpackError as exc:
        raise InventoryError(str(exc)) from None


def _existing_file(field: str, base: Path, value: str) -> Path:
    path = (base / value).resolve()
    if not path.is_file():
        raise InventoryError(f"{field}: file {path} does not exist (paths are relative to the inventory)")
    return path


def _read(path: Path, field: str) -> str:
    try:
        return inputs.read_text(path, field)
    except PeakpackError as exc:
        raise InventoryError(str(exc)) from None


def _secret_file(field: str, base: Path, value: str, what: str = "the BMC password") -> Path:
    path = _existing_file(field, base, value)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InventoryError(f"{field}: {path} is readable by group/others; run chmod 600 {path}")
    if not _read(path, field).strip():
        raise InventoryError(f"{field}: {path} is empty; write {what} into it")
    return path


def _pinned_keys(field: str, base: Path, value: str) -> Path:
    """A known_hosts file: the host keys every SSH login is checked against. Anyone who may write
    it could pin their own key, so it must be writable by its owner only."""
    path = _existing_file(field, base, value)
    if path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InventoryError(f"{field}: {path} is writable by group/others, so its pinned keys prove nothing; "
                             f"run chmod go-w {path}")
    return path


def _to_node(index: int, n: _Node, base: Path) -> NodeSpec:
    field = f"nodes[{index}]"
    _check_address(f"{field}.address", n.address)
    role = NodeRole(n.role)
    if role is NodeRole.HEAD and n.power_managed:
        raise InventoryError(f"{field}.power_managed: a head node can never be power-managed; set it to false")
    managed = n.power_managed if n.power_managed is not None else role is NodeRole.WORKER
    ssh = None
    if n.ssh is not None:
        ssh = SshConfig(
            user=n.ssh.user,
            port=n.ssh.port,
            identity_file=_existing_file(f"{field}.ssh.identity_file", base, n.ssh.identity_file)
            if n.ssh.identity_file
            else None,
            known_hosts=_pinned_keys(f"{field}.ssh.known_hosts", base, n.ssh.known_hosts)
            if n.ssh.known_hosts
            else None,
        )
    bmc = None
    if n.bmc is not None:
        _check_address(f"{field}.bmc.address", n.bmc.address)
        if n.bmc.cipher_suite in WEAK_CIPHER_SUITES:
            raise InventoryError(
                f"{field}.bmc.cipher_suite: suite {n.bmc.cipher_suite} has no integrity or "
                "confidentiality; use 17 (or 3)"
            )
        bmc = BmcConfig(
            address=n.bmc.address,
            port=n.bmc.port,
            username=n.bmc.username,
            password_file=_secret_file(f"{field}.bmc.password_file", base, n.bmc.password_file),
            cipher_suite=n.bmc.cipher_suite,
        )
    return NodeSpec(
        name=n.name,
        address=n.address,
        cpus=n.cpus,
        memory_mb=n.memory_mb,
        power=n.power.curve(),
        role=role,
        power_managed=managed,
        ssh=ssh,
        bmc=bmc,
    )


def _check_unique(nodes: list[_Node]) -> None:
    seen: dict[tuple[str, str], int] = {}
    for i, n in enumerate(nodes):
        keys = [("name", n.name), ("address", n.address)]
        if n.bmc is not None:
            keys.append(("bmc", f"{n.bmc.address}:{n.bmc.port}"))
        for key in keys:
            if key in seen:
                what = {"name": "name", "address": "address", "bmc": "bmc.address/port"}[key[0]]
                raise InventoryError(
                    f"nodes[{i}].{what.split('/')[0]}: {key[1]!r} is already used by "
                    f"nodes[{seen[key]}]; {what} must be unique"
                )
            seen[key] = i


def parse_inventory(text: str, *, base: Path, source: Path | None = None) -> Inventory:
    label = str(source) if source else "inventory"
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{label}: malformed TOML: {exc}") from None
    try:
        inv = _Inventory.model_validate(raw)
    except ValidationError as exc:
        raise InventoryError(_validation_line(label, exc)) from None
    try:
        _check_unique(inv.nodes)
        nodes = tuple(_to_node(i, n, base) for i, n in enumerate(inv.nodes))
    except InventoryError as exc:
        raise InventoryError(f"{label}: {exc}") from None
    try:
        planner, sources = _planner_settings(raw, inv)
        qos = _qos_settings(inv.qos)
    except InventoryError as exc:
        raise InventoryError(f"{label}: {exc}") from None
    cluster = ClusterConfig(inv.cluster.name, planner.cap, planner.memory_cap, inv.cluster.epoch_seconds,
                            inv.cluster.traffic_read_seconds)
    web = WebConfig()
    if inv.web is not None:
        try:
            for i, name in enumerate(inv.web.hosts):
                _check_address(f"web.hosts[{i}]", name)
            web = WebConfig(_secret_file("web.token_file", base, inv.web.token_file, "the web page's token"),
                            inv.web.token_for_reads, tuple(inv.web.hosts))
        except InventoryError as exc:
            raise InventoryError(f"{label}: {exc}") from None
    window_days = planner.forecast.window_seconds / 86400
    if inv.store.raw_days < window_days:
        raise InventoryError(f"{label}: store.raw_days: {inv.store.raw_days} keeps less than the forecast's "
                             f"window ([planner.forecast] window_seconds = {planner.forecast.window_seconds:g}); "
                             f"keep at least {math.ceil(window_days)}")
    b = inv.budgets
    tls_dir = inv.migration.tls_dir  # relative to the inventory's folder
    migration = replace(inv.migration, tls_dir=(base / tls_dir).resolve() if tls_dir is not None else None)
    return Inventory(cluster=cluster, nodes=nodes, source=source, planner=planner,
                     planner_sources=sources, web=web,
                     review=ReviewConfig(inv.review.plan_ttl_seconds),
                     store=inv.store,
                     budgets=budgets.Budgets(b.migrations_per_epoch, b.migrations_per_hour,
                                             b.migrations_per_node, b.power_offs_per_hour),
                     windows=tuple(w.window() for w in inv.windows), migration=migration,
                     remote=inv.remote, qos=qos)


#: the `[planner]` keys an older inventory may give in `[power_policy]`
POWER_KEYS = ("grace_seconds", "spare_nodes", "boot_seconds", "boot_power_w", "wake_timeout_seconds")
#: where a `[planner]` key may also be given, for inventories written before `[planner]`
_ALSO_AT = {"cap": "cluster", "memory_cap": "cluster", **{k: "power_policy" for k in POWER_KEYS}}
_PLANNER = TypeAdapter(PlannerSettings)


def _checked(adapter: TypeAdapter[Any], table: dict[str, Any], where: str) -> Any:
    """`table` validated by `adapter` (a settings dataclass's own bounds), its errors' field paths
    under `where`."""
    try:
        return adapter.validate_python(table)
    except ValidationError as exc:
        errors = exc.errors()
        first = _describe({**errors[0], "loc": (*where.split("."), *errors[0]["loc"])})
        raise InventoryError(first + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")) from None


def _planner_settings(raw: dict[str, Any], inv: _Inventory) -> tuple[PlannerSettings, tuple[tuple[str, str], ...]]:
    """The effective PlannerSettings and, per key, where its value came from ("default" or
    "inventory [section].key"). A key given in `[planner]` and in its older place must agree."""
    planner_table = raw.get("planner") or {}
    older = {"cluster": {k: v for k, v in (raw.get("cluster") or {}).items() if k in ("cap", "memory_cap")},
             "power_policy": dict(inv.power_policy)}
    checked: dict[str, PlannerSettings] = {}
    for section, table in older.items():
        unknown = sorted(set(table) - {k for k, at in _ALSO_AT.items() if at == section})
        if unknown:
            raise InventoryError(f"{section}.{unknown[0]}: unknown key; remove it or check its spelling")
        checked[section] = _checked(_PLANNER, table, section)
    given: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for f in fields(PlannerSettings):
        key = f.name
        if key in NESTED:
            continue
        value = getattr(inv.planner, key) if key in planner_table else None
        old = _ALSO_AT.get(key)
        old_value = getattr(checked[old], key) if old and key in older[old] else None
        if value is not None and old_value is not None and value != old_value:
            raise InventoryError(f"[planner].{key} = {value} and [{old}].{key} = {old_value} differ; "
                                 f"keep only [planner].{key}")
        if value is not None:
            given[key], sources[key] = value, f"inventory [planner].{key}"
        elif old_value is not None:
            given[key], sources[key] = old_value, f"inventory [{old}].{key}"
    for section in NESTED:
        sources.update({f"{section}.{k}": f"inventory [planner.{section}].{k}"
                        for k in (planner_table.get(section) or {})})
    qos_table = planner_table.get("qos") or {}
    if "cap" in planner_table and "min_cap" in qos_table and inv.planner.qos.min_cap > inv.planner.cap:
        raise InventoryError(f"planner: qos.min_cap {inv.planner.qos.min_cap} is above cap {inv.planner.cap}; "
                             "a lowered cap must be lower")
    settings = replace(inv.planner, **given)
    return settings, tuple((k, sources.get(k, "default")) for k in settings.by_key())


def _a_number(value: Any, info: Any) -> Any:
    """A watermark written as text ("80%") is refused with the form to use."""
    if isinstance(value, str) and info.field_name != "install":
        raise ValueError(f"{value!r} is text; write a number, e.g. {info.field_name} = 0.8 for 80%")
    return value


def _guard_key(key: str) -> tuple[Any, None]:
    """One of the guard's keys as `[qos]` takes it: optional (unset: the guard's default), within
    the range its declaration gives."""
    spec = INVENTORY_KEYS[key]
    kind: type = int if spec.metadata["integer"] else float
    lo, hi = spec.metadata["range"]
    return Annotated[kind, Field(ge=lo, le=hi)] | None, None


_QOS_FIELDS: dict[str, Any] = {
    "install": (bool, QosSettings.install),
    "restarts_per_hour": (Annotated[int, Field(**inputs.COUNT.pydantic())], QosSettings.restarts_per_hour),
    **{key: _guard_key(key) for key in INVENTORY_KEYS},
}
#: `[qos]`: the guards' keys the inventory sets, each bounded by its one declaration
#: (`qos.GuardSettings`), whether `serve` installs the guards, and the restarts per hour
_Qos: type[BaseModel] = create_model(
    "_Qos", __base__=_Strict, __validators__={"a_number": field_validator("*", mode="before")(_a_number)},
    **_QOS_FIELDS)


def _qos_settings(table: dict[str, Any]) -> QosSettings:
    checked = _checked(TypeAdapter(_Qos), table, "qos")
    guard = {k: getattr(checked, k) for k in INVENTORY_KEYS if getattr(checked, k) is not None}
    return QosSettings(GuardSettings(**guard), checked.install, checked.restarts_per_hour)


def load_inventory(path: str | os.PathLike[str]) -> Inventory:
    """Read and validate an inventory file; paths inside it are relative to the file."""
    p = Path(path)
    return parse_inventory(_read(p, "--inventory"), base=p.resolve().parent, source=p)


class _SnapNode(_Strict):
    name: str
    powered: bool = True


class _SnapContainer(_Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]+$", max_length=128)]
    node: str
    cpu: Annotated[float, Field(**inputs.CORES.pydantic())]
    memory_mb: Annotated[float, Field(**inputs.MEMORY_MB.pydantic())]
    image: str = ""
    class_: Literal["devil", "turtle"] = Field("turtle", alias="class")
    group: str | None = None
    immovable: str | None = None
    ports: list[Annotated[str, Field(pattern=r"^\d{1,5}/(tcp|udp|sctp)$")]] = Field(default_factory=list)
    declared: bool = False
    qos: Literal["ls", "be"] = "ls"
    clients: Literal["kept", "reconnect", "reconnect-elsewhere", "none"] = "reconnect-elsewhere"

    @field_validator("ports")
    @classmethod
    def _port_numbers(cls, v: list[str]) -> list[str]:
        """A published port is a port (`inputs.PORT`), like every other number an operator gives."""
        for port in v:
            number, _, proto = port.partition("/")
            try:
                inputs.PORT.check(int(number), "port")
            except PeakpackError:
                raise ValueError(f"{port!r} is not a port; give {inputs.PORT.describe()} and its protocol, "
                                 f"e.g. 8080/{proto}") from None
        return v


class _Snapshot(_Strict):
    version: Annotated[int, Field(ge=0, le=inputs.ID.hi)] = 0
    taken_at: str | None = None
    nodes: list[_SnapNode] = Field(default_factory=list)
    containers: list[_SnapContainer] = Field(default_factory=list)
    held: dict[str, str] = Field(default_factory=dict)


def parse_snapshot(data: Any, inventory: Inventory, *, label: str = "snapshot") -> ClusterSnapshot:
    """Validate observed state against the inventory. Nodes not listed are taken as powered on."""
    try:
        snap = _Snapshot.model_validate(data)
    except ValidationError as exc:
        raise SnapshotError(_validation_line(label, exc)) from None
    known = set(inventory.node_names)
    powered = {n.name: True for n in inventory.nodes}
    for i, n in enumerate(snap.nodes):
        if n.name not in known:
            raise SnapshotError(f"{label}: nodes[{i}].name: {n.name!r} is not in the inventory")
        powered[n.name] = n.powered
    for spec in inventory.nodes:
        if spec.role is NodeRole.HEAD and not powered[spec.name]:
            raise SnapshotError(f"{label}: node {spec.name} is the head node and cannot be off")
    names: set[str] = set()
    containers = []
    for i, c in enumerate(snap.containers):
        if c.name in names:
            raise SnapshotError(f"{label}: containers[{i}].name: {c.name!r} appears twice")
        names.add(c.name)
        if c.node not in known:
            raise SnapshotError(f"{label}: containers[{i}].node: {c.node!r} is not in the inventory")
        if not powered[c.node]:
            raise SnapshotError(
                f"{label}: containers[{i}].node: {c.node!r} is powered off but hosts {c.name!r}"
            )
        containers.append(
            Container(c.name, c.node, c.cpu, c.memory_mb, c.image, ContainerClass(c.class_), c.group,
                      c.immovable, tuple(c.ports), c.declared, qos=QosClass(c.qos), clients=Clients(c.clients))
        )
    kwargs: dict[str, Any] = {}
    if snap.taken_at:
        try:
            kwargs["taken_at"] = inputs.aware_time(snap.taken_at, "taken_at")
        except PeakpackError as exc:
            raise SnapshotError(f"{label}: {exc}") from None
    for node in snap.held:
        if node not in known:
            raise SnapshotError(f"{label}: held.{node}: not a node of the inventory")
    return ClusterSnapshot(
        nodes=tuple(NodeState(n.name, powered[n.name]) for n in inventory.nodes),
        containers=tuple(containers),
        version=snap.version,
        held=dict(snap.held),
        **kwargs,
    )


def load_snapshot(path: str | os.PathLike[str], inventory: Inventory) -> ClusterSnapshot:
    p = Path(path)
    try:
        data = json.loads(inputs.read_text(p, "--snapshot"))
    except PeakpackError as exc:
        raise SnapshotError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{p}: malformed JSON at line {exc.lineno}: {exc.msg}") from None
    return parse_snapshot(data, inventory, label=str(p))


def demo_inventory() -> Inventory:
    """The embedded example cluster, so `peakpack plan` works on a fresh install."""
    files = resources.files("peakpack.inventory")
    text = (files / "demo.toml").read_text()
    return parse_inventory(text, base=Path("."), source=Path("<embedded demo.toml>"))


def demo_snapshot(inventory: Inventory) -> ClusterSnapshot:
    files = resources.files("peakpack.inventory")
    data = json.loads((files / "demo-snapshot.json").read_text())
    return parse_snapshot(data, inventory, label="<embedded demo-snapshot.json>")
