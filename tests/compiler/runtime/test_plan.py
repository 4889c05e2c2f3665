"""The writer refuses plans the loader could not run safely, with a message naming the problem."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from compiler.runtime import ArtifactError, artifact_bytes
from tests.compiler.runtime import tiny


def _buffer(parts: dict, buf_id: int) -> dict:
    return next(b for b in parts["plan"]["buffers"] if b["id"] == buf_id)


# Each case: (id, an edit of the tiny artifact's parts, what the error message must say).
CASES: list[tuple[str, Callable[[dict], Any], str]] = [
    ("unaligned param", lambda p: _buffer(p, 2).update(offset=32), "not 64-byte aligned"),
    ("param past params.bin", lambda p: _buffer(p, 2).update(shape=[20]), "params.bin holds 72"),
    ("workspace overflow", lambda p: p["plan"].update(workspace_bytes=8), "workspace_bytes is 8"),
    ("alias too big", lambda p: _buffer(p, 4).update(shape=[4, 2]), "alias"),
    ("alias of nothing", lambda p: _buffer(p, 4).update(alias_of=42), "unknown buffer 42"),
    (
        "alias cycle",
        lambda p: p["plan"]["buffers"].append(
            {"id": 9, "shape": [1], "dtype": "float32", "kind": "alias", "alias_of": 9}
        ),
        "alias cycle",
    ),
    ("duplicate id", lambda p: _buffer(p, 5).update(id=4), "used twice"),
    ("bad dtype", lambda p: _buffer(p, 5).update(dtype="complex64"), "dtype 'complex64'"),
    ("negative dim", lambda p: _buffer(p, 5).update(shape=[-1, 2]), "non-negative integers"),
    ("bad kind", lambda p: _buffer(p, 5).update(kind="scratch"), "kind 'scratch'"),
    ("param without offset", lambda p: _buffer(p, 1).pop("offset"), "needs an offset"),
    (
        "step with unknown buffer",
        lambda p: p["plan"]["steps"][0].update(args=[0, 1, 77]),
        "unknown buffer 77",
    ),
    ("step without kernel", lambda p: p["plan"]["steps"][0].pop("kernel"), "needs a kernel symbol"),
    ("input not an input buffer", lambda p: p["plan"]["inputs"].update(x=5), "of kind output"),
    ("unnamed input buffer", lambda p: p["plan"]["inputs"].clear(), "named exactly once"),
    ("output of nothing", lambda p: p["plan"]["outputs"].update(y=99), "unknown buffer 99"),
    ("kernel not in manifest", lambda p: p["manifest"]["kernels"].pop(0), "does not list"),
    ("manifest shape differs", lambda p: p["manifest"]["inputs"][0].update(shape=[6]), r"float32\[6\]"),
    ("manifest lacks an output", lambda p: p["manifest"]["outputs"].pop(), "do not match plan.json"),
    ("manifest names unknown input", lambda p: p["manifest"]["inputs"][0].update(name="q"), "no such input"),
    ("manifest lacks target", lambda p: p["manifest"].pop("target"), "lacks target"),
    ("wrong format version", lambda p: p["manifest"].update(format_version=2), "format version 2"),
    ("not JSON-encodable", lambda p: p["plan"].update(extra=object()), "cannot encode as JSON"),
]


@pytest.mark.parametrize(("case", "edit", "message"), CASES, ids=[c[0] for c in CASES])
def test_inconsistent_artifact_is_never_written(case: str, edit: Callable[[dict], Any], message: str) -> None:
    parts = tiny.parts(tiny.library())
    edit(parts)
    with pytest.raises(ArtifactError, match=message):
        artifact_bytes(**parts)


def test_extra_member_may_not_shadow_format_members() -> None:
    parts = tiny.parts(tiny.library())
    with pytest.raises(ArtifactError, match="clashes"):
        artifact_bytes(**parts, extra={"lib.so": b""})
