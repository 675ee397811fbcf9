"""The lifetime privacy ledger and where it lives."""

from dprelease.ledger.location import ENV, LedgerLocation, default_path, resolve_location
from dprelease.ledger.store import (
    Approval,
    CapChange,
    DatasetState,
    Evaluation,
    Ledger,
    LocalCollection,
    LocalRecord,
    Policy,
    Reservation,
    RunRecord,
    check_lifetime_matches,
    local_charge,
    over_lifetime_message,
)

__all__ = [
    "ENV", "Approval", "CapChange", "DatasetState", "Evaluation", "Policy", "Ledger", "LedgerLocation", "LocalCollection", "LocalRecord", "Reservation", "RunRecord",
    "check_lifetime_matches", "local_charge", "default_path", "over_lifetime_message", "resolve_location",
]
