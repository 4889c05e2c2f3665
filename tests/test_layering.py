"""Imports point down: service -> storage -> tuner -> compiler, and no two packages import each other.

Read from the source with `ast` (every import, lazy ones inside functions too), so a layering slip
fails here rather than as a cycle someone meets later.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["compiler", "tuner", "storage", "service"]  # each may import only those before it


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(p for p in parts if p != "__init__"), path


def _imports(module: str, path: Path) -> set[str]:
    found = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def _top(name: str) -> str:
    return name.split(".", 1)[0]


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_imports_only_the_layers_below_it(layer: str) -> None:
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    bad = [
        f"{module} imports {name}"
        for module, path in _modules(layer)
        for name in sorted(_imports(module, path))
        if _top(name) in LAYERS and _top(name) not in allowed
    ]
    assert not bad, "\n".join(bad)


def test_the_runtime_needs_only_numpy_ctypes_and_the_standard_library() -> None:
    """An artifact loads with compiler.runtime alone, on a machine without LLVM or the compiler."""
    bad = []
    for module, path in _modules("compiler/runtime"):
        for name in _imports(module, path):
            top = _top(name)
            if top in ("numpy", "ctypes") or top in sys.stdlib_module_names:
                continue
            if name.startswith("compiler.runtime"):
                continue
            if name == "compiler":  # `from compiler import runtime`-style parents of the runtime itself
                continue
            bad.append(f"{module} imports {name}")
    assert not bad, "\n".join(sorted(bad))


def test_no_two_compiler_packages_import_each_other() -> None:
    """compiler's subpackages (graph, ops, tir, codegen, frontend, runtime) form no cycle: the lower
    one owns what both need."""
    uses: dict[str, set[str]] = {}
    for module, path in _modules("compiler"):
        parts = module.split(".")
        if len(parts) < 3:  # compiler/*.py modules sit on top of the subpackages
            continue
        mine = parts[1]
        for name in _imports(module, path):
            other = name.split(".")
            inside = len(other) >= 3 and other[0] == "compiler"
            subpackage = inside and (ROOT / "compiler" / other[1]).is_dir()
            if subpackage and other[1] != mine:
                uses.setdefault(mine, set()).add(other[1])
    cycles = sorted(f"{a} <-> {b}" for a in uses for b in uses[a] if a < b and a in uses.get(b, set()))
    assert not cycles, cycles
