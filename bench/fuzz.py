"""Fuzzing a live temper server: mutated real models and mutated JSON bodies, checking that every
answer is a 2xx or a 4xx (never a 5xx, never a dead server) and that nothing is stored on a refusal.

    python -m bench.fuzz --cases 8000 [--seed 0] [--json OUT]      # a long run against a fresh server

Models are real architectures (tests/models/builders.py) mutated the way a careless exporter or an
attacker would: protobuf fields of every kind set to hostile values (dims, dtypes, names, opsets,
attribute values, external data that names the server's files), graph structure changed (nodes
dropped, duplicated, rewired into cycles), bytes flipped and truncated, strings made invalid UTF-8.
JSON bodies of every route are mutated the same way (types, nesting, sizes, unknown ids). The
bounded run on every CI is tests/bench/test_fuzz.py; its counts and the long run's go in the notes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

INTS = [
    -(1 << 63),
    -(1 << 31),
    -1000,
    -2,
    -1,
    0,
    1,
    2,
    3,
    7,
    255,
    999,
    1 << 20,
    1 << 31,
    (1 << 40) + 1,
    (1 << 62),
]
STRINGS = [
    "",
    "x",
    "../../../etc/passwd",
    "/etc/passwd",
    "temper.sqlite",
    "\u202e",
    "a" * 5000,
    "ünï",
    "\t\n",
]
FLOATS = [0.0, -0.0, 1e-45, -1.0, 3.4e38, 1e308, float("inf"), float("-inf"), float("nan")]


# ---- model mutations ----------------------------------------------------------------------------------


def _fields(model: onnx.ModelProto) -> list[tuple[Message, FieldDescriptor]]:
    """Every (message, set field) pair of the model, iteratively."""
    out: list[tuple[Message, FieldDescriptor]] = []
    stack: list[Message] = [model]
    while stack:
        message = stack.pop()
        for fd, value in message.ListFields():
            out.append((message, fd))
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                stack.extend(value if fd.is_repeated else [value])
    return out


def _hostile_value(fd: FieldDescriptor, rng: random.Random) -> Any:
    if fd.type == FieldDescriptor.TYPE_STRING:
        return rng.choice(STRINGS)
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return rng.choice([b"", b"\x00" * rng.randint(1, 64), bytes(rng.randrange(256) for _ in range(17))])
    if fd.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice(FLOATS)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return rng.choice([0, 1, 2, 7, 99, -1])
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    value = rng.choice(INTS)
    if fd.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        value = abs(value) % (1 << 32 if fd.type == FieldDescriptor.TYPE_UINT32 else 1 << 64)
    if fd.type in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        value = max(-(1 << 31), min((1 << 31) - 1, value))
    return value


def mutate_field(model: onnx.ModelProto, rng: random.Random) -> str:
    """Set one scalar field somewhere in the model to a hostile value (or drop/duplicate an element)."""
    candidates = [(m, fd) for m, fd in _fields(model) if fd.type != FieldDescriptor.TYPE_MESSAGE]
    message, fd = rng.choice(candidates)
    what = f"{type(message).__name__}.{fd.name}"
    try:
        if fd.is_repeated:
            values = getattr(message, fd.name)
            choice = rng.random()
            if choice < 0.3 and len(values):
                del values[rng.randrange(len(values))]
                return f"drop one {what}"
            if choice < 0.5 and len(values):
                values.append(values[rng.randrange(len(values))])
                return f"duplicate one {what}"
            if len(values):
                values[rng.randrange(len(values))] = _hostile_value(fd, rng)
            else:
                values.append(_hostile_value(fd, rng))
        else:
            setattr(message, fd.name, _hostile_value(fd, rng))
    except (ValueError, TypeError):
        return f"(no change to {what})"
    return f"set {what}"


def mutate_structure(model: onnx.ModelProto, rng: random.Random) -> str:
    nodes = model.graph.node
    if not nodes:
        return "(empty graph)"
    k = rng.randrange(len(nodes))
    choice = rng.randrange(6)
    if choice == 0:
        del nodes[k]
        return "drop a node"
    if choice == 1:
        nodes.append(nodes[k])
        return "duplicate a node"
    if choice == 2 and nodes[k].input and nodes[k].output:
        nodes[k].input[0] = nodes[k].output[0]
        return "a node reads its own output"
    if choice == 3 and len(nodes) > 1:
        j = rng.randrange(len(nodes))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(nodes[k])
        b.CopyFrom(nodes[j])
        nodes[k].CopyFrom(b)
        nodes[j].CopyFrom(a)
        return "swap two nodes"
    if choice == 4:
        t = onnx.TensorProto(name="stolen", data_type=onnx.TensorProto.UINT8, dims=[16])
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (
            ("location", rng.choice(["temper.sqlite", "../data/temper.sqlite", "pyproject.toml"])),
        ):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        if rng.random() < 0.5:
            model.graph.initializer.append(t)
        else:
            nodes.append(onnx.helper.make_node("Constant", [], ["stolen_c"], value=t))
        return "external data naming the server's files"
    opset = model.opset_import[0] if model.opset_import else model.opset_import.add()
    opset.version = rng.choice([1, 6, 7, 9, 11, 12, 22, 23, 99, 1 << 30])
    return "opset version"


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    choice = rng.randrange(4)
    if choice == 0:
        return data[: rng.randrange(len(data))], "truncate"
    b = bytearray(data)
    if choice == 1:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), "flip bytes"
    if choice == 2:
        at = rng.randrange(len(b))
        return bytes(b[:at] + b"\xff\xfe\xc3\x28" + b[at:]), "insert invalid UTF-8"
    return data + data[: rng.randrange(1, 64)], "append garbage"


def mutated_models(seeds: list[bytes], rng: random.Random) -> Iterator[tuple[bytes, str]]:
    while True:
        base = onnx.ModelProto()
        base.ParseFromString(rng.choice(seeds))
        steps = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            steps.append(mutate_field(base, rng) if rng.random() < 0.7 else mutate_structure(base, rng))
        data = base.SerializeToString()
        if rng.random() < 0.15:
            data, step = mutate_bytes(data, rng)
            steps.append(step)
        yield data, "; ".join(steps)


# ---- JSON mutations -------------------------------------------------------------------------------


def _hostile_json(rng: random.Random, depth: int = 0) -> Any:
    kinds = [lambda: rng.choice(INTS), lambda: rng.choice(STRINGS), lambda: None, lambda: rng.random() < 0.5]
    kinds += [lambda: rng.choice([1.5, -0.0, 1e300]), lambda: "[" * 20_000]
    if depth < 3:
        kinds += [lambda: [_hostile_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]]
        kinds += [
            lambda: {rng.choice(STRINGS[:5]): _hostile_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}
        ]
    return rng.choice(kinds)()


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def mutated_bodies(model_id: str, rng: random.Random) -> Iterator[tuple[str, str, dict[str, Any], str]]:
    """(method, path, httpx request kwargs, what) for the JSON and form routes."""
    fields = {
        "/v1/compilations": ["model_id", "shapes", "target", "opt_level", "use_tuned", "overrides"],
        "/v1/tuning-jobs": [
            "model_id",
            "shapes",
            "target",
            "opt_level",
            "trials",
            "time_budget_s",
            "batch",
            "seed",
        ],
    }
    while True:
        choice = rng.randrange(5)
        if choice < 3:
            path = rng.choice(list(fields))
            body: dict[str, Any] = {"model_id": model_id}
            name = rng.choice(fields[path])
            body[name] = _hostile_json(rng)
            if rng.random() < 0.2:
                body = {"model_id": model_id, "shapes": {"input": [_hostile_json(rng)]}}
            yield "POST", path, {"json": body}, f"{path} {name}"
        elif choice == 3:
            raw = rng.choice(
                ['{"model_id": ' + _deep(rng.choice([10, 900, 5000])) + "}", "{", "\xff", "[]", "null"]
            )
            path = rng.choice(list(fields))
            yield (
                "POST",
                path,
                {
                    "content": raw.encode("utf-8", "surrogatepass"),
                    "headers": {"Content-Type": "application/json"},
                },
                f"{path} raw",
            )
        else:
            what = rng.choice(
                ["/v1/models/{}", "/v1/compilations/{}", "/v1/tuning-jobs/{}", "/v1/artifacts/{}"]
            )
            ident = rng.choice(["0" * 32, "../../etc", "%00", "x" * 500, model_id.upper(), "-1"])
            yield rng.choice(["GET", "DELETE"]), what.format(ident), {}, f"{what} id"


def records_file(model: bytes) -> list[dict[str, Any]]:
    """A valid records file (header, workload, one record of its default schedule) for a model's
    first task, as parsed JSON lines."""
    from compiler.kernels import build_kernel
    from compiler.pipeline import CompileOptions
    from tuner.task import extract_tasks
    from tuner.workloads import describe

    task = extract_tasks(model, CompileOptions())[0]
    workload = describe(task.name, task.group, task.workload.const_params, task.workload.anchor_op)
    return [
        {"format": "temper-records", "version": 1},
        {"kind": "workload", "key": task.key, "description": workload, "flops": task.flops},
        {
            "kind": "record",
            "workload_key": task.key,
            "target_key": "fuzz-target",
            "trace": build_kernel(task.workload, "k").trace.to_json(),
            "run_secs": [1e-3],
            "error_kind": None,
            "error_message": "",
            "temper_version": "fuzz",
            "created": "2026-01-01T00:00:00+00:00",
        },
    ]


def mutated_records(lines: list[dict[str, Any]], rng: random.Random) -> Iterator[tuple[bytes, str]]:
    """Records files with one line's field (or a trace instruction's argument) made hostile."""
    while True:
        copy = json.loads(json.dumps(lines))
        k = rng.randrange(len(copy))
        line = copy[k]
        target = line
        if "trace" in line and rng.random() < 0.5 and line["trace"]["instructions"]:
            target = rng.choice(line["trace"]["instructions"])
        elif "description" in line and rng.random() < 0.5:
            target = line["description"]
        name = rng.choice([*target, "unknown_field"])
        if rng.random() < 0.15:
            target.pop(name, None)
        else:
            target[name] = _hostile_json(rng)
        text = "\n".join(json.dumps(x) for x in copy) + "\n"
        yield text.encode("utf-8", "surrogatepass"), f"records line {k + 1} {name}"


# ---- the driver ----------------------------------------------------------------------------------


@dataclass
class Tally:
    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    stored_on_refusal: list[str] = field(default_factory=list)

    def add(self, status: int, what: str) -> None:
        self.cases += 1
        self.statuses[status] += 1
        if status >= 500:
            self.server_errors.append(f"{status} {what}")

    def summary(self) -> dict[str, Any]:
        by_class = Counter(f"{s // 100}xx" for s in self.statuses.elements())
        return {
            "cases": self.cases,
            "by_class": dict(sorted(by_class.items())),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "server_errors": self.server_errors[:50],
            "stored_on_refusal": self.stored_on_refusal[:50],
        }


def fuzz(
    base_url: str,
    key: str,
    seeds: list[bytes],
    *,
    cases: int,
    seed: int = 0,
    stored: Callable[[], Any] | None = None,
    on_case: Callable[[int], None] | None = None,
    admin_key: str | None = None,
) -> Tally:
    """Send `cases` mutated requests (uploads, JSON bodies, and records files when `admin_key` is
    given); `stored()` snapshots what the server keeps, compared before and after each refusal."""
    rng = random.Random(seed)
    tally = Tally()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=600) as http:
        first = http.post("/v1/models", files={"file": ("m.onnx", seeds[0], "application/octet-stream")})
        first.raise_for_status()
        model_id = first.json()["id"]
        models, bodies = mutated_models(seeds, rng), mutated_bodies(model_id, rng)
        records = mutated_records(records_file(seeds[0]), rng) if admin_key else None
        admin = {"Authorization": f"Bearer {admin_key}", "Content-Type": "application/x-ndjson"}
        for n in range(cases):
            if records is not None and rng.random() < 0.15:
                text, what = next(records)
                before = stored() if stored is not None else None
                response = http.post("/v1/records/import", content=text, headers=admin)
                tally.add(response.status_code, f"{what}: {response.text[:200]}")
                if response.status_code >= 400 and stored is not None and stored() != before:
                    tally.stored_on_refusal.append(what)
            elif rng.random() < 0.65:
                data, what = next(models)
                before = stored() if stored is not None else None
                form = {"shapes": json.dumps({"x": [_hostile_json(rng)]})} if rng.random() < 0.1 else {}
                response = http.post(
                    "/v1/models", files={"file": ("m.onnx", data, "application/octet-stream")}, data=form
                )
                tally.add(response.status_code, f"upload: {what}: {response.text[:200]}")
                if response.status_code >= 400 and stored is not None and stored() != before:
                    tally.stored_on_refusal.append(what)
            else:
                method, path, kwargs, what = next(bodies)
                response = http.request(method, path, **kwargs)
                tally.add(response.status_code, f"{method} {what}: {response.text[:200]}")
            if on_case is not None:
                on_case(n)
    return tally


def stored_state(server: Any) -> tuple[Any, ...]:
    """What a refused request must not change: rows, blobs, records and workloads."""
    with server.database() as db:
        records = sum(1 for _ in db.iter_records())
        workloads = len(db.workloads())
    return server.row_counts(), server.blobs(), records, workloads


def seed_models() -> list[bytes]:
    from tests.models import builders

    return [
        builders.mlp(batch=2, sizes=(32, 16, 8)).SerializeToString(),
        builders.small_conv_model().SerializeToString(),
        builders.bert_layer(seq=8, hidden=32, heads=2, ffn=64).SerializeToString(),
        builders.mobilenet_v2(image=32, classes=10).SerializeToString(),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)

    import tempfile
    from pathlib import Path

    from tests.service.api.server import LiveServer

    with tempfile.TemporaryDirectory(prefix="temper-fuzz-") as tmp:
        data = Path(tmp) / "data"
        env = {"TEMPER_DATA_DIR": str(data), "TEMPER_EMBEDDED_WORKER": "false"}
        server = LiveServer(data, env).start()
        try:
            key = server.create_key("fuzzer")
            start = time.monotonic()

            def progress(n: int) -> None:
                if (n + 1) % 250 == 0:
                    print(f"{n + 1} cases, {time.monotonic() - start:.0f} s", file=sys.stderr)

            tally = fuzz(
                server.url,
                key,
                seed_models(),
                cases=args.cases,
                seed=args.seed,
                stored=lambda: stored_state(server),
                on_case=progress,
                admin_key=server.create_key("fuzz-admin", admin=True),
            )
            alive = httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        finally:
            server.stop()
    summary = tally.summary() | {"server_alive": alive, "seconds": round(time.monotonic() - start, 1)}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0 if alive and not tally.server_errors and not tally.stored_on_refusal else 1


if __name__ == "__main__":
    sys.exit(main())
