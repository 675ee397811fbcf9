"""The ledger's database: its tables and schema version, and opening one. Opening checks an
existing ledger's version and migrates an older schema in place; given a :class:`Birth` (the
recorded act of ``dprelease ledger init``, or of a run's typed ``--ledger``) it creates a new one
(a SQLite one built whole beside its location and linked into place) where none exists. It never
takes an empty or foreign database for a fresh ledger, nor re-creates one beside the key file a
deleted or moved ledger left. Also the fingerprint key a ledger records (keys.py).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dprelease.host import files
from dprelease.errors import LedgerError, first_line
from dprelease.ledger import keys
from dprelease.ledger.location import LedgerLocation, SqliteURL
from dprelease.ledger.meta import BIRTH_KEYS, SCHEMA_VERSION, SQLITE_HEADER, read_birth  # noqa: F401
from dprelease.ledger.records import Birth

CREATION_WAIT = 15.0  # seconds a creator waits for another process's ledger to appear beside its key

metadata = sa.MetaData()
meta_t = sa.Table("dprelease_meta", metadata,
                  sa.Column("key", sa.String(64), primary_key=True),
                  sa.Column("value", sa.Text, nullable=False))
datasets_t = sa.Table("datasets", metadata,
                      sa.Column("name", sa.String(100), primary_key=True),
                      # schemas 1–4's one-string terms ("pure-bounded@SERIALNO"): still written, never read
                      sa.Column("definition", sa.String(200), nullable=False),
                      sa.Column("created_at", sa.String(40), nullable=False),
                      sa.Column("created_by", sa.String(200), nullable=False),
                      # the dataset's terms (accounting.Terms), written for every dataset (nullable only
                      # because schema 5 adds them to existing tables)
                      sa.Column("guarantee", sa.String(10)),  # pure | zcdp | approx
                      sa.Column("change_one_record", sa.Boolean),  # bounded DP (totals public)
                      sa.Column("unit_id", sa.String(100)))  # the person id column; NULL: one row
caps_t = sa.Table("budget_caps", metadata,
                  sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                  sa.Column("dataset", sa.String(100), sa.ForeignKey("datasets.name"), nullable=False),
                  sa.Column("amount", sa.String(200), nullable=False),  # in the dataset's unit: ε, or ρ (zcdp)
                  sa.Column("delta", sa.String(200)),
                  sa.Column("reason", sa.Text, nullable=False),
                  sa.Column("set_by", sa.String(200), nullable=False),
                  sa.Column("set_at", sa.String(40), nullable=False))
runs_t = sa.Table("runs", metadata,
                  sa.Column("run_id", sa.String(64), primary_key=True),
                  sa.Column("dataset", sa.String(100), sa.ForeignKey("datasets.name"), nullable=False),
                  sa.Column("release", sa.String(100), nullable=False),
                  sa.Column("spec_fingerprint", sa.String(80), nullable=False),
                  sa.Column("spec_path", sa.Text),
                  sa.Column("output_dir", sa.Text),
                  sa.Column("created_at", sa.String(40), nullable=False),
                  sa.Column("created_by", sa.String(200), nullable=False),
                  sa.Column("data_fingerprint", sa.String(80)),  # keyed (keys.py), from the reservation on
                  sa.Column("approved_by", sa.String(200)),  # the approval the run was reserved under, if any
                  sa.Column("approved_at", sa.String(40)),
                  sa.Index("ix_runs_dataset_release", "dataset", "release"))
charges_t = sa.Table("charges", metadata,
                     sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                     sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False),
                     sa.Column("table_name", sa.String(100), nullable=False),
                     sa.Column("amount", sa.String(200), nullable=False),  # in the dataset's unit: ε, or ρ (zcdp)
                     sa.Column("delta", sa.String(200)))
local_t = sa.Table("local_collections", metadata,
                   sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                   sa.Column("dataset", sa.String(100), sa.ForeignKey("datasets.name"), nullable=False),
                   sa.Column("collection", sa.String(100), nullable=False),
                   sa.Column("question", sa.String(100), nullable=False),
                   sa.Column("protocol", sa.String(200), nullable=False),
                   sa.Column("epsilon", sa.String(200), nullable=False),  # per respondent, a rational upper bound
                   sa.Column("charged", sa.String(200), nullable=False),  # 0 when memoised or already recorded
                   sa.Column("memoised", sa.Boolean, nullable=False),
                   sa.Column("answers", sa.String(80)),  # fingerprint of the file of answers
                   sa.Column("run_id", sa.String(64), nullable=False),
                   sa.Column("recorded_at", sa.String(40), nullable=False),
                   sa.Column("recorded_by", sa.String(200), nullable=False),
                   sa.UniqueConstraint("dataset", "collection", "question"))
approvals_t = sa.Table("approvals", metadata,
                       sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                       sa.Column("dataset", sa.String(100), nullable=False),  # may not be in datasets yet
                       sa.Column("release", sa.String(100), nullable=False),
                       sa.Column("spec_fingerprint", sa.String(80), nullable=False),
                       sa.Column("spec_path", sa.Text),
                       sa.Column("approved_by", sa.String(200), nullable=False),
                       sa.Column("approved_at", sa.String(40), nullable=False),
                       sa.Index("ix_approvals_fingerprint", "dataset", "spec_fingerprint"))
evaluations_t = sa.Table("evaluations", metadata,  # `dprelease evaluate`: data read in the open (nothing spent)
                         sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                         sa.Column("dataset", sa.String(100), nullable=False),
                         sa.Column("data_fingerprint", sa.String(80), nullable=False),  # keyed
                         sa.Column("spec_path", sa.Text),
                         sa.Column("trials", sa.Integer, nullable=False),
                         sa.Column("evaluated_at", sa.String(40), nullable=False),
                         sa.Column("evaluated_by", sa.String(200), nullable=False))
policies_t = sa.Table("policies", metadata,  # append-only: the latest row of a (dataset, policy) holds
                      sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                      sa.Column("dataset", sa.String(100), nullable=False),
                      sa.Column("policy", sa.String(40), nullable=False),  # "approval"
                      sa.Column("value", sa.String(40), nullable=False),  # "required" | "optional"
                      sa.Column("reason", sa.Text, nullable=False),
                      sa.Column("set_by", sa.String(200), nullable=False),
                      sa.Column("set_at", sa.String(40), nullable=False))
leases_t = sa.Table("leases", metadata,  # not accounting: who holds a reservation (lease.py); renewed in place
                    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), primary_key=True),
                    sa.Column("host", sa.String(255), nullable=False),
                    sa.Column("pid", sa.Integer, nullable=False),
                    sa.Column("start", sa.String(80), nullable=False),
                    sa.Column("renewed_at", sa.String(40), nullable=False),
                    sa.Column("ended_at", sa.String(40)))
answer_sets_t = sa.Table("answer_sets", metadata,  # provenance of local answers (append-only)
                        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                        sa.Column("dataset", sa.String(100), nullable=False),  # may not be in datasets yet
                        sa.Column("collection", sa.String(100), nullable=False),
                        sa.Column("question", sa.String(100), nullable=False),  # the column of answers
                        sa.Column("protocol", sa.String(200), nullable=False),  # as LocalCollection.protocol
                        sa.Column("epsilon", sa.String(200), nullable=False),  # per respondent, an upper bound
                        sa.Column("answers", sa.String(80), nullable=False),  # keyed fingerprint of the file
                        sa.Column("memo_of", sa.String(100)),  # the collection whose memo was reused, if any
                        sa.Column("how", sa.String(40), nullable=False),  # "dprelease randomize" | "registered"
                        sa.Column("statement", sa.Text),  # who randomized them and how (registered ones)
                        sa.Column("registered_by", sa.String(200), nullable=False),
                        sa.Column("registered_at", sa.String(40), nullable=False),
                        sa.Index("ix_answer_sets_answers", "answers"))
respondent_sets_t = sa.Table("respondent_sets", metadata,  # a registration kept per respondent (memos.py)
                            sa.Column("answer_set", sa.Integer, sa.ForeignKey("answer_sets.id"), primary_key=True),
                            sa.Column("id_column", sa.String(100), nullable=False),  # the respondent id column
                            # random per registration; NULL: a memoised registration, checked, no digests kept
                            sa.Column("salt", sa.String(32)),
                            # true: the ids were checked to name one respondent a row (none empty or repeated,
                            # not an answer column); NULL: kept before dprelease checked that (never an origin)
                            sa.Column("unique_ids", sa.Boolean))
respondent_digests_t = sa.Table("respondent_digests", metadata,  # keyed, padded, in digest order (memos.py)
                               sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                               sa.Column("answer_set", sa.Integer, sa.ForeignKey("answer_sets.id"), nullable=False),
                               sa.Column("digests", sa.Text, nullable=False),  # 1024 of 32 hex digits, run together
                               sa.Index("ix_respondent_digests_set", "answer_set"))
identities_t = sa.Table("data_identities", metadata,  # a run's data by its records (data/identity.py)
                        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), primary_key=True),
                        sa.Column("dataset", sa.String(100), nullable=False),
                        sa.Column("records", sa.String(80), nullable=False),  # keyed: the records' exact digest
                        # sealed (keys.seal), of a fixed size; NULL where an earlier row of the dataset holds the
                        # same records' (one sketch per dataset and data)
                        sa.Column("sketch", sa.Text),
                        sa.Index("ix_identities_records", "dataset", "records"))
events_t = sa.Table("run_events", metadata,
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False),
                    sa.Column("state", sa.String(16), nullable=False),
                    sa.Column("at", sa.String(40), nullable=False),
                    sa.Column("by", sa.String(200), nullable=False),
                    sa.Column("reason", sa.Text),
                    sa.Column("data_fingerprint", sa.String(80)))


def open_engine(location: LedgerLocation, *, birth: Birth | None = None) -> tuple[Engine, bool] | None:
    """(engine, whether this call created the ledger) for ``location``; None where no ledger
    exists and there is no ``birth`` to create one with. See :meth:`dprelease.ledger.store.Ledger.open`."""
    path = location.sqlite_path
    created = False
    if path is not None and not path.exists():
        if birth is None:
            return None
        if not _orphaned_key_wait(location):
            created = _create_sqlite_ledger(location, birth)
    elif path is not None:
        _refuse_non_ledger_file(path, location)
    engine = _engine(location)
    try:
        if sa.inspect(engine).has_table("dprelease_meta"):
            _check_version(engine, location)
        elif path is not None:
            others = sa.inspect(engine).get_table_names()
            raise LedgerError(f"{location.shown} is a database with other tables ({', '.join(others[:5])}) and no "
                              "dprelease ledger; refusing to add one there" if others else
                              f"{location.shown} is an empty database, not a dprelease ledger; it is never taken "
                              "for a fresh ledger (restore the ledger from a backup, or remove the file if no "
                              "release ever used it). Nothing was spent.")
        elif birth is None:
            engine.dispose()
            return None
        else:
            created = _create_schema(engine, location, birth) or created
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        raise LedgerError(f"cannot open the ledger at {location.shown}: {first_line(exc.orig)}. A damaged ledger is "
                          "never replaced by a fresh one: restore it from a backup. Nothing was spent.") from None
    except LedgerError:
        engine.dispose()
        raise
    return engine, created


def _create_schema(engine: Engine, location: LedgerLocation, birth: Birth) -> bool:
    """Create the tables in one locked transaction, recording the ``birth``; False if another
    process won the race."""
    with engine.connect() as conn:
        conn = conn.execution_options(dprelease_write=True)
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('dprelease:schema'))"))
            inspector = sa.inspect(conn)
            if inspector.has_table("dprelease_meta"):
                return False
            others = inspector.get_table_names()
            if others:
                raise LedgerError(f"{location.shown} is a database with other tables ({', '.join(others[:5])}) "
                                  "and no dprelease ledger; refusing to add one there")
            metadata.create_all(conn)
            ledger_id = uuid.uuid4().hex
            key = _key_for_new_ledger(location, ledger_id)
            conn.execute(meta_t.insert(), [
                {"key": "schema_version", "value": str(SCHEMA_VERSION)},
                {"key": "ledger_id", "value": ledger_id},
                {"key": "created_at", "value": birth.at},
                {"key": "key_check", "value": keys.check_value(key, ledger_id)},
                *({"key": k, "value": getattr(birth, field)} for k, field in BIRTH_KEYS.items())])
    return True


def _check_version(engine: Engine, location: LedgerLocation) -> None:
    with engine.connect() as conn:
        row = conn.execute(sa.select(meta_t.c.value).where(meta_t.c.key == "schema_version")).first()
    version = int(row[0]) if row else 0
    if version in (1, 2, 3, 4, 5) or (version == SCHEMA_VERSION and not _complete_6(engine)):
        _migrate(engine, location)
        version = SCHEMA_VERSION
    if version != SCHEMA_VERSION:
        raise LedgerError(f"the ledger at {location.shown} has schema version {version}; this dprelease "
                          f"reads version {SCHEMA_VERSION}. Use the dprelease that wrote it.")


def _migrate(engine: Engine, location: LedgerLocation) -> None:
    """Schema 1, 2, 3, 4 or 5 → 6 (and a schema-6 ledger made before a part of 6, its
    ``respondent_sets.unique_ids``, gains it), in one locked transaction; nothing recorded
    changes, and a second process finds it done. 1 → 2: the (NULL) δ columns of caps and charges, a wider terms column.
    2 → 3: the tables of plan approvals and of local collections, or, where a pre-release 2
    had the latter, its answers fingerprint (NULL: such a collection counts as having unknown
    answers). 3 → 4: the ledger gets its id and fingerprint key; every plain data and answers
    fingerprint is replaced by its keyed form (the same function later runs compute, so
    nothing is lost); the tables of evaluations and policies; a run's data and approval. 4 → 5:
    each dataset's one-string terms parsed into typed columns (:class:`~dprelease.accounting.Terms`),
    and the caps' and charges' ``epsilon`` column, which holds ρ under zCDP terms, renamed
    ``amount``: every figure stays as it was. 5 → 6: the tables of per-respondent digests
    (:mod:`~dprelease.ledger.memos`), empty: a collection registered before keeps none, so a memo
    of it cannot be verified and is refused; and the table of data identities (runs recorded
    before it have none: their data is recognised by its bytes only). A registration kept per
    respondent before its ids were checked (``unique_ids`` NULL) is no memo's origin either."""
    with engine.connect() as conn:
        conn = conn.execution_options(dprelease_write=True)
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('dprelease:schema'))"))
            row = conn.execute(sa.select(meta_t.c.value).where(meta_t.c.key == "schema_version")).first()
            if row is None or row[0] not in ("1", "2", "3", "4", "5", "6"):  # 6: a part of 6 made later
                return
            if row[0] == "1":
                conn.execute(sa.text("ALTER TABLE budget_caps ADD COLUMN delta VARCHAR(200)"))
                conn.execute(sa.text("ALTER TABLE charges ADD COLUMN delta VARCHAR(200)"))
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("ALTER TABLE datasets ALTER COLUMN definition TYPE VARCHAR(200)"))
            if row[0] in ("1", "2"):
                if not sa.inspect(conn).has_table("approvals"):
                    approvals_t.create(conn)
                if not sa.inspect(conn).has_table("local_collections"):
                    local_t.create(conn)
                elif "answers" not in {c["name"] for c in sa.inspect(conn).get_columns("local_collections")}:
                    conn.execute(sa.text("ALTER TABLE local_collections ADD COLUMN answers VARCHAR(80)"))
            if row[0] not in ("4", "5", "6"):
                if conn.dialect.name == "sqlite":  # the plain hashes replaced below leave no copy in freed pages
                    conn.exec_driver_sql("PRAGMA secure_delete = ON")
                _migrate_to_4(conn, location)
            if row[0] not in ("5", "6"):
                _migrate_to_5(conn)
            _migrate_to_6(conn)
            conn.execute(meta_t.update().where(meta_t.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))
    if engine.dialect.name == "sqlite":  # nor in the journal's or the file's slack: rewrite the file
        raw = engine.raw_connection()  # outside SQLAlchemy's transaction (VACUUM refuses one)
        try:
            raw.driver_connection.execute("VACUUM")  # type: ignore[union-attr]
        finally:
            raw.close()


