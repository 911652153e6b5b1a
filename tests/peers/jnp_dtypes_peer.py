"""Live comparison of the dtypes nnx's ops return with jax.numpy's (64-bit types enabled, as nnx
has them), over every pair of bool, unsigned and signed integers and 16, 32 and 64-bit floats,
on 1 rank and on 2 ranks (rows split): each case's dtype, shape and value. One rule of nnx's own
parts from jax.numpy (README, "Dtypes"): where integers or bools become floating (a division, a
mean, exp, a fractional scalar), the result is float32, LibTorch's default float and JAX's without
64-bit types, where jax.numpy with them gives float64. A C++ scalar is a double: a whole one acts
as a Python int (an integer array keeps its dtype), a fractional one as a Python float. The few
cases where nnx gives another result on purpose are DEPARTURES, each checked for nnx's own value.

Usage: jnp_dtypes_peer.py --values-bin build/tests/jnp_dtypes_values --mpirun mpirun --workdir DIR
"""
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

jax.config.update("jax_enable_x64", True)
from peer_common import parse_args, rank_runs, run, write_inputs  # noqa: E402

RANK_TIMEOUT_S = 300
DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64"]
# Bound per float element, in ulps of the result's dtype times the larger of the value and 1:
# both sides round each op's result once, from kernels that may differ in the last place.
ULPS = 4

