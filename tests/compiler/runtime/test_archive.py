"""The artifact file: round trip, checksums, and every way a file can be damaged or inconsistent."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import zipfile
from pathlib import Path

import pytest

from compiler.runtime import FORMAT_VERSION, ArtifactError, artifact_bytes, read_artifact, write_artifact
from tests.compiler.runtime import tiny


@pytest.fixture
def parts() -> dict:
    return tiny.parts(tiny.library())


@pytest.fixture
def artifact(tmp_path: Path, parts: dict) -> Path:
    path = tmp_path / "tiny.temper"
    write_artifact(path, **parts)
    return path


def rezip(source: Path, target: Path, replace: dict[str, bytes]) -> Path:
    """Copy an archive, swapping the bytes of some members (what an editor or bit rot would do)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for name in old.namelist():
            new.writestr(name, replace.get(name, old.read(name)))
    return target


def test_round_trip_fills_manifest_and_returns_file_hash(tmp_path: Path, parts: dict) -> None:
    path = tmp_path / "a.temper"
    digest = write_artifact(path, **parts)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()

    manifest, members = read_artifact(path)
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["created"]
    assert manifest["kernels"] == parts["manifest"]["kernels"]
    assert set(members) == {"lib.so", "plan.json", "params.bin"}
    assert members["lib.so"] == parts["library"]
    assert members["params.bin"] == parts["params"]
    assert json.loads(members["plan.json"]) == parts["plan"]
    for name, data in members.items():
        assert manifest["members"][name] == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    ("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)], ids=["022", "077", "002"]
)
def test_artifact_file_mode_follows_the_umask(tmp_path: Path, parts: dict, umask: int, mode: int) -> None:
    path = tmp_path / "a.temper"
    path.write_bytes(b"an older file")
    path.chmod(0o600)  # replaced, not rewritten in place: the new file's mode comes from the umask
    old = os.umask(umask)
    try:
        write_artifact(path, **parts)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert [p.name for p in tmp_path.iterdir()] == ["a.temper"]  # no temporary file left behind
    read_artifact(path)


def test_archive_is_stored_and_deterministic(parts: dict) -> None:
    parts["manifest"]["created"] = "2024-01-01T00:00:00+00:00"
    first = artifact_bytes(**parts)
    assert first == artifact_bytes(**parts)
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
        assert archive.namelist()[:2] == ["manifest.json", "manifest.sha256"]


def test_writer_does_not_mutate_the_callers_manifest(parts: dict) -> None:
    before = json.dumps(parts["manifest"], sort_keys=True)
    artifact_bytes(**parts)
    assert json.dumps(parts["manifest"], sort_keys=True) == before


def test_extra_members_are_checksummed(tmp_path: Path, parts: dict) -> None:
    path = tmp_path / "a.temper"
    write_artifact(path, **parts, extra={"ir/graph.txt": b"graph"})
    _, members = read_artifact(path)
    assert members["ir/graph.txt"] == b"graph"
    bad = rezip(path, tmp_path / "b.temper", {"ir/graph.txt": b"GRAPH"})
    with pytest.raises(ArtifactError, match=r"ir/graph\.txt fails its checksum"):
        read_artifact(bad)


def test_reads_from_bytes(artifact: Path) -> None:
    manifest, _ = read_artifact(artifact.read_bytes())
    assert manifest["format_version"] == FORMAT_VERSION


@pytest.mark.parametrize("member", ["lib.so", "plan.json", "params.bin"])
def test_modified_member_fails_its_checksum(tmp_path: Path, artifact: Path, member: str) -> None:
    with zipfile.ZipFile(artifact) as archive:
        data = bytearray(archive.read(member))
    data[len(data) // 2] ^= 0xFF
    bad = rezip(artifact, tmp_path / "bad.temper", {member: bytes(data)})
    with pytest.raises(
        ArtifactError, match=rf"artifact member {member} fails its checksum: the file is corrupt"
    ):
        read_artifact(bad)


def test_flipped_byte_in_file_is_detected(tmp_path: Path, artifact: Path) -> None:
    data = bytearray(artifact.read_bytes())
    with zipfile.ZipFile(artifact) as archive:
        info = archive.getinfo("lib.so")
    data[info.header_offset + 30 + len("lib.so") + 100] ^= 0x01  # inside lib.so's stored bytes
    bad = tmp_path / "bad.temper"
    bad.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=r"lib\.so"):
        read_artifact(bad)


def test_tampered_manifest_is_detected(tmp_path: Path, artifact: Path) -> None:
    with zipfile.ZipFile(artifact) as archive:
        manifest = json.loads(archive.read("manifest.json"))
    manifest["opt_level"] = 3
    bad = rezip(artifact, tmp_path / "bad.temper", {"manifest.json": json.dumps(manifest).encode()})
    with pytest.raises(ArtifactError, match=r"manifest\.json fails its checksum"):
        read_artifact(bad)


