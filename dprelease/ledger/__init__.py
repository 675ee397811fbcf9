"""The lifetime privacy ledger and where it lives.

Importing the package does not import SQLAlchemy: :class:`Ledger` (:mod:`dprelease.ledger.store`)
is imported on first use, so that reading a plan's records, or a SQLite ledger without
SQLAlchemy (:mod:`dprelease.ledger.reader`), does not pay for it.
"""

from typing import TYPE_CHECKING, Any

from dprelease.ledger.location import ENV, LedgerLocation, default_path, resolve_location, typed_location
from dprelease.ledger.policy import (
    check_lifetime_matches,
    local_charge,
    memo_honoured,
    over_lifetime_message,
    provenance_of,
    unregistered_message,
)
from dprelease.ledger.records import (
    RANDOMIZED,
    REGISTERED,
    AnswerSet,
    Approval,
    Birth,
    CapChange,
    DatasetState,
    Evaluation,
    LocalCollection,
    LocalRecord,
    Policy,
    RecordIdentity,
    Reservation,
    Respondents,
    RunRecord,
)

if TYPE_CHECKING:
    from dprelease.ledger.store import Ledger

__all__ = [
    "ENV", "RANDOMIZED", "REGISTERED", "AnswerSet", "Approval", "Birth", "CapChange", "DatasetState", "Evaluation", "Policy", "RecordIdentity", "Ledger", "LedgerLocation", "LocalCollection", "LocalRecord", "Reservation", "Respondents", "RunRecord",
    "check_lifetime_matches", "local_charge", "memo_honoured", "provenance_of", "unregistered_message", "default_path", "over_lifetime_message", "resolve_location", "typed_location",
]


def __getattr__(name: str) -> Any:  # PEP 562: the SQLAlchemy ledger is imported on first use
    if name == "Ledger":
        from dprelease.ledger.store import Ledger

        return Ledger
    raise AttributeError(f"module 'dprelease.ledger' has no attribute {name!r}")
