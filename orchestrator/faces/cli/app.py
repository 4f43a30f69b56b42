"""The `peakpack` command line. Every failure an operator can cause ends in one line on stderr
and exit status 2; `--json` output goes to stdout and nothing else does.

Every command group lives in its own module and is registered here statically: a module that
fails to import fails the whole CLI loudly instead of silently dropping its command.
"""

from __future__ import annotations

import typer

from ...domain.errors import PeakpackError
from . import apply, config, history, lab, migrate, plan, power, qos, reconcile, report, serve, service, simulate, web
from .common import err

app = typer.Typer(
    help="Keep a cluster of Docker hosts packed at peak energy efficiency.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(plan.app, name="plan")
app.command()(history.history)
app.command()(serve.serve)
app.command()(migrate.migrate)
app.command()(migrate.pin)
app.command()(reconcile.reconcile)
app.command()(simulate.simulate)
app.command()(report.report)
app.command()(web.web)
app.command()(apply.apply)
app.command()(apply.reject)
app.add_typer(lab.app, name="lab")
app.add_typer(power.app, name="power")
app.add_typer(qos.app, name="qos")
app.add_typer(service.app, name="service")
app.add_typer(config.app, name="config")


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except PeakpackError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(2) from None
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        raise SystemExit(130) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.TyperException as exc:  # usage errors (typer's own click) with standalone_mode off
        show = getattr(exc, "show", None)
        if show is None:
            raise
        show()
        raise SystemExit(2) from None
    if isinstance(code, int) and code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
