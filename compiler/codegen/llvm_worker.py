"""A worker process of compile_parallel (library.py): one part of a library's IR to an object file.

    python -m compiler.codegen.llvm_worker SOURCE.ll OUT.o TRIPLE CPU FEATURES

Exits non-zero (the parent then compiles the part itself, and reports any error there).
"""

from __future__ import annotations

import sys
from pathlib import Path

from compiler.codegen.library import emit_object
from compiler.target import Target


def main(argv: list[str]) -> int:
    source, out, triple, cpu, features = argv
    # the machine code depends on these three only (library.target_machine); the rest is unused here
    target = Target(triple=triple, cpu=cpu, features=features, vector_bits=0, cores=1)
    Path(out).write_bytes(emit_object([Path(source).read_text()], target))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
