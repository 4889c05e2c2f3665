"""A separate process writing records, for the concurrency and durability tests.

    python -m tests.storage.write_records URL TAG COUNT [--go FILE] [--hang]

Opens the database (migrating it, as every temper process does), commits a shared workload and
one of its own, waits until the --go file exists (so several writers start together), commits
COUNT records alternating between the two workloads, prints "done" and exits — or, with --hang,
sleeps until it is killed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from storage import SqlDatabase
from tests.storage.helpers import record, workload


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("tag")
    parser.add_argument("count", type=int)
    parser.add_argument("--go", type=Path)
    parser.add_argument("--hang", action="store_true")
    args = parser.parse_args(argv)

    db = SqlDatabase(args.url)
    db.commit_workload(workload("shared"))
    db.commit_workload(workload(f"own-{args.tag}"))
    deadline = time.monotonic() + 60
    while args.go is not None and not args.go.exists():
        if time.monotonic() > deadline:
            print("no go signal", file=sys.stderr)
            return 1
        time.sleep(0.01)
    for n in range(args.count):
        key = "shared" if n % 2 == 0 else f"own-{args.tag}"
        db.commit_record(record(key, f"target-{args.tag}", n=n, minutes=n))
    print("done", flush=True)
    if args.hang:
        time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