def _migrate_to_4(conn: Connection, location: LedgerLocation) -> None:
    """Idempotent: a pre-release ledger may have some of schema 4's parts already."""
    inspector = sa.inspect(conn)
    present = {c["name"] for c in inspector.get_columns("runs")}
    for column, kind in (("data_fingerprint", "VARCHAR(80)"), ("approved_by", "VARCHAR(200)"),
                         ("approved_at", "VARCHAR(40)")):
        if column not in present:
            conn.execute(sa.text(f"ALTER TABLE runs ADD COLUMN {column} {kind}"))
    for table in (evaluations_t, policies_t, leases_t, answer_sets_t):
        if not inspector.has_table(table.name):
            table.create(conn)
    meta = dict(conn.execute(sa.select(meta_t.c.key, meta_t.c.value)).all())
    ledger_id = meta.get("ledger_id") or uuid.uuid4().hex
    key = _key_for_new_ledger(location, ledger_id)
    if "ledger_id" not in meta:
        conn.execute(meta_t.insert().values(key="ledger_id", value=ledger_id))
    if "key_check" not in meta:
        conn.execute(meta_t.insert().values(key="key_check", value=keys.check_value(key, ledger_id)))
    for table, column in ((events_t, events_t.c.data_fingerprint), (local_t, local_t.c.answers),
                          (runs_t, runs_t.c.data_fingerprint)):
        for row_key, plain in conn.execute(sa.select(table.primary_key.columns.values()[0], column)
                                           .where(column.startswith("sha256:"))).all():
            pk = table.primary_key.columns.values()[0]
            conn.execute(table.update().where(pk == row_key).values({column.name: keys.keyed(key, plain)}))


