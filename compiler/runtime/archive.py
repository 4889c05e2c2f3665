"""Reading and writing the artifact file: one ZIP_STORED archive with a checksummed manifest.

The manifest's sha256 guards the manifest; the manifest's `members` guard every other member.
Together they catch corruption and casual edits, not a forger: an artifact is code (its lib.so runs
in the loading process), so trust must come from its origin. Two ways to know it: compare the whole
file's sha256 with the one the service recorded (the download's header), or have the service sign
its artifacts with a secret key (TEMPER_ARTIFACT_KEY: an HMAC-SHA256 of the manifest, member
`manifest.hmac`) and load with the same key, which refuses an unsigned or re-signed file before
anything in it is loaded.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import io
import json
import os
import secrets
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from compiler.runtime.errors import ArtifactError
from compiler.runtime.plan import Plan, TensorSpec, parse_plan, signature

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MANIFEST_SHA = "manifest.sha256"
MANIFEST_HMAC = "manifest.hmac"
REQUIRED_MEMBERS = ("lib.so", "plan.json", "params.bin")
# Keys the producer must supply; format_version, created and members are filled by the writer.
PRODUCER_KEYS = ("temper_version", "target", "opt_level", "passes", "inputs", "outputs", "kernels")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so equal inputs give byte-equal archives

Source = str | os.PathLike[str] | bytes


@dataclass(frozen=True, slots=True)
class Contents:
    """A verified artifact: manifest, raw members, the parsed plan and the model's signature."""

    manifest: dict[str, Any]
    members: dict[str, bytes]
    plan: Plan
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    sha256: str


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_bytes(value: Any, *, indent: int | None) -> bytes:
    # Key order is kept (plan.json's inputs/outputs order is the model's); it is deterministic anyway.
    try:
        return json.dumps(value, indent=indent, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"cannot encode as JSON: {exc}") from exc


def _check_manifest(manifest: Mapping[str, Any]) -> None:
    missing = [key for key in (*PRODUCER_KEYS, "format_version", "created", "members") if key not in manifest]
    if missing:
        raise ArtifactError(f"manifest.json lacks {', '.join(missing)}")
    if manifest["format_version"] != FORMAT_VERSION:
        raise ArtifactError(
            f"unsupported artifact format version {manifest['format_version']!r} "
            f"(this runtime reads version {FORMAT_VERSION})"
        )
    if not isinstance(manifest["target"], dict):
        raise ArtifactError("manifest.json: target must be an object")
    members = manifest["members"]
    if not isinstance(members, dict) or not all(isinstance(v, str) for v in members.values()):
        raise ArtifactError("manifest.json: members must map member names to sha256 hex digests")
    absent = [name for name in REQUIRED_MEMBERS if name not in members]
    if absent:
        raise ArtifactError(f"manifest.json does not list the required member(s) {', '.join(absent)}")
    if {MANIFEST, MANIFEST_SHA} & set(members):
        raise ArtifactError("manifest.json must not list itself among its members")


def _contents(manifest: dict[str, Any], members: dict[str, bytes], sha256: str) -> Contents:
    _check_manifest(manifest)
    try:
        raw_plan = json.loads(members["plan.json"])
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ArtifactError(f"plan.json is not valid JSON: {exc}") from exc
    plan = parse_plan(raw_plan, len(members["params.bin"]))
    inputs, outputs = signature(manifest, plan)
    return Contents(manifest, members, plan, inputs, outputs, sha256)


def artifact_bytes(
    *,
    manifest: Mapping[str, Any],
    library: bytes,
    plan: Mapping[str, Any],
    params: bytes,
    extra: Mapping[str, bytes] | None = None,
) -> bytes:
    """Package an artifact in memory; `extra` members (e.g. IR dumps) are listed and checksummed too.

    The manifest is copied, never mutated; format_version, created (unless given) and members are filled.
    Raises ArtifactError if the parts are inconsistent, so a bad artifact is never written.
    """
    missing = [key for key in PRODUCER_KEYS if key not in manifest]
    if missing:
        raise ArtifactError(f"cannot write artifact: the manifest lacks {', '.join(missing)}")
    if manifest.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
        raise ArtifactError(f"cannot write artifact format version {manifest['format_version']!r}")
    plan_bytes = _json_bytes(plan, indent=None)
    members = {"lib.so": bytes(library), "plan.json": plan_bytes, "params.bin": bytes(params)}
    for name, data in (extra or {}).items():
        if name in members or name in (MANIFEST, MANIFEST_SHA, MANIFEST_HMAC):
            raise ArtifactError(f"cannot write artifact: extra member {name!r} clashes with a format member")
        members[name] = bytes(data)

    full = copy.deepcopy(dict(manifest))
    full["format_version"] = FORMAT_VERSION
    full.setdefault("created", datetime.now(UTC).isoformat(timespec="seconds"))
    full["members"] = {name: _sha256(data) for name, data in members.items()}
    manifest_bytes = _json_bytes(full, indent=2)
    # Validate exactly what a reader will see (JSON round trip turns tuples into lists).
    _contents(json.loads(manifest_bytes), members, "")

    return _zip({MANIFEST: manifest_bytes, MANIFEST_SHA: _sha256(manifest_bytes).encode() + b"\n", **members})


