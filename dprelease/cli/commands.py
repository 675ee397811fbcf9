"""The ``dprelease`` typer app, built from the command modules (exit codes: see :mod:`dprelease.cli`).

``init``, ``validate``, ``plan``, ``check``, ``ledger``, ``server`` and an inline ``run`` never import Prefect (it costs
over a second).
"""

from __future__ import annotations

import typer

from dprelease.cli import check_cmds, init_cmds, ledger_cmds, release_cmds, server_cmds, signatures, simulate_cmds

app = typer.Typer(name="dprelease", add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Declarative, census-style releases of differentially private tables.")
ledger_app = typer.Typer(invoke_without_command=True, no_args_is_help=False,
                         help="Show lifetime budgets and releases per dataset, create a ledger, or change a cap.")
app.add_typer(ledger_app, name="ledger")
server_app = typer.Typer(no_args_is_help=True, help="Keep one local Prefect server for the day, so runs are "
                         "flow runs without a server's start-up each time.")
app.add_typer(server_app, name="server")

for command in (init_cmds.init, signatures.validate, signatures.plan, check_cmds.check, release_cmds.run,
                release_cmds.postprocess, release_cmds.schedule, release_cmds.trigger, signatures.report,
                simulate_cmds.randomize, simulate_cmds.evaluate):
    app.command()(command)
ledger_app.callback()(signatures.ledger_show)
ledger_app.command("init")(ledger_cmds.ledger_init)
ledger_app.command("set-budget")(ledger_cmds.ledger_set_budget)
ledger_app.command("register-answers")(ledger_cmds.ledger_register_answers)
ledger_app.command("require-approval")(ledger_cmds.ledger_require_approval)
ledger_app.command("resolve")(ledger_cmds.ledger_resolve)
server_app.command("start")(server_cmds.server_start)
server_app.command("stop")(server_cmds.server_stop)
server_app.command("status")(server_cmds.server_status)


def _print_version(value: bool) -> None:
    if value:
        from dprelease import __version__

        typer.echo(f"dprelease {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                          help="Print the version (dprelease X.Y.Z) and exit.")) -> None:
    """Declarative, census-style releases of differentially private tables."""
