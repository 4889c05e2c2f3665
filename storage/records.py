"""The tuner's record database (tuner.records.Database) over SQLAlchemy: SQLite or PostgreSQL.

Every write is its own committed transaction, so a record is durable when `commit_record`
returns and a killed tuning job loses nothing it reported. Reads are short transactions of
their own; nothing here keeps a session open between calls, so one `SqlDatabase` can be shared
by threads and many processes can open the same database.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from alembic.util import CommandError
from sqlalchemy import URL, CursorResult, Engine, Select, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from storage.errors import DatabaseUnavailableError, StorageError, UnknownWorkloadError
from storage.migrations import upgrade as upgrade_schema
from storage.models import TRUSTED, TuningRecordRow, WorkloadRow
from storage.session import display_url, make_engine, make_sessionmaker
from tuner.records import ErrorKind, TuningRecord, WorkloadEntry, trace_hash

if TYPE_CHECKING:
    from tuner.apply import DatabaseSource

_CHUNK = 500  # rows per multi-row INSERT (SQLite caps the bound parameters of one statement)
_RECORD_ORDER = (TuningRecordRow.created_at, TuningRecordRow.id)  # oldest first, ties by insertion


class SqlDatabase:
    """tuner.records.Database on a SQLAlchemy URL or engine; migrates the schema on open by default.

    When given an engine, the caller keeps owning it (close() does not dispose it); engines should
    come from storage.session.make_engine, which sets SQLite up for concurrent writers.
    """

    def __init__(self, url_or_engine: str | URL | Engine, *, upgrade: bool = True) -> None:
        if isinstance(url_or_engine, Engine):
            self.engine, self._owned = url_or_engine, False
        else:
            try:
                self.engine, self._owned = make_engine(url_or_engine), True
            except (SQLAlchemyError, OSError) as exc:
                raise DatabaseUnavailableError(
                    f"cannot open database {display_url(url_or_engine)}: {describe_error(exc)}"
                ) from exc
        self._read = make_sessionmaker(self.engine)
        self._write = make_sessionmaker(self.engine, write=True)
        try:
            if upgrade:
                upgrade_schema(self.engine)
            else:
                with self.engine.connect():
                    pass
        except (SQLAlchemyError, OSError, CommandError) as exc:
            self.close()
            hint = " (written by a newer temper?)" if isinstance(exc, CommandError) else ""
            raise DatabaseUnavailableError(
                f"cannot open database {display_url(self.engine.url)}: {describe_error(exc)}{hint}"
            ) from exc

    # --- lifecycle and sessions ----------------------------------------------------------------

    def close(self) -> None:
        """Release pooled connections (only of an engine this object created)."""
        if self._owned:
            self.engine.dispose()

    def __enter__(self) -> SqlDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def read_session(self, *, snapshot: bool = False) -> Iterator[Session]:
        """A session for reads; its transaction ends (rolled back) when the block does.

        With `snapshot`, every query in the block sees the same state of the database even while
        others commit (SQLite read transactions do anyway; PostgreSQL needs REPEATABLE READ).
        """
        with self._read() as session:
            if snapshot and self.engine.dialect.name == "postgresql":
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            yield session

    @contextmanager
    def write_session(self) -> Iterator[Session]:
        """A session whose block is one write transaction: committed on success, rolled back on error."""
        with self._write() as session, session.begin():
            yield session

    # --- tuner.records.Database ----------------------------------------------------------------

    def commit_workload(self, entry: WorkloadEntry) -> None:
        """Insert the workload if its key is new; an existing workload is kept as it was."""
        with self.write_session() as session:
            insert_workloads(session, [entry])

    def commit_record(self, record: TuningRecord) -> int:
        """Store one record (its `id` is ignored) and commit; returns the id the database gave it."""
        with self.write_session() as session:
            workload_id = session.scalar(select(WorkloadRow.id).where(WorkloadRow.key == record.workload_key))
            if workload_id is None:
                raise UnknownWorkloadError(record.workload_key)
            row = TuningRecordRow(**record_values(record, workload_id))
            session.add(row)
            session.flush()
            return row.id

    def best(self, workload_key: str, target_key: str) -> TuningRecord | None:
        """The successful record of exactly this (workload, target) pair that ran fastest inside its
        model, when some were timed there (model_secs), else the one with the smallest median."""
        stmt = (
            _pair(workload_key, target_key)
            .where(TuningRecordRow.median_secs.is_not(None), TuningRecordRow.error_kind.is_(None), _trusted())
            .order_by(
                TuningRecordRow.model_secs.is_(None),
                TuningRecordRow.model_secs,
                TuningRecordRow.median_secs,
                TuningRecordRow.id,
            )
            .limit(1)
        )
        with self.read_session() as session:
            found = session.execute(stmt).first()
        return None if found is None else record_from_row(found[0], found[1])

    def set_model_secs(self, workload_key: str, target_key: str, secs: Mapping[int, float]) -> None:
        """In-model seconds per call for these records of the pair (one transaction); the pair's other
        records lose theirs, so that every in-model time of a pair comes from the same confirmation."""
        if not all(math.isfinite(s) and s >= 0 for s in secs.values()):
            raise ValueError(f"model seconds must be finite and non-negative, got {dict(secs)}")
        with self.write_session() as session:
            workload_id = session.scalar(select(WorkloadRow.id).where(WorkloadRow.key == workload_key))
            if workload_id is None:
                raise UnknownWorkloadError(workload_key)
            pair = (TuningRecordRow.workload_id == workload_id, TuningRecordRow.target_key == target_key)
            session.execute(update(TuningRecordRow).where(*pair).values(model_secs=None))
            for record_id, value in secs.items():
                # an UPDATE's result is a CursorResult (which has the rowcount); Session.execute is
                # annotated with the base Result whatever the statement
                done = cast(
                    CursorResult[Any],
                    session.execute(
                        update(TuningRecordRow)
                        .where(*pair, TuningRecordRow.id == record_id, TuningRecordRow.error_kind.is_(None))
                        .values(model_secs=float(value))
                    ),
                )
                if done.rowcount != 1:
                    raise StorageError(
                        f"no successful record {record_id} of workload {workload_key[:12]} on {target_key}"
                    )

    def records(self, workload_key: str, target_key: str) -> Sequence[TuningRecord]:
        """Every trusted record of the pair (measured or verified here), failures included, oldest first."""
        stmt = _pair(workload_key, target_key).where(_trusted()).order_by(*_RECORD_ORDER)
        with self.read_session() as session:
            return [record_from_row(row, key) for row, key in session.execute(stmt)]

    def measured_hashes(self, workload_key: str, target_key: str) -> set[str]:
        """trace_hash of every trusted record of the pair, failures included (never measure a trace
        twice; an imported record's claims do not keep the tuner from measuring its trace)."""
        stmt = (
            select(TuningRecordRow.trace_hash)
            .join(TuningRecordRow.workload)
            .where(WorkloadRow.key == workload_key, TuningRecordRow.target_key == target_key, _trusted())
            .distinct()
        )
        with self.read_session() as session:
            return set(session.scalars(stmt))

    def iter_records(self, target_key: str | None = None, *, trusted: bool = False) -> Iterator[TuningRecord]:
        """All records (of one target, or of every target; only trusted ones with `trusted`), oldest
        first, fetched in batches."""
        stmt = records_query(target_key)
        if trusted:
            stmt = stmt.where(_trusted())
        with self.read_session() as session:
            for row, key in session.execute(stmt):
                yield record_from_row(row, key)

    # --- verification of imported records (tuner.verify) ---------------------------------------

    def pending(self, target_key: str, limit: int) -> list[TuningRecord]:
        """Imported records of `target_key` waiting for verification, oldest first."""
        stmt = (
            records_query(target_key)
            .where(TuningRecordRow.verification == "pending")
            .limit(limit)
            .execution_options(yield_per=None)
        )
        with self.read_session() as session:
            return [record_from_row(row, key) for row, key in session.execute(stmt)]

    def count_pending(self, target_key: str | None = None) -> int:
        stmt = (
            select(func.count()).select_from(TuningRecordRow).where(TuningRecordRow.verification == "pending")
        )
        if target_key is not None:
            stmt = stmt.where(TuningRecordRow.target_key == target_key)
        with self.read_session() as session:
            return int(session.scalar(stmt) or 0)

    def set_verified(self, record_id: int, run_secs: Sequence[float]) -> None:
        """A pending record passed verification: trusted from now on, with this machine's timings."""
        values = record_values(
            TuningRecord(workload_key="", target_key="", trace={}, run_secs=tuple(run_secs)), 0
        )
        self._verify(
            record_id,
            verification="verified",
            verify_message="",
            run_secs=values["run_secs"],
            mean_secs=values["mean_secs"],
            median_secs=values["median_secs"],
        )

    def set_rejected(self, record_id: int, message: str) -> None:
        """A pending record failed verification: never used, and says why."""
        self._verify(record_id, verification="rejected", verify_message=message[:2000])

    def _verify(self, record_id: int, **values: Any) -> None:
        with self.write_session() as session:
            session.execute(
                update(TuningRecordRow)
                .where(TuningRecordRow.id == record_id, TuningRecordRow.verification == "pending")
                .values(verified_at=datetime.now(UTC), **values)
            )

    def get_record(self, record_id: int) -> TuningRecord | None:
        stmt = select(TuningRecordRow, WorkloadRow.key).join(TuningRecordRow.workload)
        with self.read_session() as session:
            found = session.execute(stmt.where(TuningRecordRow.id == record_id)).first()
        return None if found is None else record_from_row(found[0], found[1])

    # --- beyond the protocol -------------------------------------------------------------------

    def target_counts(self) -> dict[str, int]:
        """Target key -> how many records it has."""
        stmt = select(TuningRecordRow.target_key, func.count()).group_by(TuningRecordRow.target_key)
        with self.read_session() as session:
            return {key: int(n) for key, n in session.execute(stmt)}

    def listing(
        self,
        target_key: str | None = None,
        workload_keys: Sequence[str] | None = None,
        *,
        best: bool = False,
        limit: int | None = None,
    ) -> list[RecordListing]:
        """Records with their workload's name and op, for people (`temper records list`): of one
        target and/or of some workloads; with `best`, only the record compiles use per (workload,
        target). Ordered by workload, target, then fastest first."""
        stmt = select(TuningRecordRow, WorkloadRow).join(TuningRecordRow.workload)
        if target_key is not None:
            stmt = stmt.where(TuningRecordRow.target_key == target_key)
        if workload_keys is not None:
            stmt = stmt.where(WorkloadRow.key.in_(list(workload_keys)))
        stmt = stmt.order_by(
            WorkloadRow.id,
            TuningRecordRow.target_key,
            TuningRecordRow.median_secs.is_(None),
            TuningRecordRow.median_secs,
            TuningRecordRow.id,
        )
        with self.read_session() as session:
            rows = [_listing(row, workload) for row, workload in session.execute(stmt)]
        if best:  # exactly the record compiles use (SqlDatabase.best) for each pair
            pairs = dict.fromkeys((e.workload_key, e.target_key) for e in rows)
            ids = {r.id for r in (self.best(*pair) for pair in pairs) if r is not None}
            rows = [e for e in rows if e.id in ids]
        return rows if limit is None else rows[:limit]

    def workload(self, key: str) -> WorkloadEntry | None:
        with self.read_session() as session:
            row = session.scalar(select(WorkloadRow).where(WorkloadRow.key == key))
        return None if row is None else workload_from_row(row)

    def workloads(self, target_key: str | None = None) -> list[WorkloadEntry]:
        """Every workload (or those with records on `target_key`), in the order they were added."""
        with self.read_session() as session:
            return [workload_from_row(row) for row in session.scalars(workloads_query(target_key))]


# --- queries and rows <-> records (shared with storage.jsonl) ------------------------------------


def records_query(target_key: str | None = None) -> Select[TuningRecordRow, str]:
    """(row, workload key) of every record, or of one target's, oldest first, fetched in batches."""
    stmt = select(TuningRecordRow, WorkloadRow.key).join(TuningRecordRow.workload)
    if target_key is not None:
        stmt = stmt.where(TuningRecordRow.target_key == target_key)
    return stmt.order_by(*_RECORD_ORDER).execution_options(yield_per=_CHUNK)


def workloads_query(target_key: str | None = None) -> Select[WorkloadRow]:
    """Every workload, or those with records on `target_key`, in the order they were added."""
    stmt = select(WorkloadRow).order_by(WorkloadRow.id)
    if target_key is not None:
        having = select(TuningRecordRow.workload_id).where(TuningRecordRow.target_key == target_key)
        stmt = stmt.where(WorkloadRow.id.in_(having))
    return stmt


def insert_workloads(session: Session, entries: Sequence[WorkloadEntry]) -> int:
    """Insert the workloads whose keys are new, in the session's transaction; returns how many were."""
    if not entries:
        return 0
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        insert: Any = sqlite.insert(WorkloadRow)
    elif dialect == "postgresql":
        insert = postgresql.insert(WorkloadRow)
    else:
        raise StorageError(f"unsupported database {dialect!r} (temper uses SQLite or PostgreSQL)")
    added = 0
    for start in range(0, len(entries), _CHUNK):
        values = [
            {"key": e.key, "description": dict(e.description), "flops": int(e.flops)}
            for e in entries[start : start + _CHUNK]
        ]
        stmt = insert.values(values).on_conflict_do_nothing(index_elements=["key"]).returning(WorkloadRow.id)
        added += len(session.execute(stmt).all())
    return added


def record_values(record: TuningRecord, workload_id: int) -> dict[str, Any]:
    """The column values of a record (mean/median only for successes, so failures never rank)."""
    run_secs = [float(s) for s in record.run_secs]
    if not all(math.isfinite(s) and s >= 0 for s in run_secs):
        raise ValueError(f"run_secs must be finite non-negative seconds, got {list(record.run_secs)}")
    ok = record.error_kind is None and bool(run_secs)
    return {
        "workload_id": workload_id,
        "target_key": record.target_key,
        "trace": dict(record.trace),
        "trace_hash": trace_hash(record.trace),
        "run_secs": run_secs,
        "mean_secs": statistics.fmean(run_secs) if ok else None,
        "median_secs": statistics.median(run_secs) if ok else None,
        "error_kind": None if record.error_kind is None else ErrorKind(record.error_kind).value,
        "error_message": record.error_message,
        "temper_version": record.temper_version,
        "created_at": record.created,
        "verification": record.verification,
    }


@dataclass(frozen=True)
class RecordListing:
    """One record as `temper records list` shows it."""

    id: int
    target_key: str
    workload_key: str
    name: str  # the task name the workload was tuned under (e.g. fused_conv2d_nchwc_relu_3)
    anchor: str | None
    flops: int
    seconds: float | None  # median alone; None for a failure
    model_secs: float | None  # per call inside the compiled model, when confirmation timed it
    verification: str
    error_kind: str | None
    created: datetime

    @property
    def trusted(self) -> bool:
        return self.verification in TRUSTED

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "created": self.created.isoformat(timespec="seconds")}


