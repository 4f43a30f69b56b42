"""The `peakpack` command line. Every failure an operator can cause ends in one line on stderr
and exit status 2; `--json` output goes to stdout and nothing else does.

Every command group lives in its own module and is registered here statically: a module that
fails to import fails the whole CLI loudly instead of silently dropping its command.
"""

from __future__ import annotations

import typer

from ...domain.errors import PeakpackError
from ...domain.inputs import one_line
from . import (
    apply,
    compose,
    config,
    history,
    lab,
    migrate,
    plan,
    power,
    qos,
    reconcile,
    report,
    serve,
    service,
    simulate,
    tls,
    web,
)
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
app.add_typer(compose.app, name="compose")
app.add_typer(tls.app, name="tls")


def fail(message: str) -> None:
    """The one way a command fails for the operator: one line on stderr, exit status 2."""
    err.print(f"error: {one_line(message)}", markup=False, highlight=False, soft_wrap=True)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    """Run the command line (`argv`: the arguments, default sys.argv's); whatever an operator can
    get wrong ends here as one line and exit status 2, never a traceback."""
    try:
        code = app(args=argv, prog_name="peakpack", standalone_mode=False)
    except PeakpackError as exc:
        fail(str(exc))
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        raise SystemExit(130) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.TyperException as exc:  # typer's own checks: an unknown option, a missing argument, a bad choice
        if type(exc).__name__ == "NoArgsIsHelpError":  # `peakpack` alone, or a group alone: its help
            exc.show()  # type: ignore[attr-defined]
            raise SystemExit(2) from None
        ctx = getattr(exc, "ctx", None)
        what = exc.format_message().rstrip(".")
        fail(what + (f"; `{ctx.command_path} --help` lists what it takes" if ctx is not None else ""))
    except OSError as exc:  # a file or folder the operator named cannot be written or read
        fail(f"{exc.filename or 'a file'}: {exc.strerror or exc}")
    if isinstance(code, int) and code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