BINARY = {
    "add": lambda d, x, y: jnp.add(d["a_" + x], d["b_" + y]),
    "sub": lambda d, x, y: jnp.subtract(d["a_" + x], d["b_" + y]),
    "mul": lambda d, x, y: jnp.multiply(d["a_" + x], d["b_" + y]),
    "div": lambda d, x, y: jnp.divide(d["a_" + x], d["b_" + y]),
    "maximum": lambda d, x, y: jnp.maximum(d["a_" + x], d["b_" + y]),
    "minimum": lambda d, x, y: jnp.minimum(d["a_" + x], d["b_" + y]),
    "less": lambda d, x, y: jnp.less(d["a_" + x], d["b_" + y]),
    "where": lambda d, x, y: jnp.where(d["cond"], d["a_" + x], d["b_" + y]),
    "where_nonzero": lambda d, x, y: jnp.where(d["a_" + x], d["b_" + y], 0.5),  # any condition
    "concatenate": lambda d, x, y: jnp.concatenate([d["a_" + x], d["b_" + y]], 0),
    "matmul": lambda d, x, y: jnp.matmul(d["a_" + x], d["m_" + y]),
    "linear": lambda d, x, y: jnp.matmul(d["a_" + x], d["m_" + y]) + d["c_" + y],
    "not_equal": lambda d, x, y: jnp.not_equal(d["a_" + x], d["b_" + y]),
    "greater_equal": lambda d, x, y: jnp.greater_equal(d["a_" + x], d["b_" + y]),
    "logical_and": lambda d, x, y: jnp.logical_and(d["a_" + x], d["b_" + y]),
    "logical_or": lambda d, x, y: jnp.logical_or(d["a_" + x], d["b_" + y]),
    "xent_labels": lambda d, x, y: optax.softmax_cross_entropy_with_integer_labels(
        d["a_" + x], d["l_" + y]),
    "embed": lambda d, x, y: d["m_" + x][d["l_" + y]],
    "mean_squared_error": lambda d, x, y: jnp.mean(optax.squared_error(d["a_" + x],
                                                                       d["b_" + y])),
    "huber_loss": lambda d, x, y: optax.huber_loss(d["a_" + x], d["b_" + y]),
    "l2_loss": lambda d, x, y: optax.l2_loss(d["a_" + x], d["b_" + y]),
    "softmax_xent": lambda d, x, y: optax.softmax_cross_entropy(d["a_" + x], d["p_" + y]),
    "sigmoid_bce": lambda d, x, y: optax.sigmoid_binary_cross_entropy(d["a_" + x], d["p_" + y]),
}
# The inputs each binary op takes, as jnp_dtypes_values.cpp passes them.
BINARY_ARGS = {
    "where": lambda x, y: ["cond", "a_" + x, "b_" + y],
    "matmul": lambda x, y: ["a_" + x, "m_" + y],
    "linear": lambda x, y: ["a_" + x, "m_" + y, "c_" + y],
    "xent_labels": lambda x, y: ["a_" + x, "l_" + y],  # class indices: integer y only
    "embed": lambda x, y: ["m_" + x, "l_" + y],  # rows of m_x
    # Labels in [0, 1]: the loss's terms share a sign, so that its sum keeps its precision.
    "softmax_xent": lambda x, y: ["a_" + x, "p_" + y],
    "sigmoid_bce": lambda x, y: ["a_" + x, "p_" + y],
}
UNARY = {
    "neg": jnp.negative,
    "abs": jnp.abs,
    "exp": jnp.exp,
    "sqrt": jnp.sqrt,
    "square": jnp.square,
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "sum": jnp.sum,
    "sum_rows": lambda a: jnp.sum(a, 1),
    "mean": jnp.mean,
    "mean_columns": lambda a: jnp.mean(a, 0),
    "max_rows": lambda a: jnp.max(a, 1),
    "argmax_rows": lambda a: jnp.argmax(a, 1),
    "softmax": lambda a: jax.nn.softmax(a, -1),
    "log_softmax": lambda a: jax.nn.log_softmax(a, -1),
    "clip": lambda a: jnp.clip(a, -1, 2),
    "add_2_5": lambda a: a + 2.5,
    "mul_2_5": lambda a: a * 2.5,
    "add_2": lambda a: a + 2,  # nnx's a + 2.0: a whole double acts as a Python int
    "log": jnp.log,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "rsqrt": jax.lax.rsqrt,
    "sigmoid": jax.nn.sigmoid,
    "gelu": jax.nn.gelu,
    "gelu_exact": lambda a: jax.nn.gelu(a, approximate=False),
    "silu": jax.nn.silu,
    "softplus": jax.nn.softplus,
    "log_sigmoid": jax.nn.log_sigmoid,
    "power_2": lambda a: jnp.power(a, 2),
    "power_0_5": lambda a: jnp.power(a, 0.5),
    "power_3": lambda a: jnp.power(a, 3),
    "power_129": lambda a: jnp.power(a, 129),  # past int8's range: wraps
    "isfinite": jnp.isfinite,
    "isnan": jnp.isnan,
    "logical_not": jnp.logical_not,
    "min_rows": lambda a: jnp.min(a, 1),
    "argmin_rows": lambda a: jnp.argmin(a, 1),
    "equal_2": lambda a: a == 2,
    "less_0_5": lambda a: a < 0.5,
    "where_0_5": lambda a: jnp.where(a > 0, a, 0.5),
    "where_2": lambda a: jnp.where(a > 0, a, 2),
    "add_0d": lambda a: jnp.sum(a) + a,  # a 0-d array is an operand like any other in JAX
    "where_0d": lambda a: jnp.where(a > 0, jnp.sum(a), a),
    "vector_matmul": lambda a: a[0] @ a[1],
    "vector_left": lambda a: a[0] @ jnp.transpose(a),
    "vector_right": lambda a: a @ a[0],
}
# Unary ops compared on some dtypes only: integer powers of floats are rounded at every product
# in jax.numpy (129 of them), once in LibTorch.
UNARY_DTYPES = {"power_129": ["uint8", "int8", "int16", "int32", "int64"]}
def softmax_rows(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


# name -> (nnx's value from the inputs, why it is not jax.numpy's).
DEPARTURES = {
    "log_sigmoid_uint8": (lambda d: (-np.logaddexp(0, -d["a_uint8"].astype(np.float64)))
                          .astype(np.float32),
                          "jax.nn.log_sigmoid negates the input in uint8, which wraps"),
    "softmax_uint8": (lambda d: softmax_rows(d["a_uint8"].astype(np.float64)),
                      "jax.nn.softmax subtracts the row's max in uint8, which wraps: NaN"),
    "clip_uint8": (lambda d: np.clip(d["a_uint8"], 0, 2),
                   "jax.numpy wraps the bound -1 to 255 in uint8, so that every value becomes 2"),
    "square_bool": (lambda d: d["a_bool"].astype(np.int64),
                    "bools count in int64, the default int with 64-bit types; jax.numpy: int32"),
    "power_2_bool": (lambda d: d["a_bool"].astype(np.int64), "as square_bool"),
    "power_3_bool": (lambda d: d["a_bool"].astype(np.int64), "as square_bool"),
    "log_softmax_uint8": (lambda d: np.log(softmax_rows(d["a_uint8"].astype(np.float64))),
                          "jax.nn.log_softmax subtracts the row's max in uint8, which wraps"),
    "sum_uint8": (lambda d: np.sum(d["a_uint8"], dtype=np.int64),
                  "LibTorch sums unsigned bytes into int64, jax.numpy into uint64"),
    "sum_rows_uint8": (lambda d: np.sum(d["a_uint8"], 1, dtype=np.int64),
                       "LibTorch sums unsigned bytes into int64, jax.numpy into uint64"),
    "add_0d_uint8": (lambda d: np.sum(d["a_uint8"], dtype=np.int64) + d["a_uint8"], "as sum_uint8"),
    "where_0d_uint8": (lambda d: np.where(d["a_uint8"] > 0, np.sum(d["a_uint8"], dtype=np.int64),
                                          d["a_uint8"]), "as sum_uint8"),
}


def values(rng, dtype, shape, nonzero=False):
    """Small values every dtype holds exactly: quarters in [-2, 2] for floats, [-3, 3] for
    signed integers, [0, 5] for unsigned; nonzero ones (divisors) where asked."""
    if dtype == "bool":
        return np.ones(shape, bool) if nonzero else rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith("uint"):
        return rng.integers(1 if nonzero else 0, 6, shape).astype(dtype)
    if dtype.startswith("int"):
        v = rng.integers(-3, 4, shape)
        return np.where(nonzero & (v == 0), 2, v).astype(dtype)
    v = rng.integers(-8, 9, shape) / 4
    return np.where(nonzero & (v == 0), 0.75, v).astype(jnp.dtype(dtype))


def probabilities(rng, dtype, shape):
    """Values in [0, 1]: 0 and 1 for bools and integers, quarters for floats."""
    if dtype == "bool" or "int" in dtype:
        return rng.integers(0, 2, shape).astype(dtype)
    return (rng.integers(0, 5, shape) / 4).astype(jnp.dtype(dtype))


def inputs():
    rng = np.random.default_rng(11)
    data = {"cond": rng.integers(0, 2, (4, 6)).astype(bool)}
    for t in DTYPES:
        data["a_" + t] = values(rng, t, (4, 6))
        data["b_" + t] = values(rng, t, (4, 6), nonzero=True)
        data["m_" + t] = values(rng, t, (6, 3))
        data["c_" + t] = values(rng, t, (3,))
        data["p_" + t] = probabilities(rng, t, (4, 6))
        if t.startswith(("int", "uint")):
            data["l_" + t] = rng.integers(0, 6, (4,)).astype(t)  # classes, rows of m
    return data


def cases(data):
    """name -> ([op, inputs...], jax.numpy's value), for every case jax.numpy computes."""
    d = {k: jnp.asarray(v) for k, v in data.items()}
    out = {}

    def add(name, call, fn):
        try:
            out[name] = (call, np.asarray(fn()))
        except TypeError:  # jax.numpy refuses it too (bool subtract, sigmoid of integers)
            pass

    for op, fn in BINARY.items():
        for x in DTYPES:
            for y in DTYPES:
                args = BINARY_ARGS.get(op, lambda x, y: ["a_" + x, "b_" + y])(x, y)
                if any(name not in data for name in args):
                    continue  # labels of a dtype that holds no class indices
                add(f"{op}_{x}_{y}", [op] + args, lambda: fn(d, x, y))
    for op, fn in UNARY.items():
        for x in UNARY_DTYPES.get(op, DTYPES):
            add(f"{op}_{x}", [op, "a_" + x], lambda: fn(d["a_" + x]))
    return out


def nnx_dtype(want, call, data):
    """The dtype nnx gives: jax.numpy's, except float32 where integers or bools became float64
    (no float64 operand; a where's condition is none)."""
    operands = call[2:] if call[0] in ("where", "where_nonzero") else call[1:]
    inputs_64 = any(data[name].dtype == np.float64 for name in operands)
    return np.dtype(np.float32) if want == np.float64 and not inputs_64 else want


def mismatch(got, want, inputs):
    """None where got equals want, else why. Floats: NaN where NaN, infinities alike, the rest
    within ULPS of the least precise of got's dtype and the floating inputs' (a float32 softmax
    of float64 labels is as precise as float32)."""
    if not jnp.issubdtype(got.dtype, jnp.floating):  # numpy's kind of bfloat16 is "V"
        return None if np.array_equal(got, want) else "values differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return "NaN in other places"
    if not np.array_equal(g[np.isinf(w)], w[np.isinf(w)]) or np.isinf(g[np.isfinite(w)]).any():
        return "infinities differ"
    ok = np.isfinite(w)
    eps = max(float(jnp.finfo(t).eps) for t in [got.dtype] + inputs
              if jnp.issubdtype(t, jnp.floating))
    bound = ULPS * eps * np.maximum(np.abs(w[ok]), 1.0)
    return None if np.all(np.abs(g[ok] - w[ok]) <= bound) else "values differ"


def main():
    args = parse_args()
    data = inputs()
    want = cases(data)
    write_inputs(args.workdir, data, cases={k: v[0] for k, v in want.items()})
    runs = rank_runs(args, 2)
    failures = []
    for tag, cmd in runs.items():
        run(cmd, RANK_TIMEOUT_S)
        with open(os.path.join(args.workdir, f"{tag}_results.json")) as f:
            results = json.load(f)
        for name, (call, value) in want.items():
            got = results[name]
            expected = nnx_dtype(value.dtype, call, data)
            if name in DEPARTURES:
                value = np.asarray(DEPARTURES[name][0](data))
                expected = value.dtype
            if "error" in got:
                why = "threw: " + got["error"].splitlines()[0][:200]
            elif got["dtype"] != str(expected) or tuple(got["shape"]) != value.shape:
                why = (f"gave {got['dtype']} {got['shape']}, "
                       f"jax.numpy {expected} {list(value.shape)}")
            else:
                path = os.path.join(args.workdir, f"{tag}_{name}.bin")
                result = np.fromfile(path, dtype=expected).reshape(value.shape)
                why = mismatch(result, value, [data[i].dtype for i in call[1:]])
                if why:
                    why += f": got {result.tolist()}, want {value.tolist()}"
            if why:
                failures.append(f"{tag} {name}")
                print(f"FAIL {tag} {name}: {why}")
        print(f"{tag}: {len(want)} cases compared")
    summary = f"FAILED {len(failures)} cases" if failures else "all passed"
    print(f"jax {jax.__version__}: {summary}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
