"""The `temper` command line: run (on a hand-built artifact), compile and inspect, and error paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from compiler.pipeline import STAGES
from compiler.runtime import write_artifact
from compiler.version import __version__
from service.cli import app
from tests.compiler.runtime import tiny

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.temper"
    write_artifact(path, **tiny.parts(tiny.library()))
    return path


def test_version_and_help(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.stdout
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("compile", "run", "inspect"):
        assert command in result.stdout


# --- run ---------------------------------------------------------------------------------------


def test_run_with_random_inputs(runner: CliRunner, artifact: Path) -> None:
    result = runner.invoke(app, ["run", str(artifact)])
    assert result.exit_code == 0, result.output
    assert "random inputs" in result.stdout
    for name, shape in (("y", "[3, 2]"), ("t", "[3, 2]"), ("w", "[2, 3]")):
        assert name in result.stdout
        assert shape in result.stdout


def test_run_with_given_input_saves_outputs(runner: CliRunner, artifact: Path, tmp_path: Path) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    np.save(tmp_path / "x.npy", x)
    out_dir = tmp_path / "outputs"
    result = runner.invoke(
        app, ["run", str(artifact), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out_dir)]
    )
    assert result.exit_code == 0, result.output
    assert "random inputs" not in result.stdout
    want = tiny.reference(x)
    for name in ("y", "t", "w"):
        np.testing.assert_allclose(np.load(out_dir / f"{name}.npy"), want[name], rtol=1e-6)


def test_run_benchmark_prints_median_latency(runner: CliRunner, artifact: Path) -> None:
    result = runner.invoke(app, ["run", str(artifact), "--benchmark", "--repeat", "3"])
    assert result.exit_code == 0, result.output
    assert "median latency:" in result.stdout
    assert " ms" in result.stdout


def _assert_user_error(result, *fragments: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    assert "error" in result.stderr.lower()
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr


def test_run_corrupt_artifact_is_a_clean_error(runner: CliRunner, artifact: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.temper"
    bad.write_bytes(artifact.read_bytes()[:-40])
    result = runner.invoke(app, ["run", str(bad)])
    _assert_user_error(result, "error: not a temper artifact")


def test_run_wrong_input_shape_names_the_input(runner: CliRunner, artifact: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((3, 3), np.float32))
    result = runner.invoke(app, ["run", str(artifact), "--input", f"x={tmp_path / 'x.npy'}"])
    _assert_user_error(result, "input 'x' has shape [3, 3], expected [2, 3]")


def test_run_unknown_input_name(runner: CliRunner, artifact: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "q.npy", np.zeros((2, 3), np.float32))
    result = runner.invoke(app, ["run", str(artifact), "--input", f"q={tmp_path / 'q.npy'}"])
    _assert_user_error(result, "unknown input 'q'")


def test_run_unreadable_input_file(runner: CliRunner, artifact: Path, tmp_path: Path) -> None:
    (tmp_path / "x.npy").write_text("not numpy")
    result = runner.invoke(app, ["run", str(artifact), "--input", f"x={tmp_path / 'x.npy'}"])
    _assert_user_error(result, "cannot read input 'x'")


@pytest.mark.parametrize("flag", ["x", "x=", "=file.npy"])
def test_run_bad_input_flag_syntax(runner: CliRunner, artifact: Path, flag: str) -> None:
    result = runner.invoke(app, ["run", str(artifact), "--input", flag])
    assert result.exit_code == 2
    assert "NAME=FILE.npy" in result.output


def test_run_missing_artifact_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(tmp_path / "absent.temper")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_failing_kernel_exits_1_without_traceback(runner: CliRunner, tmp_path: Path) -> None:
    parts = tiny.parts(tiny.library())
    parts["plan"]["steps"].append({"kernel": "fail_k", "args": [5]})
    path = tmp_path / "fail.temper"
    write_artifact(path, **parts)
    result = runner.invoke(app, ["run", str(path)])
    assert result.exit_code == 1
    assert "kernel 'fail_k'" in result.stderr
    assert "Traceback" not in result.output


def test_module_entry_point_reports_errors_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.temper"
    bad.write_text("junk")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "run", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: not a temper artifact")
    assert "Traceback" not in done.stderr


# --- --shape parsing (runs before the pipeline is imported) ------------------------------------


@pytest.mark.parametrize("command", ["compile", "inspect"])
@pytest.mark.parametrize("flag", ["x", "x=", "=1,2", "x=1,,2", "x=a,b", "x=0,3", "x=-1", "x=1, 2"])
def test_bad_shape_flag_is_a_clear_error(runner: CliRunner, tmp_path: Path, command: str, flag: str) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    extra = ["-o", str(tmp_path / "a.temper")] if command == "compile" else ["--stage", "graph"]
    result = runner.invoke(app, [command, str(model), *extra, "--shape", flag])
    assert result.exit_code == 2
    assert "NAME=D1,D2" in result.output


def test_repeated_shape_name_is_an_error(runner: CliRunner, tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    result = runner.invoke(
        app, ["inspect", str(model), "--stage", "graph", "--shape", "x=1,2", "--shape", "x=3,4"]
    )
    assert result.exit_code == 2
    assert "given twice" in result.output


# --- compile / inspect (need the compiler pipeline) --------------------------------------------


def _mlp_model(path: Path, *, batch: int | str = 1) -> tuple[np.ndarray, np.ndarray]:
    """y = relu(x @ w + b) as a real ONNX file; returns (w, b) for the numpy reference."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    gen = np.random.default_rng(1)
    w = gen.standard_normal((4, 3)).astype(np.float32)
    b = gen.standard_normal(3).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
            helper.make_node("Add", ["xw", "b"], ["z"], name="add"),
            helper.make_node("Relu", ["z"], ["y"], name="relu"),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return w, b


