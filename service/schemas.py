"""The API's request and response bodies (pydantic), kept apart from the tables.

Requests forbid unknown fields, so a typo (`trails`) is a 422 naming it instead of a silent default,
and are strict: `"64"` or `true` is not an integer.
Responses are built from storage.repos' plain dataclasses, never from ORM rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
Stage = Literal["graph", "optimized", "fused", "tir", "scheduled", "llvm", "asm"]

# Names that reach the database and the compiler: printable, no control characters.
Name = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")]
Dim = Annotated[int, Field(ge=1, le=1 << 20)]
Shapes = Annotated[dict[Name, Annotated[list[Dim], Field(min_length=0, max_length=16)]], Field(max_length=64)]
RecordRef = Annotated[str, StringConstraints(pattern=r"^record:[0-9]{1,18}$")]
# a kernel's pinned schedule: a tuning record by id, or a schedule trace (the JSON of compiler.tir.trace)
Override = RecordRef | dict[str, Any]
Target = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class _Request(BaseModel):
    # strict: "64" or true is not a number of trials; a client sends what it means
    model_config = ConfigDict(extra="forbid", strict=True)


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --- errors and health ------------------------------------------------------------------------------


class ErrorDetail(_Response):
    code: str = Field(description="What went wrong, snake_case (e.g. unsupported_op, not_found).")
    message: str = Field(description="One line for a human, naming what was wrong.")


class ErrorOut(_Response):
    error: ErrorDetail


class HealthOut(_Response):
    status: Literal["ok"]
    version: str
    database: str


# --- models -----------------------------------------------------------------------------------------


class TensorOut(_Response):
    name: str
    shape: list[int | str] = Field(description="Dimensions; symbolic ones are their names.")
    dtype: str


class TaskOut(_Response):
    name: str
    key: str = Field(description="The workload key tuning records are stored under.")
    weight: int = Field(description="How many kernels of the model share this workload.")
    flops: int


class ModelOut(_Response):
    id: str
    name: str
    sha256: str
    size: int
    inputs: list[TensorOut]
    outputs: list[TensorOut]
    op_counts: dict[str, int] = Field(description="ONNX op type -> number of nodes.")
    shapes: dict[str, list[int]] = Field(description="Input shapes bound at upload (the default for jobs).")
    unbound: list[str] = Field(description="Inputs with dynamic dims left unbound (then no tasks).")
    tasks: list[TaskOut]
    flops: int = Field(description="Total FLOPs of one inference (tasks x weight).")
    created_at: datetime


# --- jobs ---------------------------------------------------------------------------------------------


class CompilationIn(_Request):
    model_id: str = Field(max_length=64)
    shapes: Shapes | None = Field(None, description="Input shapes; default: those bound at upload.")
    target: Target = "host"
    opt_level: int = Field(3, ge=0, le=3)
    use_tuned: bool = Field(True, description="Use the best tuning records of each kernel.")
    overrides: Annotated[dict[Name, Override], Field(max_length=1024)] = Field(
        default_factory=dict,
        description="ONNX node name -> 'record:ID' or a schedule trace object: pin that kernel's schedule.",
    )


class TuningJobIn(_Request):
    model_id: str = Field(max_length=64)
    shapes: Shapes | None = Field(None, description="Input shapes; default: those bound at upload.")
    target: Target = "host"
    opt_level: int = Field(3, ge=0, le=3)
    trials: int = Field(
        64,
        ge=1,
        le=100_000,
        description="Candidates this job measures over all tasks (as `temper tune --trials`): records "
        "already in the database are used and never measured again, but not counted.",
    )
    time_budget_s: float | None = Field(None, gt=0, le=7 * 24 * 3600, description="Wall-clock budget.")
    batch: int = Field(8, ge=1, le=256, description="Candidates measured per round.")
    seed: int = Field(0, ge=0, le=2**31 - 1)


class TaskProgressOut(_Response):
    name: str
    key: str
    weight: int
    flops: int
    trials: int
    best_secs: float | None = None
    best_gflops: float | None = None
    default_secs: float | None = None
    curve: list[tuple[int, float | None]] = Field(
        default_factory=list, description="(trials done, this task's best seconds) each time it improved."
    )


class ConfirmedTaskOut(_Response):
    name: str
    key: str = ""
    chosen: int | None = Field(None, description="The record compilations use from now on.")
    isolated_best: int | None = Field(None, description="The record that was fastest timed alone.")
    default: int | None = Field(None, description="The record of the default schedule.")
    alone: dict[str, float] = Field(default_factory=dict, description="Record id -> seconds per call alone.")
    in_model: dict[str, float] = Field(
        default_factory=dict, description="Record id -> seconds per call inside the compiled model."
    )


class ConfirmationOut(_Response):
    """The in-model check after the search: every task's finalists timed inside the compiled model."""

    seconds: float | None = None
    variant_secs: list[float] = Field(
        default_factory=list,
        description="Model latency per variant: first every task's fastest-alone record, last the defaults.",
    )
    whole_model: dict[str, float] | None = Field(
        None,
        description="The whole model's latency with the in-model picks ('picks') and with the defaults "
        "('defaults'), timed against each other; absent when every pick was the default.",
    )
    kept: str | None = Field(
        None, description="'picks', or 'defaults' when the whole model ran no faster with the picks."
    )
    changed: list[str] = Field(default_factory=list, description="Tasks whose in-model pick differs.")
    direct: list[str] = Field(
        default_factory=list,
        description="Convs (ONNX nodes) the picks ran direct, not Winograd, as their direct kernel measured "
        "faster alone; compilations run them direct only when the picks were kept.",
    )
    tasks: list[ConfirmedTaskOut] = Field(default_factory=list)
    error: str | None = None


