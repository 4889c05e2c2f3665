"""The cyclic collector is paused for a compile and comes back as it was, whatever happens."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from compiler.collector import collector_paused
from compiler.errors import CompilerError
from compiler.pipeline import CompileOptions, compile_model
from tests.models.builders import small_conv_model


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_paused_inside_and_back_after() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_off_before_stays_off() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_nested_pauses_end_with_the_outermost() -> None:
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_when_the_body_raises() -> None:
    with pytest.raises(RuntimeError, match="boom"), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_threads_share_one_pause() -> None:
    """The first thread to finish does not turn the collector back on under the other."""
    entered, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def long_compile() -> None:
        with collector_paused():
            entered.set()
            release.wait(10)
            seen.append(gc.isenabled())

    worker = threading.Thread(target=long_compile)
    worker.start()
    assert entered.wait(10)
    with collector_paused():
        pass
    assert not gc.isenabled()  # the worker still holds the pause
    release.set()
    worker.join(10)
    assert seen == [False]
    assert gc.isenabled()


def test_compile_model_pauses_and_restores() -> None:
    compiled = compile_model(small_conv_model().SerializeToString(), CompileOptions())
    assert compiled.manifest["kernels"]
    assert gc.isenabled()


def test_compile_model_restores_after_bad_input() -> None:
    with pytest.raises(CompilerError):
        compile_model(b"not an onnx model", CompileOptions())
    assert gc.isenabled()
