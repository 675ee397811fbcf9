"""What a served deployment's runs may do, bound where ``dprelease schedule`` serves it.

Model. A Prefect deployment's parameters, and each of its runs' scheduled start, live on the
Prefect server: whoever reaches its API can start a run with other parameters or another date
(``prefect deployment run NAME --param require_approval=false`` or ``--start-at 2001-01-01``,
the UI's custom run, ``POST /deployments/{id}/create_flow_run``). A run's scheduled start names
its release (``release: "acs-monthly-{run_date:%Y-%m}"``) and one approval covers every name of
the template, so each date chosen is a release, and a spend, of its own. So what decides privacy
in a scheduled run — the spec (its path, the SHA-256 of its bytes and of every domain and
mapping file it reads), the ledger, the output directory, whether the plan must be approved, and
the cron whose firings are the run dates — is bound by ``dprelease schedule`` when it starts
serving, in a file the API cannot write: ``schedules/NAME.json`` in dprelease's data directory
(:func:`dprelease.host.processes.data_dir`), 0600, with the serving process's PID and start token
(:func:`serving`). Each flow run (:func:`dprelease.serve.orchestrate.scheduled_release`) reads its
deployment's binding (:func:`read_binding`) and, before anything else, checks that the binding,
its directory and the data directory are this user's and open to no one else (no symlink
among them); that the ``dprelease schedule`` process that wrote it still runs and is this
process or an ancestor of it (:meth:`ScheduleBinding.check_process`); that its parameters and
files are the bound ones (:meth:`ScheduleBinding.check`); and that its date is the schedule's
(:meth:`ScheduleBinding.run_date`).

The run date. A scheduled run releases the period of the latest firing of the bound cron at or
before now, and no other: its scheduled start must be a firing F of the cron, not after now (give
or take :data:`SKEW`, for the clocks of the server that starts runs and of this machine), and
not older than one period of the cron (the firing after F has not come yet). So at any moment
one release is admissible, the one the schedule itself runs: a run a few hours late still runs,
a missed month is published on purpose with ``dprelease run SPEC --run-date`` by someone who
holds the spec, the data and the ledger, never from the API. A run triggered for "now"
(``prefect deployment run NAME`` without ``--start-at``, the API without a scheduled time: its
scheduled start is within :data:`SKEW` of its creation) runs as the latest firing at or before
its scheduled start, so retrying a failed month needs no date; it can publish nothing the
schedule would not (a period already published is refused as already released). Any other
scheduled start is refused.

Defended (each refused with one line, before any spec is loaded or ledger opened or created, so
nothing is reserved or spent): a binding given in the run's environment (none is read there); a
binding, or a directory on the way to it, that is not this user's, is open to others or is a
symbolic link (what a run whose HOME or XDG_DATA_HOME points into another user's directory
finds); a binding whose ``schedule`` process has exited (a copy of an old one) or did not start
this run (a Prefect worker's run: a flow run's job variables set a worker's command and
environment); parameters, spec or side files, or a run date, other than bound; a run date from
Prefect's runtime overrides (``PREFECT__RUNTIME__FLOW_RUN__SCHEDULED_START_TIME``): the
orchestrator reads the flow run itself.

Not defended: anyone who can run code as this user (they can write the binding; a Prefect
process worker running as this user runs the command a flow run's job variables give, so run
none as the user who holds the ledger); an edit of the spec or a side file between this check and
the run's own read of it a moment later; what the API can still do: start a run of the latest
firing again (it publishes only what the schedule would), pause, stop or delete the deployment.

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import quote

from dprelease.serve import cron
from dprelease.host import files
from dprelease.errors import UserError
from dprelease.host.processes import alive, data_dir, lineage, process_start

PARAMETERS = ("spec_path", "ledger", "output_dir", "require_approval")  # the flow's, all of them bound
NOTHING_SPENT = "Nothing was opened, reserved or spent."
SKEW = timedelta(minutes=1)  # tolerated between the Prefect server's clock and this machine's
_OPEN_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


class NotBound(UserError):
    """A scheduled run that carries anything but what its ``dprelease schedule`` bound."""


@dataclass(frozen=True)
class ScheduledRun:
    """What the Prefect API says of a flow run: its deployment's name, its scheduled start (the
    run's expected start, which names the release) and when it was created (timezone-aware)."""

    deployment: str | None
    scheduled: datetime | None
    created: datetime | None