class ProgressOut(_Response):
    trials_done: int
    trials_total: int
    elapsed_s: float
    eta_s: float | None = None
    estimated_latency_s: float | None = None
    tasks: list[TaskProgressOut] = Field(default_factory=list)
    curve: list[tuple[int, float | None, float | None]] = Field(
        default_factory=list,
        description="(trials done, estimated model latency in seconds, seconds since the job began) "
        "after each round.",
    )
    default_latency_s: float | None = Field(
        None, description="The model's latency estimated from every kernel's default schedule (untuned)."
    )
    onnxruntime_latency_s: float | None = Field(
        None, description="onnxruntime's latency for the same model on this server (when installed)."
    )
    finished: bool = False
    phase: str = Field("search", description="'search', then 'confirm' while finalists run in the model.")
    confirmation: ConfirmationOut | None = None
    trials_base: int = Field(
        0, description="Records of the model's kernels there before the job (not counted)."
    )
    stop_reason: str | None = Field(
        None,
        description="Why the search ended: 'budget: ...', 'time budget: ...', 'converged: ...', "
        "'space exhausted: ...' or 'cancelled' (null while it runs).",
    )


class _JobOut(_Response):
    id: str
    state: JobState
    model_id: str
    params: dict[str, Any]
    error: str | None = None
    attempts: int = 0
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class CompilationOut(_JobOut):
    artifact_id: str | None = Field(None, description="Set when the compilation succeeded.")


class TuningJobOut(_JobOut):
    progress: ProgressOut | None = None


class KernelTimeOut(_Response):
    step: int = Field(description="The call's place in the execution plan.")
    kernel: str = Field(description="The kernel's symbol (the manifest's kernels[].symbol).")
    median: float = Field(description="Median seconds per call.")
    share: float = Field(description="Its share of the summed medians.")
    nodes: list[str] = Field(default_factory=list, description="The ONNX nodes the kernel runs.")


class NodeTimeOut(_Response):
    node: str
    op: str
    seconds: float = Field(description="Median kernel seconds per run.")


class OnnxruntimeProfileOut(_Response):
    ops: list[NodeTimeOut]
    total_s: float


class ProfileOut(_Response):
    """An artifact run on the server: where its time goes, kernel by kernel."""

    runs: int
    kernels: list[KernelTimeOut]
    total_s: float = Field(description="The kernels' medians summed.")
    onnxruntime: OnnxruntimeProfileOut | None = Field(
        None, description="onnxruntime's per-node profile of the same model and inputs (when installed)."
    )


# --- records -----------------------------------------------------------------------------------------


class ImportOut(_Response):
    workloads_added: int
    records_added: int
    records_skipped: int = Field(description="Already in the database, or repeated in the file.")


class RecordOut(_Response):
    """One tuning record, as `temper records list` shows it."""

    id: int
    target_key: str
    workload_key: str
    name: str = Field(description="The kernel (task) name the workload was tuned under.")
    anchor: str | None = Field(None, description="The op the kernel is built around.")
    flops: int
    seconds: float | None = Field(None, description="Median time alone; null for a failed candidate.")
    model_secs: float | None = Field(None, description="Time per call inside the compiled model, when timed.")
    verification: str
    error_kind: str | None = None
    created: datetime


class TargetOut(_Response):
    key: str
    records: int
    description: str = Field(description="The CPU and what the key's features digest stands for.")
