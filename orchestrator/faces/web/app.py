"""The live web page: one Starlette application over a store (and, to approve plans, the
inventory).

Routes: `GET /` the page (tables rendered here, usable without JavaScript), `GET /tables` the
same tables alone (the page's script swaps them in every few seconds), `GET /api/state` the
page's data as JSON (charts), `POST /plans/{id}/approve` and `/plans/{id}/reject` (forms that
carry the inventory's `[web].token_file` token; without a configured token the page is read-only
and every POST is refused with 403), and `/static` (the page's script and the vendored chart
library: nodes may have no internet).

Every request passes `Guard` first: its Host header must name the page (its listening address,
`localhost` when that is a loopback address, any IP address when it listens on all of them, or a
name of `[web] hosts`), so a page on another site cannot read it through DNS rebinding; a body is
at most MAX_BODY bytes of a url-encoded form, refused by its declared length before it is read;
with `[web] token_for_reads` every request needs the token (HTTP basic auth, any user name).
A decision's token is checked before anything else of its form is looked at, and it must be in
the form: the Basic credentials a browser resends by itself would let another site's page post a
decision (cross-site request forgery).

Approving never executes here: the approval goes to whoever may act (`Applier`): the controller
that leads, through the store (`act.apply.hand_to_leader`), or, under `peakpack web` while no
controller leads, `act.apply.apply_plan` under the store's lease. Node-produced text (names,
reasons, details) is escaped by the templates' autoescape.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from peakpack.db.store import Store

from ...act.apply import ApplyResult, Handed, reject_plan
from ...domain.errors import PeakpackError
from ...domain.model import Inventory
from ...domain.records import ApprovalState
from .state import View, page_state

HERE = Path(__file__).parent
#: an approve or reject form is a token, a name and a checkbox: a few hundred bytes
MAX_BODY = 4096
FORM = "application/x-www-form-urlencoded"


def web_token(inventory: Inventory | None) -> str | None:
    """The approval token of `[web].token_file` (checked when the inventory loaded), or None."""
    if inventory is None or inventory.web.token_file is None:
        return None
    return inventory.web.token_file.read_text().strip()


def _when(value: str | None) -> str:
    """ISO time -> 'YYYY-MM-DD HH:MM:SS' (UTC, as stored)."""
    return "" if not value else value[:19].replace("T", " ")


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
    env.filters["when"] = _when
    return env


#: runs or hands on an approved plan: (plan id, partial, decided_by) -> what came of it
Applier = Callable[[int, bool, str], "ApplyResult | Handed"]


def same_token(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


def allowed_host(host: str, bind: str, names: tuple[str, ...]) -> bool:
    """Whether a request's Host header (with or without its port) names this page."""
    name = host.strip().lower()
    if name.startswith("["):  # [::1]:8080
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if not name:
        return False
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        address = None
    try:
        listening = ipaddress.ip_address(bind)
    except ValueError:
        listening = None
    if name == bind.lower() or name in {n.lower() for n in names}:
        return True
    if listening is not None and listening.is_loopback:
        return name == "localhost" or (address is not None and address.is_loopback)
    # on every interface: any address of this machine; a name (the rebinding attack's) only if configured
    return listening is not None and listening.is_unspecified and address is not None