def _migrate_to_5(conn: Connection) -> None:
    """Typed terms beside the old string, and ``amount`` for the caps' and charges' figures.
    Idempotent. Terms this version does not know stay unparsed (NULL): the planner refuses them,
    as before."""
    from dprelease.accounting import Terms

    present = {c["name"] for c in sa.inspect(conn).get_columns("datasets")}
    for column, kind in (("guarantee", "VARCHAR(10)"), ("change_one_record", "BOOLEAN"), ("unit_id", "VARCHAR(100)")):
        if column not in present:
            conn.execute(sa.text(f"ALTER TABLE datasets ADD COLUMN {column} {kind}"))
    for name, text in conn.execute(sa.select(datasets_t.c.name, datasets_t.c.definition)).all():
        try:
            terms = Terms.from_text(text)
        except ValueError:
            continue
        conn.execute(datasets_t.update().where(datasets_t.c.name == name).values(
            guarantee=terms.kind, change_one_record=terms.change, unit_id=terms.unit_id))
    for table in ("budget_caps", "charges"):
        if "epsilon" in {c["name"] for c in sa.inspect(conn).get_columns(table)}:
            conn.execute(sa.text(f"ALTER TABLE {table} RENAME COLUMN epsilon TO amount"))


def _migrate_to_6(conn: Connection) -> None:
    """The tables of per-respondent digests (and of answer sets, which a pre-release schema-4
    ledger may lack) and of data identities, where missing, and the ``unique_ids`` column of
    ``respondent_sets`` where a schema-6 ledger made before it lacks it (NULL in its rows: kept
    before the ids were checked). Idempotent; adds only."""
    inspector = sa.inspect(conn)
    for table in (answer_sets_t, respondent_sets_t, respondent_digests_t, identities_t):
        if not inspector.has_table(table.name):
            table.create(conn)
    if "unique_ids" not in {c["name"] for c in sa.inspect(conn).get_columns(respondent_sets_t.name)}:
        conn.execute(sa.text("ALTER TABLE respondent_sets ADD COLUMN unique_ids BOOLEAN"))


