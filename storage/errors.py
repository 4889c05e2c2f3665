"""The errors storage raises: each is the user's (or operator's) to fix and reads as one line."""

from __future__ import annotations


class StorageError(Exception):
    """A database or record-file problem: unreachable database, unknown workload, bad file."""


class DatabaseUnavailableError(StorageError):
    """The database cannot be opened: bad URL, server down, unwritable file, failed migration."""


class UnknownWorkloadError(StorageError, LookupError):
    """A record names a workload that was never committed (commit_workload must come first)."""

    def __init__(self, workload_key: str) -> None:
        super().__init__(f"unknown workload {workload_key!r}: commit the workload before its records")
        self.workload_key = workload_key


class RecordFileError(StorageError):
    """A records file that cannot be imported; `line` is the 1-based line number at fault."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}, line {line}: {reason}")
        self.source = source
        self.line = line
        self.reason = reason
