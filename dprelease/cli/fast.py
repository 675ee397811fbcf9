"""The fast path of the commands a statistician types all day: ``validate``, ``plan``,
``ledger`` (no subcommand) and ``report``, parsed here with the standard library and run
without typer, whose import (and the pydantic it builds each parameter's converter with) costs
more than the command's own work.

The model: a command line the fast path takes is one typer would parse to the same values, so
the body (the same function typer calls, :mod:`dprelease.cli.signatures`) runs with the same
arguments. It takes only the plain forms: the command name first; its positional arguments;
its common options, each at most once, as ``--name VALUE``, ``--name=VALUE`` or a ``--flag``
(``FAST`` below); no ``--``, no value that is empty or starts with ``-``, no ``--help``.
Anything else — help, a misspelled or repeated option, a missing argument, a subcommand, the
options whose values a body checks as usage (``plan --confidence``, ``--weights``, ...; a
``report --format`` other than html, md or json) — goes to typer, which prints its usage and
errors as always. So help texts, usage errors and exit codes are typer's own; the bodies map
every other outcome to the documented exit codes (:func:`dprelease.cli.common.handled`).
KeyboardInterrupt exits 130 and EOFError prints "Aborted!" and exits 1, as typer's main does.

Cost: parsing is microseconds; the command then imports only what its body needs.
``tests/test_fast_cli.py`` checks that the table matches typer's declarations, that the fast
path and typer print the same for the same command lines, and which libraries the fast
commands never import.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Option:
    param: str  # the body's parameter
    kind: Callable[[str], Any] | None  # the value's conversion; None: a flag (True when given)
    choices: tuple[str, ...] = ()  # where a body refuses other values as usage: those go to typer


@dataclass(frozen=True)
class Fast:
    module: str  # where the body is
    body: str
    positional: str | None  # the positional parameter (a Path), if any
    many: bool = False  # one or more positional values (a list); else exactly one
    options: dict[str, Option] = field(default_factory=dict)


LEDGER = Option("ledger", str)
FAST = {
    "validate": Fast("dprelease.cli.plan_cmds", "validate", "specs", many=True),
    "plan": Fast("dprelease.cli.plan_cmds", "plan", "spec_path",
                 options={"--ledger": LEDGER, "--json": Option("as_json", None)}),
    "ledger": Fast("dprelease.cli.ledger_view", "ledger_show", None,
                   options={"--ledger": LEDGER, "--dataset": Option("dataset", str), "--json": Option("as_json", None),
                            "--spec": Option("spec_path", Path)}),
    "report": Fast("dprelease.cli.report_view", "report", "release_dir",
                   options={"--format": Option("fmt", str, ("html", "md", "json")), "--output": Option("output", Path),
                            "--ledger": LEDGER}),
}


def parse(argv: list[str]) -> tuple[Fast, dict[str, Any]] | None:
    """The command and the body's keyword arguments; None where typer must parse ``argv``."""
    if not argv or argv[0] not in FAST:
        return None
    command, args = FAST[argv[0]], argv[1:]
    kwargs: dict[str, Any] = {}
    values: list[Path] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "" or token == "-" or (token.startswith("-") and not token.startswith("--")) or token == "--":
            return None
        if not token.startswith("--"):
            values.append(Path(token))
            i += 1
            continue
        name, eq, value = token.partition("=")
        option = command.options.get(name)
        if option is None or option.param in kwargs:
            return None
        if option.kind is None:
            if eq:
                return None
            kwargs[option.param] = True
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
            i += 1
        if value == "" or value.startswith("-") or (option.choices and value not in option.choices):
            return None
        kwargs[option.param] = option.kind(value)
        i += 1
    if command.positional is None:
        if values:
            return None  # a subcommand (or a stray argument): typer's
    elif command.many:
        if not values:
            return None
        kwargs[command.positional] = values
    else:
        if len(values) != 1:
            return None
        kwargs[command.positional] = values[0]
    return command, kwargs


def run(argv: list[str]) -> int | None:
    """Run ``argv`` on the fast path: its exit code (a body's refusal exits by SystemExit, as
    under typer); None where typer must run it."""
    parsed = parse(argv)
    if parsed is None:
        return None
    command, kwargs = parsed
    import importlib

    body = getattr(importlib.import_module(command.module), command.body)
    try:
        body(**kwargs)
    except KeyboardInterrupt:
        return 130
    except EOFError:
        print(file=sys.stderr)
        print("Aborted!", file=sys.stderr)
        return 1
    return 0
