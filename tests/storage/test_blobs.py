"""The content-addressed blob store: keys are sha256, writes are atomic, keys cannot escape the root."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from storage.blobs import BlobNotFoundError, BlobStore, BlobTooLargeError, InvalidBlobKeyError


def test_put_bytes_is_content_addressed_and_reads_back(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = b"model bytes \x00\xff" * 1000
    key = store.put_bytes(data)
    assert key == hashlib.sha256(data).hexdigest()
    assert store.put_bytes(data) == key  # the same bytes: the same key, one file
    assert store.exists(key) and store.size(key) == len(data)
    with store.open(key) as f:
        assert f.read() == data
    assert store.path(key).parent.name == key[:2]
    assert list((tmp_path / "blobs" / "tmp").iterdir()) == []  # no temporary file left behind


def test_put_file_and_stream(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    src = tmp_path / "artifact.bin"
    src.write_bytes(bytes(range(256)) * 5000)
    key = store.put_file(src)
    assert store.read_bytes(key) == src.read_bytes()
    assert store.put_stream(io.BytesIO(src.read_bytes())) == key
    empty = store.put_bytes(b"")
    assert store.size(empty) == 0


def test_stream_over_the_limit_stores_nothing(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    with pytest.raises(BlobTooLargeError, match="limit of 10 bytes"):
        store.put_stream(io.BytesIO(b"x" * 11), max_bytes=10)
    assert not store.exists(hashlib.sha256(b"x" * 11).hexdigest())
    assert list((tmp_path / "blobs" / "tmp").iterdir()) == []
    assert store.read_bytes(store.put_stream(io.BytesIO(b"x" * 10), max_bytes=10)) == b"x" * 10


@pytest.mark.parametrize(
    "key", ["../../etc/passwd", "a" * 63, "A" * 64, "g" * 64, "/" + "a" * 63, "", "a" * 64 + "/"]
)
def test_invalid_keys_are_refused(tmp_path: Path, key: str) -> None:
    store = BlobStore(tmp_path / "blobs")
    for call in (store.path, store.exists, store.size, store.open, store.delete):
        with pytest.raises(InvalidBlobKeyError):
            call(key)


def test_missing_blob(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    key = "0" * 64
    assert not store.exists(key)
    with pytest.raises(BlobNotFoundError):
        store.open(key)
    with pytest.raises(BlobNotFoundError):
        store.size(key)
    assert store.delete(key) is False
    key = store.put_bytes(b"abc")
    assert store.delete(key) is True and not store.exists(key)
