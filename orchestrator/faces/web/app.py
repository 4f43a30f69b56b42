"""The live web page: one Starlette application over a store (and, to approve plans, the
inventory).

Routes: `GET /` the page (tables rendered here, usable without JavaScript), `GET /tables` the
same tables alone (the page's script swaps them in every few seconds), `GET /api/state` the
page's data as JSON (charts), `POST /plans/{id}/approve` and `/plans/{id}/reject` (forms that
carry the inventory's `[web].token_file` token; without a configured token the page is read-only
and every POST is refused with 403), and `/static` (the page's script and the vendored chart
library: nodes may have no internet).

Approving runs `orchestrator.apply.apply_plan` in a worker thread: it re-observes the cluster and
executes exactly that plan, or refuses it with the reason, which the answer shows.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from peakpack.db.store import Store

from ...act.apply import reject_plan
from ...domain.errors import PeakpackError
from ...domain.model import Inventory
from .state import View, page_state

HERE = Path(__file__).parent


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


#: runs an approved plan: (plan id, partial, decided_by) -> orchestrator.apply.ApplyResult
Applier = Callable[[int, bool, str], Any]


def create_app(store: Store, inventory: Inventory | None = None, view: View | None = None, *,
               applier: Applier | None = None) -> Starlette:
    """The page over `store`; `inventory` gives node caps and the token; `applier` runs approved
    plans (`serve`: its controller's `apply_stored`; `peakpack web`: apply in that process; None:
    approving is refused)."""
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

    async def decide(request: Request) -> Response:
        if request.path_params["decision"] not in ("approve", "reject"):
            return render("result.html", 404, title="not found", message="a plan is approved or rejected")
        if token is None:
            return render(
                "result.html",
                403,
                title="read-only",
                message="this page is read-only: give the inventory a [web] token_file to approve or reject plans",
            )
        form = await request.form()
        if not hmac.compare_digest(str(form.get("token", "")).encode(), token.encode()):
            return render("result.html", 403, title="wrong token",
                          message="token: it does not match the inventory's [web] token_file; paste the file's content")
        plan_id = int(request.path_params["plan_id"])
        who = str(form.get("by") or "").strip() or (request.client.host if request.client else "unknown")
        decided_by = f"web:{who}"
        try:
            if request.path_params["decision"] == "reject":
                await run_in_threadpool(reject_plan, store, plan_id, decided_by)
                return render("result.html", title=f"plan {plan_id} rejected", message=f"rejected by {decided_by}")
            if applier is None:
                return render("result.html", 409, title="cannot apply here",
                              message="approving executes the plan and needs the cluster: run `peakpack web` "
                                      "with --inventory FILE (or approve in `peakpack serve --http-port`)")
            result = await run_in_threadpool(applier, plan_id, form.get("partial") == "on", decided_by)
        except PeakpackError as exc:
            return render("result.html", 409, title=f"plan {plan_id} not applied", message=str(exc))
        done = result.to_json()
        return render("result.html", title=f"plan {plan_id}: {done['status']}", message=f"approved by {decided_by}",
                      items=[f"{a['action']}: {a['state'] or 'not run'}" + (f" ({a['reason']})" if a["reason"] else "")
                             for a in done["actions"]] + [f"error: {e}" for e in done["errors"]])

    return Starlette(routes=[
        Route("/", index),
        Route("/tables", tables),
        Route("/api/state", api_state),
        Route("/plans/{plan_id:int}/{decision:str}", decide, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ])