def test_compile_then_run_matches_numpy(runner: CliRunner, tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    w, b = _mlp_model(model, batch="N")
    artifact = tmp_path / "mlp.temper"
    result = runner.invoke(
        app,
        [
            "compile",
            str(model),
            "-o",
            str(artifact),
            "--shape",
            "x=2,4",
            "--opt-level",
            "3",
            "--dump-ir",
            str(tmp_path / "ir"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "sha256" in result.stdout
    assert artifact.exists()
    assert any((tmp_path / "ir").iterdir())

    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = runner.invoke(
        app,
        ["run", str(artifact), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out")],
    )
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(
        np.load(tmp_path / "out" / "y.npy"), np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-5
    )


def test_compile_rejects_a_file_that_is_not_onnx(runner: CliRunner, tmp_path: Path) -> None:
    model = tmp_path / "junk.onnx"
    model.write_bytes(b"\x00not a model at all")
    result = runner.invoke(app, ["compile", str(model), "-o", str(tmp_path / "a.temper")])
    _assert_user_error(result, "error:")
    assert not (tmp_path / "a.temper").exists()


def test_compile_rejects_an_unsupported_op(runner: CliRunner, tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="odd", domain="com.example")],
        "odd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    path = tmp_path / "odd.onnx"
    onnx.save(model, path)
    result = runner.invoke(app, ["compile", str(path), "-o", str(tmp_path / "a.temper")])
    _assert_user_error(result, "Frobnicate")


def test_inspect_prints_every_stage(runner: CliRunner, tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    _mlp_model(model)
    for stage in STAGES:
        result = runner.invoke(app, ["inspect", str(model), "--stage", stage])
        assert result.exit_code == 0, f"{stage}: {result.output}"
        assert result.stdout.strip(), stage


def test_inspect_unknown_stage_and_kernel(runner: CliRunner, tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    _mlp_model(model)
    result = runner.invoke(app, ["inspect", str(model), "--stage", "bytecode"])
    assert result.exit_code == 2
    assert "not one of" in result.output
    result = runner.invoke(app, ["inspect", str(model), "--stage", "tir", "--kernel", "no_such_kernel"])
    _assert_user_error(result, "no_such_kernel")


def test_external_weights_next_to_the_model_and_the_flag_that_refuses_them(
    runner: CliRunner, tmp_path: Path
) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = np.arange(64, dtype=np.float32).reshape(16, 4)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = tmp_path / "ext.onnx"
    onnx.save_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        model,
        save_as_external_data=True,
        location="ext.weights",
        size_threshold=0,
    )
    out = tmp_path / "ext.temper"
    ok = runner.invoke(app, ["compile", str(model), "-o", str(out), "--no-tuned"])
    assert ok.exit_code == 0, ok.output
    refused = runner.invoke(app, ["compile", str(model), "-o", str(out), "--no-tuned", "--no-external-data"])
    assert refused.exit_code != 0 and "external file" in refused.output
    inspected = runner.invoke(app, ["inspect", str(model), "--stage", "graph", "--no-external-data"])
    assert inspected.exit_code != 0 and "external file" in inspected.output


def test_inspect_shows_the_blocked_layout_and_disable_pass_turns_it_off(
    runner: CliRunner, tmp_path: Path
) -> None:
    import onnx

    from tests.models import builders

    model = tmp_path / "resnet.onnx"
    onnx.save(builders.resnet18(1, image=32, classes=10), model)
    result = runner.invoke(app, ["inspect", str(model), "--stage", "optimized"])
    assert result.exit_code == 0, result.output
    assert "layout_transform" in result.stdout and "conv2d_nchwc" in result.stdout
    result = runner.invoke(
        app, ["inspect", str(model), "--stage", "optimized", "--disable-pass", "alter_layout"]
    )
    assert result.exit_code == 0, result.output
    assert "layout_transform" not in result.stdout and "conv2d_nchwc" not in result.stdout
    result = runner.invoke(app, ["inspect", str(model), "--stage", "graph", "--disable-pass", "fuse_ops"])
    _assert_user_error(result, "cannot disable pass 'fuse_ops'")
    out = tmp_path / "plain.temper"
    result = runner.invoke(app, ["compile", str(model), "-o", str(out), "--disable-pass", "alter_layout"])
    assert result.exit_code == 0, result.output
    from compiler.runtime import load

    assert "alter_layout" not in load(out).manifest["passes"]


# --- overrides and the schedules inspect shows -------------------------------------------------------


def _kernel_trace(runner: CliRunner, model: Path, tmp_path: Path) -> tuple[str, Path]:
    """The model's (one) kernel name and its default schedule's trace file, from --dump-ir."""
    ir = tmp_path / "ir"
    result = runner.invoke(
        app, ["compile", str(model), "-o", str(tmp_path / "a.temper"), "--dump-ir", str(ir)]
    )
    assert result.exit_code == 0, result.output
    (trace,) = (ir / "kernels").glob("*.trace.json")
    return trace.name.removesuffix(".trace.json"), trace


def test_compile_override_by_node_or_kernel_name(runner: CliRunner, tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    _mlp_model(model)
    kernel, trace = _kernel_trace(runner, model, tmp_path)
    for name in ("relu", kernel):
        out = tmp_path / f"{name}.temper"
        result = runner.invoke(app, ["compile", str(model), "-o", str(out), "--override", f"{name}={trace}"])
        assert result.exit_code == 0, result.output
        assert "override" in result.stdout


def test_an_override_naming_nothing_is_an_error(runner: CliRunner, tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    _mlp_model(model)
    _, trace = _kernel_trace(runner, model, tmp_path)
    out = tmp_path / "x.temper"
    result = runner.invoke(app, ["compile", str(model), "-o", str(out), "--override", f"reluX={trace}"])
    _assert_user_error(result, "'reluX'", "no ONNX node and no kernel", "closest: relu")
    assert not out.exists()
    result = runner.invoke(
        app, ["inspect", str(model), "--stage", "scheduled", "--override", f"matmull={trace}"]
    )
    _assert_user_error(result, "'matmull'", "closest: matmul")


def test_inspect_schedules_as_compile_does(runner: CliRunner, tmp_path: Path) -> None:
    """With --db, inspect shows the tuned schedule compile uses; --no-tuned the default one."""
    model = tmp_path / "mlp.onnx"
    _mlp_model(model)
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    tuned = runner.invoke(app, ["tune", str(model), "--db", db, "--trials", "6"])
    assert tuned.exit_code == 0, tuned.output
    ir = tmp_path / "ir"
    result = runner.invoke(
        app, ["compile", str(model), "-o", str(tmp_path / "a.temper"), "--db", db, "--dump-ir", str(ir)]
    )
    assert result.exit_code == 0 and "record" in result.stdout, result.output
    (compiled,) = (ir / "kernels").glob("*.scheduled.py")
    shown = runner.invoke(app, ["inspect", str(model), "--stage", "scheduled", "--db", db])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.strip() == compiled.read_text().strip()
    untuned = runner.invoke(app, ["inspect", str(model), "--stage", "scheduled", "--db", db, "--no-tuned"])
    default_ir = tmp_path / "ir0"
    runner.invoke(
        app,
        ["compile", str(model), "-o", str(tmp_path / "b.temper"), "--no-tuned", "--dump-ir", str(default_ir)],
    )
    (default,) = (default_ir / "kernels").glob("*.scheduled.py")
    assert untuned.stdout.strip() == default.read_text().strip()


def test_explain_text_json_node_and_profile(runner: CliRunner, tmp_path: Path) -> None:
    import json

    model = tmp_path / "mlp.onnx"
    _mlp_model(model)
    result = runner.invoke(app, ["explain", str(model), "--profile"])
    assert result.exit_code == 0, result.output
    for word in (
        "target ",
        "passes ",
        "nodes ",
        "matmul (MatMul -> matmul)",
        "rule ",
        "schedule ",
        "measured",
    ):
        assert word in result.stdout, word
    as_json = runner.invoke(app, ["explain", str(model), "--json", "--node", "relu"])
    assert as_json.exit_code == 0, as_json.output
    (kernel,) = json.loads(as_json.stdout)["kernels"]
    assert [n["node"] for n in kernel["nodes"]] == ["matmul", "add", "relu"]
    _assert_user_error(runner.invoke(app, ["explain", str(model), "--node", "rellu"]), "closest: relu")


def test_ops_lists_every_supported_op(runner: CliRunner) -> None:
    import json

    from compiler.frontend.onnx import CONVERTERS

    table = runner.invoke(app, ["ops"])
    assert table.exit_code == 0, table.output
    assert table.stdout.startswith("| op | domain | opsets | dtypes | restriction |")
    assert "| Conv | ai.onnx |" in table.stdout
    listed = {op["name"] for op in json.loads(runner.invoke(app, ["ops", "--json"]).stdout)["ops"]}
    assert {"Conv", "MatMul", "Softmax", "Resize"} <= listed <= set(CONVERTERS)


def test_the_hint_for_an_unbound_dim_is_accepted_as_it_is(runner: CliRunner, tmp_path: Path) -> None:
    import re

    model = tmp_path / "mlp.onnx"
    _mlp_model(model, batch="N")
    out = tmp_path / "a.temper"
    result = runner.invoke(app, ["compile", str(model), "-o", str(out)])
    _assert_user_error(result, "'N' is not bound", "(1 for 'N')")
    hint = re.search(r"e\.g\. --shape (\S+)", result.stderr)
    assert hint is not None and hint.group(1) == "x=1,4"
    again = runner.invoke(app, ["compile", str(model), "-o", str(out), "--shape", hint.group(1)])
    assert again.exit_code == 0, again.output


def test_every_setting_is_documented_in_the_readme() -> None:
    from service.config import Settings

    readme = (REPO / "README.md").read_text()
    for field in [*Settings.model_fields, "num_threads"]:
        assert f"TEMPER_{field.upper()}" in readme, field
