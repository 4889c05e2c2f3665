"""How much a model may ask of the compiler: the bounds that keep a hostile or careless file from
allocating without bound, recursing without bound or keeping a worker busy forever.

Every limit is checked where the quantity first becomes known (the raw protobuf, a value's inferred
type, a constant about to be folded) so that nothing large is allocated before the refusal. The
defaults admit every real model temper targets with a wide margin; a deployment that needs more
passes its own `Limits` in `CompileOptions.limits`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    # elements of any one tensor: a weight, a constant, or a value computed at run time
    tensor_elements: int = 1 << 30
    # elements of all the model's stored tensors together (weights and constants)
    total_constant_elements: int = 1 << 31
    # elements of all values the compiled graph computes (what the runtime's plan must hold)
    total_value_elements: int = 1 << 32
    # nodes in the model, subgraphs included
    nodes: int = 200_000
    # subgraphs nested in subgraphs (If/Loop/Scan bodies)
    graph_depth: int = 16
    # time steps of all the model's recurrent layers (RNN/GRU/LSTM, each direction counted), each
    # step unrolled into graph ops and kernels of its own
    recurrence_steps: int = 4096

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"limit {name} must be a positive integer, got {value!r}")


DEFAULT_LIMITS = Limits()

# Elements a constant-folded result may have. A larger result is computed at run time instead (the
# model still compiles and runs; its memory is then bounded by `tensor_elements`). Large enough for
# a real model's weight transforms (a transposed embedding table), small enough that no tiny file
# makes the compiler allocate gigabytes.
FOLD_ELEMENTS = 1 << 26
