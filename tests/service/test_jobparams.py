"""Job parameters: what a route stores is what a worker reads back, and a bad stored value names its
field."""

from __future__ import annotations

from typing import Any

import pytest

from service.jobparams import DEFAULT_BATCH, DEFAULT_TRIALS, CompileParams, JobParamError, TuneParams


def test_compile_params_round_trip_through_json() -> None:
    params = CompileParams(
        shapes={"x": (1, 3, 8, 8)},
        target="haswell",
        opt_level=2,
        use_tuned=False,
        overrides={"conv": "record:7"},
    )
    stored = params.to_json()
    assert stored == {
        "shapes": {"x": [1, 3, 8, 8]},
        "target": "haswell",
        "opt_level": 2,
        "use_tuned": False,
        "overrides": {"conv": "record:7"},
    }
    assert CompileParams.from_json(stored) == params


def test_tune_params_round_trip_and_defaults() -> None:
    params = TuneParams(shapes={"x": (2, 16)}, trials=5, time_budget_s=30.0, batch=2, seed=3)
    assert TuneParams.from_json(params.to_json()) == params
    empty = TuneParams.from_json({})
    assert (empty.trials, empty.batch) == (DEFAULT_TRIALS, DEFAULT_BATCH)
    assert empty.seed == 0 and empty.time_budget_s is None
    assert empty.target is None and empty.opt_level == 3 and dict(empty.shapes) == {}
    assert TuneParams.from_json({"trials": 3}).batch == 3  # a batch never exceeds the budget


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"shapes": {"x": [0, 4]}}, "shape of input 'x' must be a list of positive integers"),
        ({"shapes": {"x": [True, 4]}}, "positive integers"),
        ({"shapes": [1, 2]}, "shapes must map input names"),
        ({"opt_level": 9}, "opt level must be 0..3, got 9"),
        ({"opt_level": "3"}, "opt_level must be an integer"),
        ({"target": 5}, "target must be a CPU name"),
        ({"use_tuned": "yes"}, "use_tuned must be true or false"),
        ({"overrides": ["conv"]}, "overrides must map node names"),
    ],
)
def test_bad_compile_params_name_their_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(JobParamError, match=message.replace("(", r"\(").replace(".", r"\.")):
        CompileParams.from_json(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"trials": 0}, "trials must be a positive integer, not 0"),
        ({"trials": 2.5}, "trials must be a positive integer"),
        ({"batch": -1}, "batch must be a positive integer"),
        ({"time_budget_s": 0}, "time_budget_s must be a positive number"),
        ({"time_budget_s": "10"}, "time_budget_s must be a positive number"),
        ({"seed": -4}, "seed must be a non-negative integer"),
    ],
)
def test_bad_tune_params_name_their_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(JobParamError, match=message):
        TuneParams.from_json(raw)