def _listing(row: TuningRecordRow, workload: WorkloadRow) -> RecordListing:
    description = workload.description if isinstance(workload.description, Mapping) else {}
    return RecordListing(
        row.id,
        row.target_key,
        workload.key,
        str(description.get("name", "")),
        description.get("anchor"),
        workload.flops,
        row.median_secs,
        row.model_secs,
        row.verification,
        row.error_kind,
        row.created_at,
    )


def record_from_row(row: TuningRecordRow, workload_key: str) -> TuningRecord:
    return TuningRecord(
        workload_key=workload_key,
        target_key=row.target_key,
        trace=row.trace,
        run_secs=tuple(float(s) for s in row.run_secs),
        error_kind=None if row.error_kind is None else ErrorKind(row.error_kind),
        error_message=row.error_message,
        temper_version=row.temper_version,
        created=row.created_at,
        id=row.id,
        model_secs=row.model_secs,
        verification=row.verification,
    )


def workload_from_row(row: WorkloadRow) -> WorkloadEntry:
    return WorkloadEntry(key=row.key, description=row.description, flops=row.flops)


def describe_error(exc: BaseException) -> str:
    """The driver's own first line for a database error (no SQL echo, no documentation link)."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip().splitlines()
    return text[0] if text else type(cause).__name__


def _trusted() -> Any:
    return TuningRecordRow.verification.in_(TRUSTED)


def _pair(workload_key: str, target_key: str) -> Select[TuningRecordRow, str]:
    return (
        select(TuningRecordRow, WorkloadRow.key)
        .join(TuningRecordRow.workload)
        .where(WorkloadRow.key == workload_key, TuningRecordRow.target_key == target_key)
    )


@contextmanager
def tuned_schedules(database_url: str | None, *, upgrade: bool = False) -> Iterator[DatabaseSource | None]:
    """The best records of the database at `database_url` as the compiler's schedule source, open
    for the block (None: no database, default schedules): the one way every compile, inspect and
    explain (CLI, worker, API) asks the database for schedules."""
    if database_url is None:
        yield None
        return
    from tuner.apply import DatabaseSource

    with SqlDatabase(database_url, upgrade=upgrade) as db:
        yield DatabaseSource(db)