def _complete_6(engine: Engine) -> bool:
    """Whether a schema-6 ledger has every part of schema 6 (one made before ``unique_ids`` lacks it)."""
    inspector = sa.inspect(engine)
    return inspector.has_table(respondent_sets_t.name) and "unique_ids" in {
        c["name"] for c in inspector.get_columns(respondent_sets_t.name)}


def _key_for_new_ledger(location: LedgerLocation, ledger_id: str) -> bytes:
    """The key a new (or newly migrated) ledger records: the one already at its key path (a
    team's shared key, or another process's that won a creation race), else a new one."""
    path = keys.key_path(location, ledger_id)
    return keys.read_key(path) or keys.create_key(path)


def read_checked_key(location: LedgerLocation, ledger_id: str, check: str | None) -> bytes:
    path = keys.key_path(location, ledger_id)
    key = keys.read_key(path)
    if key is None:
        raise LedgerError(f"the fingerprint key of ledger {ledger_id} ({location.shown}) is not at {path}, so this "
                          "run cannot recognise its data. Copy the key file from where the ledger was created to "
                          f"{path} (owner-only), or set ${keys.KEY_ENV} to its path. Nothing was spent.")
    if check is None or keys.keys_differ(keys.check_value(key, ledger_id), check):
        raise LedgerError(f"{path} is not the fingerprint key of ledger {ledger_id} ({location.shown}); with another "
                          "key the same data would not be recognised. Use the key created with this ledger. "
                          "Nothing was spent.")
    return key


