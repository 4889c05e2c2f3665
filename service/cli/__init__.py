"""temper's command line, one module per command group: `models` (compile, run, inspect, explain,
ops), `tune`, `records` (records, db), `server` (keys, worker, serve); `common` holds the app, the
shared options and the one-line error handling.

User mistakes (bad model, bad artifact, bad inputs, bad flags) print one red `error:` line and
exit with code 2, never a traceback. The compiler is imported inside the commands that need it,
so `temper run` starts with numpy and the runtime alone.
"""

from __future__ import annotations

import importlib

from service.cli.common import app

for _group in ("models", "tune", "records", "server"):  # each registers its commands, listed in this order
    importlib.import_module(f"service.cli.{_group}")


def main() -> None:
    """Console-script entry point (`temper`)."""
    app()


__all__ = ["app", "main"]