def _zip(entries: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def _signature(key: bytes, manifest_bytes: bytes) -> bytes:
    return hmac.new(key, manifest_bytes, hashlib.sha256).hexdigest().encode() + b"\n"


def sign_artifact(data: bytes, key: bytes) -> bytes:
    """The artifact (verified first) with its manifest signed by `key` (replacing any signature)."""
    if not key:
        raise ArtifactError("cannot sign an artifact with an empty key")
    read_contents(data)
    members = _unzip(data)
    members.pop(MANIFEST_HMAC, None)
    return _zip({**members, MANIFEST_HMAC: _signature(key, members[MANIFEST])})


def create_temp(directory: str, prefix: str = ".artifact-") -> tuple[int, str]:
    """A new, empty temporary file in `directory` (beside the target, so the rename is atomic).

    It is created with mode 0666, so the kernel applies the umask (or the directory's default ACL) as
    it does to any file the user writes, and the rename keeps that mode. `tempfile.mkstemp` asks for
    0600 whatever the umask. Reading the umask to chmod afterwards would be worse: `os.umask`
    set-and-restore changes it for the whole process (a thread creating a file meanwhile gets the wrong
    mode), /proc/self/status is Linux-only, and neither sees a default ACL. O_EXCL makes the name ours
    (and refuses a symlink planted under it); with 64 random bits a clash is a freak, so a few tries do.
    Returns (descriptor, path); the descriptor is not inherited by child processes (PEP 446).
    """
    for _ in range(8):
        tmp = os.path.join(directory, f"{prefix}{secrets.token_hex(8)}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temporary file in {directory!r}: every name tried exists")


def write_artifact(
    path: str | os.PathLike[str],
    *,
    manifest: Mapping[str, Any],
    library: bytes,
    plan: Mapping[str, Any],
    params: bytes,
    extra: Mapping[str, bytes] | None = None,
) -> str:
    """Write an artifact file atomically (temp file + rename); return the sha256 of the whole file.

    The file gets the mode of any other file the user writes (0666 less the umask, see `create_temp`).
    """
    data = artifact_bytes(manifest=manifest, library=library, plan=plan, params=params, extra=extra)
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, tmp = create_temp(directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return _sha256(data)


def _read_source(source: Source) -> bytes:
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)
    try:
        with open(source, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ArtifactError(f"cannot read artifact {os.fspath(source)!r}: {exc.strerror or exc}") from exc


def _unzip(data: bytes) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
            if len(names) != len(set(names)):
                raise ArtifactError("the artifact holds a member twice: it was modified")
            for info in archive.infolist():  # stored members only: nothing inflates past the file
                if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(data):
                    raise ArtifactError(
                        f"artifact member {info.filename} is compressed or larger than the file: "
                        "temper artifacts store their members as they are; it was modified"
                    )
            members = {}
            for name in names:
                try:
                    members[name] = archive.read(name)
                except zipfile.BadZipFile as exc:
                    raise ArtifactError(
                        f"artifact member {name} is corrupt ({exc}): the file is corrupt or was modified"
                    ) from exc
            return members
    except ArtifactError:
        raise
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,
        ValueError,
        NotImplementedError,
        RuntimeError,
    ) as exc:
        raise ArtifactError(f"not a temper artifact, or a truncated one: {exc}") from exc


def read_contents(source: Source, key: bytes | None = None) -> Contents:
    """Read and verify an artifact completely (checksums, format version, plan vs manifest); with
    `key`, first check that the manifest is signed with it (see the module docstring)."""
    data = _read_source(source)
    members = _unzip(data)
    for name in (MANIFEST, MANIFEST_SHA):
        if name not in members:
            raise ArtifactError(f"not a temper artifact: member {name} is missing")
    signature = members.pop(MANIFEST_HMAC, None)
    if key is not None:
        if signature is None:
            raise ArtifactError("the artifact is not signed; a signed one was required")
        if not hmac.compare_digest(signature, _signature(key, members[MANIFEST])):
            raise ArtifactError("the artifact's signature does not match the key: it was not signed by it")
    manifest_bytes = members.pop(MANIFEST)
    recorded = members.pop(MANIFEST_SHA).decode("ascii", "replace").strip()
    if _sha256(manifest_bytes) != recorded:
        raise ArtifactError(
            "artifact member manifest.json fails its checksum: the file is corrupt or was modified"
        )
    try:
        manifest = json.loads(manifest_bytes)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ArtifactError(f"manifest.json is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict):
        raise ArtifactError("manifest.json is not a JSON object")
    _check_manifest(manifest)
    listed = manifest["members"]
    for name, digest in listed.items():
        if name not in members:
            raise ArtifactError(f"artifact member {name} is missing: the file is corrupt or was modified")
        if _sha256(members[name]) != digest:
            raise ArtifactError(
                f"artifact member {name} fails its checksum: the file is corrupt or was modified"
            )
    unlisted = sorted(set(members) - set(listed))
    if unlisted:
        raise ArtifactError(f"artifact holds unlisted member(s) {', '.join(unlisted)}: it was modified")
    return _contents(manifest, members, _sha256(data))


def read_artifact(source: Source) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Verify an artifact and return (manifest, members); members exclude the two manifest files."""
    contents = read_contents(source)
    return contents.manifest, contents.members