@dataclass(frozen=True)
class ScheduleBinding:
    deployment: str  # flow/deployment, e.g. dprelease-scheduled/monthly
    spec_path: str  # absolute
    spec_sha256: str  # of the spec file's bytes when serving started
    side_files: dict[str, str]  # the spec's domain and mapping files (absolute path: sha256 of its bytes)
    ledger: str | None  # as `schedule --ledger` gave it (None: the spec's pin, else the default)
    output_dir: str  # absolute
    require_approval: bool
    cron: str  # the deployment's schedule: its firings are the only run dates
    pid: int  # the serving `dprelease schedule` process, and its start token
    start: str

    @classmethod
    def bind(cls, deployment: str, spec_path: Path, side_files: tuple[str, ...], ledger: str | None,
             output_dir: Path, require_approval: bool, cron_text: str) -> ScheduleBinding:
        """The binding of this process, serving ``spec_path`` (absolute) whose domain and mapping
        files are ``side_files`` (as the spec writes them: relative to its folder)."""
        hashes = {str(spec_path.parent / written): file_sha256(spec_path.parent / written) for written in side_files}
        pid = os.getpid()
        return cls(deployment, str(spec_path), file_sha256(spec_path), hashes, ledger, str(output_dir),
                   require_approval, cron_text, pid, process_start(pid))

    @property
    def name(self) -> str:
        """The deployment's own name (without its flow's)."""
        return self.deployment.partition("/")[2]

    def parameters(self) -> dict[str, Any]:
        """The deployment's parameters: what a run that takes no orders carries."""
        return {name: getattr(self, name) for name in PARAMETERS}

    def check_process(self) -> None:
        """Refuse (:class:`NotBound`) unless the ``dprelease schedule`` process that wrote this
        binding still runs and is this process or one of its ancestors."""
        if not alive(self.pid, self.start):
            raise NotBound(f"deployment {self.deployment}: the `dprelease schedule` process that bound it (PID "
                           f"{self.pid}) no longer runs, so nothing serves it; restart `dprelease schedule`. "
                           + NOTHING_SPENT)
        if self.pid not in lineage():
            raise NotBound(f"deployment {self.deployment}: this flow run was not started by the `dprelease schedule` "
                           f"process serving it (PID {self.pid}), e.g. by a Prefect worker, which runs what the API "
                           "tells it; scheduled releases run only under `dprelease schedule`. " + NOTHING_SPENT)

    def check(self, parameters: Mapping[str, Any]) -> None:
        """Refuse (:class:`NotBound`) a run whose ``parameters``, spec file or side files differ from the binding."""
        differ = [name for name in PARAMETERS if _json(parameters.get(name)) != _json(getattr(self, name))]
        if differ:
            given = ", ".join(f"{name}={_json(parameters.get(name))}" for name in differ)
            bound = ", ".join(f"{name}={_json(getattr(self, name))}"
                              + (" (none given: the spec's own pin, or the per-user default)"
                                 if name == "ledger" and getattr(self, name) is None else "") for name in differ)
            raise NotBound(f"deployment {self.deployment} takes no orders: this run carries {given}, but `dprelease "
                           f"schedule` bound {bound} when it started serving; trigger it without parameters, or "
                           "restart `dprelease schedule` with the values you want. " + NOTHING_SPENT)
        self._unchanged(self.spec_path, self.spec_sha256, "spec", "to serve the edited spec")
        for path, sha256 in self.side_files.items():
            self._unchanged(path, sha256, "domain or mapping file", "to serve the edited file with its spec")

    def _unchanged(self, path: str, sha256: str, what: str, then: str) -> None:
        try:
            now = file_sha256(Path(path))
        except OSError as exc:
            raise NotBound(f"deployment {self.deployment}: its {what} {path} cannot be read now "
                           f"({exc.strerror or exc}); put it back, or restart `dprelease schedule`. "
                           + NOTHING_SPENT) from None
        if now != sha256:
            raise NotBound(f"deployment {self.deployment}: its {what} {path} changed since `dprelease schedule` "
                           f"started serving it (sha256 {sha256[:12]}… then, {now[:12]}… now); restart `dprelease "
                           f"schedule` {then}. " + NOTHING_SPENT)

    def run_date(self, run: ScheduledRun, now: datetime) -> datetime:
        """The run date (UTC) of ``run`` at ``now``: its scheduled start when that is the latest
        firing of the cron at or before ``now``; the latest firing at or before its scheduled start
        when it was triggered for "now"; else refused (:class:`NotBound`). See the module's docstring."""
        if run.scheduled is None:
            raise NotBound(f"deployment {self.deployment}: this flow run has no scheduled start, so no run date; "
                           "trigger it from its deployment. " + NOTHING_SPENT)
        start, now = _utc(run.scheduled), _utc(now)
        latest = cron.latest_firing(self.cron, start)
        triggered_now = run.created is not None and abs(start - _utc(run.created)) <= SKEW
        if latest != start and not triggered_now:
            raise self._wrong_date(start, now, f"which is not a firing of its cron {self.cron!r}")
        if latest is None:
            raise self._wrong_date(start, now, f"and its cron {self.cron!r} did not fire in the ten years before")
        if latest > now + SKEW:
            raise self._wrong_date(latest, now, "which is in the future")
        following = cron.firings(self.cron, latest, 1)
        if following and following[0] <= now:
            raise self._wrong_date(latest, now, f"which is older than one period of its cron {self.cron!r} (the "
                                                f"next firing, {_shown(following[0])}, has come)")
        return latest.replace(tzinfo=timezone.utc)

    def _wrong_date(self, date: datetime, now: datetime, why: str) -> NotBound:
        due = cron.latest_firing(self.cron, now)
        return NotBound(
            f"deployment {self.deployment}: this run is dated {_shown(date)}, {why}: a scheduled run releases the "
            f"period of the latest firing at or before now ({_shown(due) if due else 'none'}) and no other; trigger "
            "it without a start time to run that one, or publish another period on purpose with `dprelease run SPEC "
            "--run-date DATE`. " + NOTHING_SPENT)


