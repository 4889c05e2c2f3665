"""Dask distributed as the tuner's executors: candidate builds and measured runs on a cluster.

The tuner's builder and runner take a `concurrent.futures.Executor` (tuner.measure). With
TEMPER_DASK_SCHEDULER set, a worker hands them two executors over one Dask client:

- builds go to any Dask worker (compiling needs no particular CPU: the target is named to LLVM);
- measured runs carry the resource `target-<cpu>` (e.g. `target-znver3`), so they run only on
  Dask workers started with `--resources target-<cpu>=1`, i.e. on matching hardware, and one at a
  time per worker process. Start one single-threaded Dask worker per machine
  (`--nworkers 1 --nthreads 1`): then builds and timed runs never overlap on a machine either.

Dask workers must be allowed to start child processes (each measurement runs in one): set
DASK_DISTRIBUTED__WORKER__DAEMON=False in their environment. They import temper's code, so they
run the same image (or installation) as the temper workers.

`python -m service.executors resource [TARGET]` prints the resource name for a target (default
"host": this machine's CPU), for the command line that starts a Dask worker.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Executor
from typing import Any

from compiler.target import Target, parse_target

WAIT_FOR_WORKERS_S = 60.0  # how long a job waits for a measuring Dask worker to join the cluster


class ExecutorError(Exception):
    """The Dask cluster cannot take the work: unreachable scheduler, no worker for the target."""


def resource_name(target: str | Target) -> str:
    """The Dask resource that marks workers able to measure for `target`: `target-<LLVM cpu name>`."""
    cpu = (parse_target(target) if isinstance(target, str) else target).cpu
    return f"target-{cpu}"


class DaskExecutors:
    """A client of the Dask scheduler at `address`, handing out build and run executors."""

    def __init__(
        self, address: str, *, timeout_s: float = 30.0, wait_for_workers_s: float = WAIT_FOR_WORKERS_S
    ):
        from distributed import Client

        self.address = address
        self.wait_for_workers_s = wait_for_workers_s
        try:
            self.client: Any = Client(  # type: ignore[no-untyped-call]  # Client.__init__ is unannotated
                address, timeout=timeout_s, set_as_default=False
            )
        except (OSError, TimeoutError) as exc:
            raise ExecutorError(f"cannot reach the Dask scheduler at {address}: {exc}") from None

    def executors(self, target: str | Target) -> tuple[Executor, Executor]:
        """(build executor, run executor) for `target`; ExecutorError when no worker measures for it."""
        name = resource_name(target)
        self._wait_for(name)
        build = self.client.get_executor(pure=False)
        run = self.client.get_executor(pure=False, resources={name: 1})
        return build, run

    def resources(self) -> dict[str, float]:
        """Total resources the cluster's workers offer now (name -> amount)."""
        total: dict[str, float] = {}
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        for info in workers.values():
            for key, amount in (info.get("resources") or {}).items():
                total[key] = total.get(key, 0.0) + float(amount)
        return total

    def _wait_for(self, name: str) -> None:
        deadline = time.monotonic() + self.wait_for_workers_s
        while self.resources().get(name, 0.0) < 1:
            if time.monotonic() >= deadline:
                raise ExecutorError(
                    f"no Dask worker at {self.address} offers the resource {name}: start one on a "
                    f"matching machine with `dask worker {self.address} --nthreads 1 --resources {name}=1`"
                )
            time.sleep(0.5)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> DaskExecutors:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[0] != "resource":
        print("usage: python -m service.executors resource [TARGET]", file=sys.stderr)
        return 2
    print(resource_name(argv[1] if len(argv) == 2 else "host"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
