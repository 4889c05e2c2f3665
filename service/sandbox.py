"""Compiler work on untrusted models runs in a child process with a time and a memory limit.

A model or a schedule is data from a client; what the compiler does with it is bounded by
compiler.limits, but a bound can be missed and LLVM's assertions abort the process they fail in.
So whatever the service asks of the compiler about a client's model (an upload's analysis, an IR
request, a compile job) runs in a child process: its address space is capped (RLIMIT_AS), it is
killed when its time is up, and it dies with its parent. A child that runs out of memory, time or
luck costs its request or job, never the API or the worker.

Children come from the forkserver with the compiler already imported, so each costs a fork, not an
interpreter start.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from compiler.errors import CompilerError

_PRELOAD = ["compiler.pipeline", "tuner.task", "service.summary"]


class SandboxError(CompilerError):
    """The work needed more time or memory than its limits: the input asked too much."""


class SandboxCrash(Exception):
    """The child died or raised something other than a CompilerError: a bug to look into (the
    message carries the child's traceback)."""


def _child(
    conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...], memory_bytes: int, root: int
) -> None:
    from tuner._measure_child import die_with_parent

    die_with_parent(root)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    try:
        outcome: tuple[str, Any] = ("ok", fn(*args))
    except MemoryError:
        outcome = ("memory", "")
    except CompilerError as exc:  # a typed error crosses back as itself
        outcome = ("compiler", exc)
    except BaseException as exc:
        outcome = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")
    try:
        conn.send(outcome)
    except Exception as exc:  # e.g. an exception that does not pickle
        conn.send(("error", f"cannot return the result: {type(exc).__name__}: {exc}"))
    conn.close()


def run_limited(fn: Callable[..., Any], *args: Any, seconds: float, memory_bytes: int, what: str) -> Any:
    """fn(*args) in a child process (fn must be a module-level function): its result, or the
    CompilerError it raised, or SandboxError when it ran out of time or memory or died. `what` names
    the work in messages ("the compile", "the model's analysis")."""
    from tuner.measure import mp_context

    ctx = mp_context()
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=_child, args=(send, fn, args, memory_bytes, os.getpid()), name="temper-sandbox", daemon=True
    )
    child.start()
    send.close()
    try:
        if not receive.poll(seconds):
            raise SandboxError(f"{what} took longer than its limit of {seconds:g} s; nothing was stored")
        try:
            kind, value = receive.recv()
        except (pickle.UnpicklingError, AttributeError, TypeError, ImportError) as exc:
            raise SandboxCrash(f"{what} sent back a result that cannot be read: {exc}") from None
        except EOFError:
            child.join(5)
            raise SandboxCrash(
                f"the process running {what} died (exit code {child.exitcode}); nothing was stored"
            ) from None
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join(5)
    if kind == "ok":
        return value
    if kind == "compiler":
        raise value
    if kind == "memory":
        raise SandboxError(
            f"{what} ran out of memory (its limit is {memory_bytes >> 20} MiB); nothing was stored"
        )
    raise SandboxCrash(f"{what} failed: {value}")