def _orphaned_key_wait(location: LedgerLocation) -> bool:
    """Where a SQLite ledger's own key file exists but the ledger does not, a ledger was there
    (deleted, moved, or being created by another process this instant): wait briefly for the
    latter (True: it appeared), else refuse — a fresh ledger there would restart every budget.
    Whatever ``$DPRELEASE_LEDGER_KEY`` says: the file beside the location is the trace."""
    path = location.sqlite_path
    assert path is not None
    key = keys.beside(path)
    if not key.exists():
        return False
    deadline = time.monotonic() + CREATION_WAIT
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.1)
    raise LedgerError(f"{key} exists but the ledger {path} does not: the ledger was deleted or moved, and a fresh one "
                      "here would restart every lifetime budget it held. Restore the ledger from a backup (or point "
                      "--ledger / ledger: to where it is now). Only if no release ever used it: remove the key file, "
                      "and a new ledger starts. Nothing was created or spent.")


def _create_sqlite_ledger(location: LedgerLocation, birth: Birth) -> bool:
    """Build a new SQLite ledger in a temporary file and link it into place whole (False: another
    process's ledger got there first). The location never holds a half-made ledger."""
    path = location.sqlite_path
    assert path is not None
    try:
        files.make_dirs(path.parent)  # 0700, its missing parents too
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
        os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, files.FILE_MODE))
    except OSError as exc:
        raise LedgerError(f"cannot create the ledger at {location.shown}: {exc.strerror or exc}") from None
    try:
        engine = _engine(LedgerLocation(location.url.set(database=str(temporary)), location.source))
        try:
            _create_schema(engine, location, birth)  # the key belongs to the real location
        finally:
            engine.dispose()
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        except OSError as exc:
            raise LedgerError(f"cannot create the ledger at {location.shown}: {exc.strerror or exc}") from None
        return True
    finally:
        temporary.unlink(missing_ok=True)


