"""A content-addressed blob store on disk: uploaded models and compiled artifacts.

A blob's key is the sha256 of its bytes (64 lowercase hex digits), so storing the same bytes twice
keeps one file and a key proves what it names. Files live at `root/ab/abcdef...`. Writes go to a
temporary file in `root/tmp`, are flushed to disk and then renamed into place, so a reader never
sees half a blob and a crash leaves at most a stray temporary file. Keys are validated before they
touch the file system: a key cannot name a path outside the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

from storage.errors import StorageError

_KEY = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1024 * 1024


class _Digest(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...


class BlobError(StorageError):
    """A blob that cannot be stored or read."""


class InvalidBlobKeyError(BlobError, ValueError):
    """Not a blob key (64 lowercase hex digits)."""


class BlobNotFoundError(BlobError, LookupError):
    """No blob with this key in the store."""

    def __init__(self, key: str) -> None:
        super().__init__(f"no blob {key}")
        self.key = key


class BlobTooLargeError(BlobError):
    """A stream longer than the limit it was stored with (nothing was stored)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"blob exceeds the limit of {limit} bytes")
        self.limit = limit


def check_key(key: str) -> str:
    """`key` when it is a valid blob key; InvalidBlobKeyError otherwise."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise InvalidBlobKeyError(f"{key!r} is not a blob key (64 lowercase hex digits)")
    return key


class BlobStore:
    """Blobs under `root` (created on first write), addressed by the sha256 of their content."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    # --- writing -------------------------------------------------------------------------------

    def put_bytes(self, data: bytes) -> str:
        """Store `data`; returns its key (its sha256)."""
        return self._store(lambda out, digest: _copy(memoryview(data), out, digest))

    def put_file(self, path: str | os.PathLike[str]) -> str:
        """Store a copy of the file at `path`; returns its key."""
        with open(path, "rb") as src:
            return self.put_stream(src)

    def put_stream(self, stream: BinaryIO, max_bytes: int | None = None) -> str:
        """Store what `stream` reads until EOF; with `max_bytes`, a longer stream raises
        BlobTooLargeError and stores nothing."""

        def write(out: BinaryIO, digest: _Digest) -> None:
            total = 0
            while chunk := stream.read(_CHUNK):
                total += len(chunk)
                if max_bytes is not None and total > max_bytes:
                    raise BlobTooLargeError(max_bytes)
                digest.update(chunk)
                out.write(chunk)

        return self._store(write)

    def delete(self, key: str) -> bool:
        """Remove a blob; False when there was none. Callers must know no row refers to it."""
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        return True

    # --- reading -------------------------------------------------------------------------------

    def path(self, key: str) -> Path:
        """Where the blob with this key lives (whether or not it exists)."""
        check_key(key)
        return self.root / key[:2] / key

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def size(self, key: str) -> int:
        try:
            return self.path(key).stat().st_size
        except FileNotFoundError:
            raise BlobNotFoundError(key) from None

    def open(self, key: str) -> BinaryIO:
        """The blob opened for binary reading (the caller closes it)."""
        try:
            return open(self.path(key), "rb")
        except FileNotFoundError:
            raise BlobNotFoundError(key) from None

    def read_bytes(self, key: str) -> bytes:
        with self.open(key) as f:
            return f.read()

    # --- internals -----------------------------------------------------------------------------

    def _store(self, write: Callable[[BinaryIO, _Digest], None]) -> str:
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=tmp_dir, prefix="blob-")
        tmp = Path(tmp_name)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                write(out, digest)
                out.flush()
                os.fsync(out.fileno())
            key = digest.hexdigest()
            final = self.path(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.is_file() and final.stat().st_size == tmp.stat().st_size:
                return key  # the same bytes are already stored
            os.chmod(tmp, 0o644)
            os.replace(tmp, final)
            _fsync_dir(final.parent)
            return key
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def _copy(data: memoryview, out: BinaryIO, digest: _Digest) -> None:
    digest.update(data)
    out.write(data)


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable (the directory entry is what a crash could lose)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = [
    "BlobError",
    "BlobNotFoundError",
    "BlobStore",
    "BlobTooLargeError",
    "InvalidBlobKeyError",
    "check_key",
]
