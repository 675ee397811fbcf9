"""What a ledger is, read without SQLAlchemy: the SQLite file's header, the schema version this
dprelease reads and writes, and the birth its ``dprelease_meta`` records. Shared by the
SQLAlchemy ledger (:mod:`dprelease.ledger.schema`) and the SQLite reader
(:mod:`dprelease.ledger.reader`)."""

from __future__ import annotations

from dprelease.ledger.records import Birth

SCHEMA_VERSION = 6  # 2: δ of caps and charges (approx terms), longer terms; 3: local collections, approvals;
# 4: the ledger's id, keyed data fingerprints, evaluations, policies, a run's data and approval;
# 5: typed terms (guarantee, change_one_record, unit_id) and caps and charges in `amount` (ρ under zCDP terms);
# 6: per-respondent keyed digests of registered answers (respondent_sets, respondent_digests: ledger/memos.py),
# and data identities (a run's data by its records, keyed and sealed)
SQLITE_HEADER = b"SQLite format 3\x00"
BIRTH_KEYS = {"born_by": "by", "born_reason": "reason", "born_how": "how", "born_where": "where"}  # and created_at


def read_birth(meta: dict[str, str]) -> Birth | None:
    """The birth a ledger's ``dprelease_meta`` records (None: made before births were recorded)."""
    if "born_by" not in meta:
        return None
    return Birth(meta.get("created_at", ""), meta["born_by"], meta.get("born_reason", ""), meta.get("born_how", ""),
                 meta.get("born_where", ""))