def test_manifest_rehashed_after_editing_members_list_still_fails(tmp_path: Path, artifact: Path) -> None:
    with zipfile.ZipFile(artifact) as archive:
        manifest = json.loads(archive.read("manifest.json"))
    manifest["members"]["params.bin"] = "0" * 64
    body = json.dumps(manifest).encode()
    bad = rezip(
        artifact,
        tmp_path / "bad.temper",
        {"manifest.json": body, "manifest.sha256": hashlib.sha256(body).hexdigest().encode()},
    )
    with pytest.raises(ArtifactError, match=r"params\.bin fails its checksum"):
        read_artifact(bad)


def test_unknown_format_version_is_refused(tmp_path: Path, artifact: Path) -> None:
    with zipfile.ZipFile(artifact) as archive:
        manifest = json.loads(archive.read("manifest.json"))
    manifest["format_version"] = 99
    body = json.dumps(manifest).encode()
    bad = rezip(
        artifact,
        tmp_path / "bad.temper",
        {"manifest.json": body, "manifest.sha256": hashlib.sha256(body).hexdigest().encode()},
    )
    with pytest.raises(ArtifactError, match="unsupported artifact format version 99"):
        read_artifact(bad)


def test_missing_member_is_refused(tmp_path: Path, artifact: Path) -> None:
    bad = tmp_path / "bad.temper"
    with zipfile.ZipFile(artifact) as old, zipfile.ZipFile(bad, "w") as new:
        for name in old.namelist():
            if name != "params.bin":
                new.writestr(name, old.read(name))
    with pytest.raises(ArtifactError, match=r"params\.bin is missing"):
        read_artifact(bad)


def test_unlisted_member_is_refused(tmp_path: Path, artifact: Path) -> None:
    bad = tmp_path / "bad.temper"
    bad.write_bytes(artifact.read_bytes())
    with zipfile.ZipFile(bad, "a") as archive:
        archive.writestr("evil.so", b"\x7fELF")
    with pytest.raises(ArtifactError, match="unlisted member"):
        read_artifact(bad)


@pytest.mark.parametrize("keep", [0, 10, 200, -30])
def test_truncated_file_is_refused(tmp_path: Path, artifact: Path, keep: int) -> None:
    bad = tmp_path / "bad.temper"
    bad.write_bytes(artifact.read_bytes()[:keep])
    with pytest.raises(ArtifactError):
        read_artifact(bad)


def test_not_a_zip_and_missing_file_are_artifact_errors(tmp_path: Path) -> None:
    text = tmp_path / "model.onnx"
    text.write_text("this is not an artifact")
    with pytest.raises(ArtifactError, match="not a temper artifact"):
        read_artifact(text)
    with pytest.raises(ArtifactError, match="cannot read artifact"):
        read_artifact(tmp_path / "absent.temper")
    plain_zip = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain_zip, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(ArtifactError, match=r"manifest\.json is missing"):
        read_artifact(plain_zip)


# ---- signatures and what a forger can do ------------------------------------------------------------


def _forged(artifact: Path, tmp_path: Path, library: bytes) -> Path:
    """The artifact with its library replaced and every checksum recomputed (a forger's edit)."""
    with zipfile.ZipFile(artifact) as archive:
        manifest = json.loads(archive.read("manifest.json"))
    manifest["members"]["lib.so"] = hashlib.sha256(library).hexdigest()
    body = json.dumps(manifest).encode()
    sha = hashlib.sha256(body).hexdigest().encode()
    return rezip(
        artifact,
        tmp_path / "forged.temper",
        {"lib.so": library, "manifest.json": body, "manifest.sha256": sha},
    )


def test_a_signed_artifact_loads_only_with_its_key(tmp_path: Path, artifact: Path) -> None:
    from compiler.runtime import load, read_contents, sign_artifact

    signed = sign_artifact(artifact.read_bytes(), b"server secret")
    assert read_contents(signed, b"server secret").manifest == read_contents(artifact).manifest
    load(signed, key=b"server secret")
    read_contents(signed)  # without a key the signature is not asked for
    with pytest.raises(ArtifactError, match="does not match the key"):
        read_contents(signed, b"another key")
    with pytest.raises(ArtifactError, match="not signed"):
        load(artifact, key=b"server secret")
    resigned = sign_artifact(signed, b"attacker")
    with pytest.raises(ArtifactError, match="does not match"):
        read_contents(resigned, b"server secret")


def test_a_forged_library_is_refused_before_it_is_loaded(tmp_path: Path, artifact: Path) -> None:
    from compiler.runtime import load, sign_artifact

    signed = tmp_path / "signed.temper"
    signed.write_bytes(sign_artifact(artifact.read_bytes(), b"k"))
    forged = _forged(signed, tmp_path, b"\x7fELF not a library at all")
    with pytest.raises(ArtifactError, match="does not match the key"):  # not "cannot load lib.so"
        load(forged, key=b"k")


def test_compressed_members_are_refused_unread(tmp_path: Path, artifact: Path) -> None:
    bomb = tmp_path / "bomb.temper"
    with zipfile.ZipFile(artifact) as old, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as new:
        for name in old.namelist():
            new.writestr(name, old.read(name))
        new.writestr("zeros.bin", b"\0" * (64 << 20))  # inflates far past the file's size
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(ArtifactError, match="compressed or larger than the file"):
        read_artifact(bomb)
