"""Graph operators, one module per family; importing this package registers every op.

The list below is the whole vocabulary of the graph IR (see each module's docstring for the ops
and their attributes).
"""

from compiler.ops import (  # noqa: F401  (imported to register their ops)
    activation,
    binary,
    conv2d,
    conv2d_blocked,
    conv2d_int8,
    conv2d_winograd,
    conv_transpose,
    elementwise,
    gather,
    grid_sample,
    layout,
    matmul,
    matmul_int8,
    norm,
    pool,
    reduce,
    resize,
    scan,
    scatter,
    softmax,
    topk,
    transform,
)