def basic_password(header: str) -> str | None:
    """The password of an `Authorization: Basic ...` header (the token; the user name is free)."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        return base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[2]
    except (binascii.Error, UnicodeDecodeError):
        return None


class Guard:
    """What every request passes before the page sees it: the Host allow-list, the body limit,
    and (`token_for_reads`) the token for everything."""

    def __init__(self, app: ASGIApp, *, bind: str, hosts: tuple[str, ...], read_token: str | None) -> None:
        self.app, self.bind, self.hosts, self.read_token = app, bind, hosts, read_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not allowed_host(headers.get("host", ""), self.bind, self.hosts):
            await PlainTextResponse("this page is not served under that name: use its address, or add the name to "
                                    "the inventory's [web] hosts", 421)(scope, receive, send)
            return
        if self.read_token is not None:
            given = basic_password(headers.get("authorization", ""))
            if given is None or not same_token(given, self.read_token):
                await PlainTextResponse("the token is needed (any user name; the token as the password)", 401,
                                        headers={"WWW-Authenticate": 'Basic realm="peakpack"'})(scope, receive, send)
                return
        if scope["method"] not in ("GET", "HEAD"):
            length = headers.get("content-length", "")
            if not length.isdigit() or int(length) > MAX_BODY:
                await PlainTextResponse(f"a form of at most {MAX_BODY} bytes, with its length", 413)(
                    scope, receive, send)
                return
            receive = self._bounded(receive, int(length))
        await self.app(scope, receive, send)

    @staticmethod
    def _bounded(receive: Receive, limit: int) -> Receive:
        """No more than the declared length is ever read, whatever the client sends."""
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PeakpackError(f"the body is longer than its declared {limit} bytes")
            return message

        return bounded


def create_app(store: Store, inventory: Inventory | None = None, view: View | None = None, *,
               applier: Applier | None = None, bind: str = "127.0.0.1") -> ASGIApp:
    """The page over `store`, listening on `bind`; `inventory` gives node caps, the token and the
    `[web]` settings; `applier` takes approved plans (`serve`: hands them to the leader;
    `peakpack web`: applies them under the lease, or hands them to a leader; None: approving is
    refused)."""
    view = view or View()
    token = web_token(inventory)
    env = _environment()

    def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(name).render(**context), status_code=status)

    def context() -> dict[str, Any]:
        return {"state": page_state(store, inventory, view), "can_decide": token is not None,
                "can_apply": token is not None and applier is not None}

    async def index(_: Request) -> Response:
        return render("index.html", **await run_in_threadpool(context))

    async def tables(_: Request) -> Response:
        return render("tables.html", **await run_in_threadpool(context))

    async def api_state(_: Request) -> Response:
        return JSONResponse(await run_in_threadpool(page_state, store, inventory, view))

    async def form_of(request: Request) -> dict[str, str] | Response:
        """The decision's form, once its token matched: the first thing looked at in the (bounded,
        url-encoded) body. Never the Authorization header: a browser resends the Basic
        credentials of `token_for_reads` with any request to this page, even one another site's
        page makes it send, so they prove a browser logged in, not that this person decided."""
        if token is None:
            return render("result.html", 403, title="read-only",
                          message="this page is read-only: give the inventory a [web] token_file to approve or "
                                  "reject plans")
        if request.headers.get("content-type", "").partition(";")[0].strip().lower() != FORM:
            return render("result.html", 415, title="not a form", message=f"send the form as {FORM}")
        try:
            fields = parse_qs((await request.body()).decode("utf-8"), max_num_fields=8)
        except (UnicodeDecodeError, ValueError, PeakpackError):
            return render("result.html", 400, title="not a form", message="the form could not be read")
        form = {k: v[0] for k, v in fields.items()}
        if not same_token(form.get("token", ""), token):
            return render("result.html", 403, title="wrong token",
                          message="token: it does not match the inventory's [web] token_file; paste the file's content")
        return form

    async def decide(request: Request) -> Response:
        decision, plan_id = request.path_params["decision"], int(request.path_params["plan_id"])
        if decision not in ("approve", "reject"):
            return render("result.html", 404, title="not found", message="a plan is approved or rejected")
        form = await form_of(request)
        if isinstance(form, Response):
            return form
        who = form.get("by", "").strip()[:100] or (request.client.host if request.client else "unknown")
        decided_by = f"web:{who}"
        try:
            if decision == "reject":
                await run_in_threadpool(reject_plan, store, plan_id, decided_by)
                return render("result.html", title=f"plan {plan_id} rejected", message=f"rejected by {decided_by}")
            if applier is None:
                return render("result.html", 409, title="cannot apply here",
                              message="approving executes the plan and needs the cluster: run `peakpack web` "
                                      "with --inventory FILE (or approve in `peakpack serve --http-port`)")
            result = await run_in_threadpool(applier, plan_id, form.get("partial") == "on", decided_by)
        except PeakpackError as exc:
            return render("result.html", 409, title=f"plan {plan_id} not applied", message=str(exc))
        return outcome(plan_id, decided_by, result)

    def outcome(plan_id: int, decided_by: str, result: ApplyResult | Handed) -> Response:
        if isinstance(result, ApplyResult):
            done = result.to_json()
            return render("result.html", title=f"plan {plan_id}: {done['status']}", message=f"approved by {decided_by}",
                          items=[f"{a['action']}: {a['state'] or 'not run'}" + (f" ({a['reason']})" if a["reason"]
                                                                               else "")
                                 for a in done["actions"]] + [f"error: {e}" for e in done["errors"]])
        approval = result.approval
        if approval.state is ApprovalState.REFUSED:
            return render("result.html", 409, title=f"plan {plan_id} not applied", message=approval.outcome or "")
        if approval.state is ApprovalState.PENDING:
            return render("result.html", 202, title=f"plan {plan_id}: approved",
                          message=f"approved by {decided_by} and handed to the controller that leads "
                                  f"({result.leader or 'none leads right now'}), which runs it between epochs; "
                                  "the page shows its status")
        return render("result.html", title=f"plan {plan_id}: {result.plan.status.value}",
                      message=f"approved by {decided_by}; run by {approval.applied_by}",
                      items=[f"{a.kind} {a.container + ' ' if a.container else ''}"
                             f"{f'{a.source} -> {a.target}' if a.container else a.node}: {a.state.value}"
                             + (f" ({a.detail})" if a.detail else "") for a in result.actions])

    page = Starlette(routes=[
        Route("/", index),
        Route("/tables", tables),
        Route("/api/state", api_state),
        Route("/plans/{plan_id:int}/{decision:str}", decide, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ])
    web = inventory.web if inventory is not None else None
    return Guard(page, bind=bind, hosts=web.hosts if web else (),
                 read_token=token if web is not None and web.token_for_reads else None)