def unbound_refusal(deployment: str | None) -> NotBound:
    where = f"no binding of deployment {deployment!r} in {binding_dir()}" if deployment else "no deployment"
    return NotBound(f"this flow run was not started by a `dprelease schedule` process ({where}), so nothing bound "
                    "its spec, ledger, output directory, approval and dates: scheduled releases are served by "
                    "`dprelease schedule SPEC --cron ...` alone (a worker runs what the API tells it). "
                    + NOTHING_SPENT)


def binding_dir() -> Path:
    return data_dir() / "schedules"


def binding_file(deployment: str) -> Path:
    """Where the binding of deployment ``deployment`` (its own name) is kept."""
    return binding_dir() / (quote(deployment, safe="") + ".json")


def read_binding(deployment: str) -> ScheduleBinding | None:
    """The binding kept for deployment ``deployment`` (its own name): None where there is none;
    refused (:class:`NotBound`) where it, ``schedules`` or dprelease's data directory is not this
    user's, is open to others or is a symbolic link, or where it is not a binding of that name."""
    path = binding_file(deployment)
    fds: list[int] = []
    try:
        for where, flags in ((path.parent.parent, _OPEN_DIR), (path.parent, _OPEN_DIR),
                             (path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))):
            fds.append(os.open(where.name if fds else where, flags, dir_fd=fds[-1] if fds else None))
            _owner_only(os.fstat(fds[-1]), where, directory=where != path)
        with os.fdopen(fds.pop(), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise NotBound(f"cannot read the binding of deployment {deployment!r} at {path}: {exc.strerror or exc} (a "
                       "symbolic link is refused); restart `dprelease schedule`. " + NOTHING_SPENT) from None
    finally:
        for fd in fds:
            os.close(fd)
    try:
        binding = ScheduleBinding(**json.loads(text))
    except (ValueError, TypeError):
        binding = None
    if binding is None or binding.name != deployment:
        raise NotBound(f"{path} is not the binding of deployment {deployment!r}; restart `dprelease schedule`. "
                       + NOTHING_SPENT)
    return binding


def _owner_only(info: os.stat_result, path: Path, directory: bool) -> None:
    if not files.owner_only(info, directory=directory):
        raise NotBound(f"{path} is not a {'directory' if directory else 'file'} of yours open to you alone (owner uid "
                       f"{info.st_uid}, mode {stat.filemode(info.st_mode)}), so a scheduled run does not trust what it "
                       "holds: if it is yours, `chmod go-rwx` it and restart `dprelease schedule`; otherwise HOME or "
                       "XDG_DATA_HOME points into someone else's. " + NOTHING_SPENT)


@contextmanager
def serving(binding: ScheduleBinding) -> Iterator[Path]:
    """Keep ``binding`` (this process's) for its deployment while the block serves it: written
    owner-only (:mod:`dprelease.host.files`) and read back as a run will read it (so a data directory
    open to others is refused now, not at the first run); removed on the way out if still ours.
    Refused (:class:`UserError`) while another running ``dprelease schedule`` serves that name."""
    path = binding_file(binding.name)
    try:
        held = read_binding(binding.name)
    except NotBound:
        held = None  # replaced below, or refused by the read-back
    if held is not None and held.pid != binding.pid and alive(held.pid, held.start):
        raise UserError(f"deployment {binding.deployment} is already served by `dprelease schedule` (PID {held.pid}); "
                        "stop it first (or choose another --name)")
    files.write_text(path, json.dumps(asdict(binding), indent=2, sort_keys=True))
    try:
        if read_binding(binding.name) != binding:
            raise UserError(f"{path} did not keep the binding written there; check the directory and try again")
    except UserError:
        path.unlink(missing_ok=True)
        raise
    try:
        yield path
    finally:
        try:
            if read_binding(binding.name) == binding:
                path.unlink(missing_ok=True)
        except NotBound:
            pass


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _utc(moment: datetime) -> datetime:
    """``moment`` in UTC, naive (as :mod:`dprelease.serve.cron` takes it); a naive ``moment`` is UTC already."""
    return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment


def _shown(moment: datetime) -> str:
    whole_minute = moment.second == moment.microsecond == 0
    return moment.strftime("%Y-%m-%d %H:%M" if whole_minute else "%Y-%m-%d %H:%M:%S") + " UTC"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)
