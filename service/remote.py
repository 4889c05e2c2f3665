"""`temper compile|tune --server URL`: the same commands run by a temper server.

The model is uploaded, a job is submitted and polled; tuning shows the same live table as a local
run, fed by the job's progress JSON (wrapped in objects with the tuner's attribute names). Ctrl-C
cancels the job on the server before leaving.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from service.client import ApiError, Client, IntegrityError
from service.progress import render
from service.schemas import TuningJobOut
from tuner.progress import Progress

POLL_S = 0.5


class RemoteError(Exception):
    """A remote run that did not succeed: unreachable server, refused request, failed job."""


@contextmanager
def remote_errors(server: str) -> Iterator[None]:
    """Transport and API failures as RemoteError with one line each."""
    try:
        yield
    except ApiError as e:
        raise RemoteError(f"server refused: {e.message} ({e.code})") from None
    except IntegrityError as e:
        raise RemoteError(str(e)) from None
    except httpx.TransportError as e:
        raise RemoteError(f"cannot reach {server}: {e or type(e).__name__}") from None


def compile_remote(
    client: Client,
    model: Path,
    output: Path,
    *,
    shapes: Mapping[str, tuple[int, ...]],
    target: str,
    opt_level: int,
    use_tuned: bool,
    overrides: Mapping[str, str | dict[str, Any]],
    console: Console,
) -> tuple[str, dict[str, Any]]:
    """Upload, compile on the server, download; returns (sha256, manifest)."""
    with remote_errors(client.base_url):
        uploaded = client.upload_model(model, shapes=shapes or None)
        job = client.create_compilation(
            uploaded.id, target=target, opt_level=opt_level, use_tuned=use_tuned, overrides=overrides
        )
        with console.status(f"compiling on {client.base_url} (job {job.id})"):
            try:
                job = client.wait_compilation(job.id, poll=POLL_S)
            except KeyboardInterrupt:
                client.cancel_compilation(job.id)
                raise RemoteError(f"interrupted: compilation {job.id} cancelled") from None
        if job.state != "succeeded" or job.artifact_id is None:
            raise RemoteError(f"compilation {job.id} {job.state}: {job.error or 'no artifact'}")
        digest = client.download_artifact(job.artifact_id, output)
        return digest, client.artifact_manifest(job.artifact_id)


def _view(job: TuningJobOut) -> Group:
    head = Text(f"job {job.id} on the server: {job.state}", style="dim")
    if job.progress is None:
        return Group(head, Text("waiting for a worker..." if job.state == "queued" else ""))
    return Group(head, render(Progress.from_json(job.progress.model_dump())))


def tune_remote(
    client: Client,
    model: Path,
    *,
    shapes: Mapping[str, tuple[int, ...]],
    target: str,
    opt_level: int,
    trials: int,
    time_budget_s: float | None,
    batch: int,
    seed: int,
    console: Console,
) -> TuningJobOut:
    """Upload, submit a tuning job and show its progress live until it ends; returns the final job."""
    with remote_errors(client.base_url):
        uploaded = client.upload_model(model, shapes=shapes or None)
        job = client.create_tuning_job(
            uploaded.id,
            target=target,
            opt_level=opt_level,
            trials=trials,
            time_budget_s=time_budget_s,
            batch=batch,
            seed=seed,
        )
        with Live(_view(job), console=console, auto_refresh=False) as live:
            try:
                while job.state not in ("succeeded", "failed", "cancelled"):
                    time.sleep(POLL_S)
                    job = client.get_tuning_job(job.id)
                    live.update(_view(job), refresh=True)
            except KeyboardInterrupt:
                client.cancel_tuning_job(job.id)
                raise RemoteError(f"interrupted: tuning job {job.id} asked to cancel") from None
    if job.state != "succeeded":
        raise RemoteError(f"tuning job {job.id} {job.state}: {job.error or 'no error message'}")
    return job