def _refuse_non_ledger_file(path: Path, location: LedgerLocation) -> None:
    """An existing file at a SQLite ledger's location must be a SQLite database: an empty or
    foreign file is refused, never taken for a fresh ledger (that would restart the budget)."""
    try:
        if not path.is_file():
            raise LedgerError(f"{path} is not a file; a SQLite ledger location holds a ledger or nothing")
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise LedgerError(f"cannot read the ledger at {location.shown}: {exc.strerror or exc}") from None
    if not head:
        raise LedgerError(f"the ledger file {path} is empty (0 bytes): a truncated file or a failed copy, not a "
                          "ledger. It is never taken for a fresh ledger, which would restart the lifetime budget: "
                          "restore the ledger from a backup (if no release ever used this location, remove the "
                          "file). Nothing was spent.")
    if head != SQLITE_HEADER:
        raise LedgerError(f"cannot open the ledger at {location.shown}: not a SQLite database, so not a dprelease "
                          "ledger; restore the ledger from a backup or point to another location. Nothing was spent.")


def _engine(location: LedgerLocation) -> Engine:
    url = location.url
    if isinstance(url, SqliteURL):
        engine = sa.create_engine(url.sqlalchemy(), connect_args={"timeout": 60}, poolclass=sa.pool.NullPool)

        @sa.event.listens_for(engine, "connect")
        def _no_implicit_transactions(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            dbapi_conn.execute("PRAGMA foreign_keys = ON")

        @sa.event.listens_for(engine, "begin")
        def _begin(conn):  # type: ignore[no-untyped-def]
            # writers take the write lock before they read what they check
            write = conn.get_execution_options().get("dprelease_write")
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine
    try:
        return sa.create_engine(url, poolclass=sa.pool.NullPool)
    except ModuleNotFoundError as exc:
        raise LedgerError(f"the ledger URL needs the {exc.name!r} driver: "
                          "pip install 'dprelease[postgres]'") from None
