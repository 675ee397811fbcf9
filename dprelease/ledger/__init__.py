"""The lifetime privacy ledger and where it lives."""

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
from dprelease.ledger.store import Ledger

__all__ = [
    "ENV", "RANDOMIZED", "REGISTERED", "AnswerSet", "Approval", "Birth", "CapChange", "DatasetState", "Evaluation", "Policy", "RecordIdentity", "Ledger", "LedgerLocation", "LocalCollection", "LocalRecord", "Reservation", "Respondents", "RunRecord",
    "check_lifetime_matches", "local_charge", "memo_honoured", "provenance_of", "unregistered_message", "default_path", "over_lifetime_message", "resolve_location", "typed_location",
]
