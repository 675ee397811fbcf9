"""What a served deployment's runs may do, bound where ``dprelease schedule`` serves it.

Model. A Prefect deployment's parameters live on the Prefect server, and whoever reaches its API
can start a run with others (``prefect deployment run NAME --param require_approval=false``, the
UI's "custom run"). So what decides privacy in a scheduled run — the spec (its path, and the
SHA-256 of the spec file's bytes), the ledger, the output directory, whether the plan must be
approved — is bound when ``dprelease schedule`` starts serving, in the serving process: it is
kept in that process's environment (``DPRELEASE_SCHEDULE_BINDING``, JSON), which Prefect hands to
every flow-run process it starts there, and the flow run compares its parameters (and the spec
file) with it before anything else (:func:`dprelease.orchestrate.scheduled_release`).

Assumes: a served deployment's flow runs get the serving process's environment and nothing a
run's creator chose (Prefect 3.9.1's Runner ignores a flow run's job variables for served
flows: ``prefect/runner/_starter_direct.py``; tests/test_schedule.py forges the binding through
them and is refused); the bound values are the ones the deployment was registered with. A
process worker gives no such guarantee (a flow run's job variables set a worker's command and
environment), so the scheduled flow runs only under ``dprelease schedule``.

Guarantees: a run whose parameters differ from the bound ones in any way (JSON-equal, so
``0`` is not ``false``), whose spec file changed since serving started, or that no
``dprelease schedule`` process bound, is refused — one line that says what differed — before
its spec is loaded or any ledger opened or created, so nothing is reserved or spent.

A parameter the flow does not have never reaches it: Prefect refuses the run first
(``SignatureMismatchError``). It does not protect against: an edit of the spec between this check and the run's own read
of it a moment later; anyone who can run code as the serving user (they can read its
environment and the server's secret: see :mod:`dprelease.server_auth`).

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from dprelease.errors import UserError

VARIABLE = "DPRELEASE_SCHEDULE_BINDING"
PARAMETERS = ("spec_path", "ledger", "output_dir", "require_approval")  # the flow's, all of them bound
NOTHING_SPENT = "Nothing was opened, reserved or spent."


class NotBound(UserError):
    """A scheduled run that carries anything but what its ``dprelease schedule`` bound."""


@dataclass(frozen=True)
class ScheduleBinding:
    deployment: str  # flow/deployment, e.g. dprelease-scheduled/monthly
    spec_path: str  # absolute
    spec_sha256: str  # of the spec file's bytes when serving started
    ledger: str | None  # as `schedule --ledger` gave it (None: the spec's pin, else the default)
    output_dir: str  # absolute
    require_approval: bool

    @classmethod
    def bind(cls, deployment: str, spec_path: Path, ledger: str | None, output_dir: Path,
             require_approval: bool) -> ScheduleBinding:
        return cls(deployment, str(spec_path), file_sha256(spec_path), ledger, str(output_dir), require_approval)

    def parameters(self) -> dict[str, Any]:
        """The deployment's parameters: what a run that takes no orders carries."""
        return {name: getattr(self, name) for name in PARAMETERS}

    def environ(self) -> dict[str, str]:
        return {VARIABLE: json.dumps(asdict(self), sort_keys=True)}

    @classmethod
    def of_process(cls, environ: Mapping[str, str] | None = None) -> ScheduleBinding | None:
        """The binding of the ``dprelease schedule`` process this run was started by, if any."""
        text = (os.environ if environ is None else environ).get(VARIABLE)
        try:
            return cls(**json.loads(text)) if text else None
        except (ValueError, TypeError):
            return None

    def check(self, parameters: Mapping[str, Any]) -> None:
        """Refuse (:class:`NotBound`) a run whose ``parameters`` or spec file differ from the binding."""
        differ = [name for name in PARAMETERS if _json(parameters.get(name)) != _json(getattr(self, name))]
        if differ:
            given = ", ".join(f"{name}={_json(parameters.get(name))}" for name in differ)
            bound = ", ".join(f"{name}={_json(getattr(self, name))}" for name in differ)
            raise NotBound(f"deployment {self.deployment} takes no orders: this run carries {given}, but `dprelease "
                           f"schedule` bound {bound} when it started serving; trigger it without parameters, or "
                           "restart `dprelease schedule` with the values you want. " + NOTHING_SPENT)
        try:
            now = file_sha256(Path(self.spec_path))
        except OSError as exc:
            raise NotBound(f"deployment {self.deployment}: its spec {self.spec_path} cannot be read now "
                           f"({exc.strerror or exc}); put it back, or restart `dprelease schedule`. "
                           + NOTHING_SPENT) from None
        if now != self.spec_sha256:
            raise NotBound(f"deployment {self.deployment}: its spec {self.spec_path} changed since `dprelease "
                           f"schedule` started serving it (sha256 {self.spec_sha256[:12]}… then, {now[:12]}… now); "
                           "restart `dprelease schedule` to serve the edited spec. " + NOTHING_SPENT)


def unbound_refusal() -> NotBound:
    return NotBound("this flow run was not started by a `dprelease schedule` process, so nothing bound its spec, "
                    "ledger, output directory and approval: scheduled releases are served by `dprelease schedule "
                    "SPEC --cron ...` alone (a worker runs what the API tells it). " + NOTHING_SPENT)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)
