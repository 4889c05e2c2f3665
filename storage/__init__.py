"""temper's persistence: database tables, tuning records and their JSON-lines export.

`SqlDatabase(url)` is the tuner's record database (tuner.records.Database) on SQLite or
PostgreSQL; `default_url(data_dir)` is the embedded SQLite file; `upgrade(url)` migrates a
database to this version's schema; `export_records` / `import_records` move records between
deployments.
"""

from storage.errors import (
    DatabaseUnavailableError,
    RecordFileError,
    StorageError,
    UnknownWorkloadError,
)
from storage.jsonl import ExportSummary, ImportSummary, export_records, import_records
from storage.migrations import current_revision, head_revision, upgrade
from storage.records import SqlDatabase, tuned_schedules
from storage.session import default_data_dir, default_url, display_url, make_engine

__all__ = [
    "DatabaseUnavailableError",
    "ExportSummary",
    "ImportSummary",
    "RecordFileError",
    "SqlDatabase",
    "StorageError",
    "UnknownWorkloadError",
    "current_revision",
    "default_data_dir",
    "default_url",
    "display_url",
    "export_records",
    "head_revision",
    "import_records",
    "make_engine",
    "tuned_schedules",
    "upgrade",
]
