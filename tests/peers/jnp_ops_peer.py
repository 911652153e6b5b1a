"""Live comparison of nnx's ops with jax.numpy's (its norms with Flax's), in float32: every
case's value and the gradient of a loss of its output (see COTANGENT_SHIFT) with respect to the
inputs it lists, on 1 rank and on 4 ranks (mesh (2, 2)), each in six layout rounds that split
the inputs differently. The inputs hold ties (quarter values), NaN, infinities and -0.0, where
the two libraries' conventions can part: ties in max, clip's bounds, abs at zero, NaN in argmax
and comparisons.

Usage: jnp_ops_peer.py --values-bin build/tests/jnp_ops_values --mpirun mpirun --workdir DIR
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

# float64 for the exact results that some cases' bounds measure jax's own error against; the
# float32 inputs keep every other computation in float32.
jax.config.update("jax_enable_x64", True)
from peer_common import parse_args, rank_runs, run, write_inputs  # noqa: E402

RANK_TIMEOUT_S = 600
ROUNDS = 6  # jnp_ops_values.cpp's kRounds
# Bound per float element, in float32 ulps of the larger of the value and 1: the two sides run
# the same formulas with different kernels (XLA's and LibTorch's exp, tanh, erf, ...). Sums of
# quarter values are exact in float32, so reductions meet it too.
ULPS = 4
# The loss differentiated is half the output's sum of squares plus this times its sum, so the
# cotangent (output + shift) is nonzero where an output is 0 (abs's and relu's kinks) or a
# quarter value.
COTANGENT_SHIFT = 0.375
# Cases whose loss is the output's plain sum instead: a cotangent of 1 reaches the NaN outputs of
# maximum and minimum, where jax passes none of it to either operand (the loss above would make
# every cotangent there NaN).
LINEAR_LOSS = {"maximum_nan", "minimum_nan_row"}
# jax_error's allowance: nnx's distance from jax at most this many times jax's own error.
JAX_ERROR_FACTOR = 4


def quarters(rng, shape):
    return (rng.integers(-8, 9, shape) / 4).astype(np.float32)


def inputs():
    rng = np.random.default_rng(5)
    x = quarters(rng, (8, 12))
    x[0, :5] = [-0.5, 0.5, 0.0, 0.25, 1.0]  # on clip's bounds, abs's and relu's kink
    y = quarters(rng, (8, 12))
    y[1] = x[1]  # a whole row of ties
    c = quarters(rng, (8, 1))
    c[:3, 0] = [0.0, -0.25, 0.5]
    xn = x.copy()
    xn[2, 3] = xn[2, 7] = np.nan
    xn[4, 0], xn[5, 11], xn[6, 6] = np.inf, -np.inf, -0.0
    xn[7, :] = np.nan
    return {
        "x": x,
        "y": y,
        "b": quarters(rng, (12,)),
        "c": c,
        "pos": np.abs(x) + np.float32(0.25),
        "xn": xn,
        "w": rng.standard_normal((12, 6)).astype(np.float32),
        "scale": quarters(rng, (12,)),
        "bias": quarters(rng, (12,)),
        "q": rng.standard_normal((4, 4, 8, 8)).astype(np.float32),
        "k": rng.standard_normal((4, 4, 8, 8)).astype(np.float32),
        "v": rng.standard_normal((4, 4, 8, 8)).astype(np.float32),
        "image": rng.standard_normal((2, 6, 6, 3)).astype(np.float32),
        "kernel": rng.standard_normal((3, 3, 3, 4)).astype(np.float32),
        "ids": np.array([3, 0, 11, 3, 5, 3, 7, 0], dtype=np.int64),  # repeats sum their rows
        # From the table's end, and outside it: NaN rows (on a mesh, as every run here is).
        "ids_from_end": np.array([3, -1, 12, -12, -13, 0, 11, -1], dtype=np.int64),
    }


def layer_norm(d):
    """Flax's LayerNorm over x's last dim, with the inputs' scale and bias."""
    norm = nnx.LayerNorm(12, epsilon=1e-6, dtype=d["x"].dtype, param_dtype=d["x"].dtype,
                         rngs=nnx.Rngs(0))
    norm.scale.value, norm.bias.value = d["scale"], d["bias"]
    return norm(d["x"])


def rms_norm(d):
    norm = nnx.RMSNorm(12, epsilon=1e-6, dtype=d["x"].dtype, param_dtype=d["x"].dtype,
                       rngs=nnx.Rngs(0))
    norm.scale.value = d["scale"]
    return norm(d["x"])


def attention(d, causal=False):
    """jax.nn's attention takes [batch, sequence, heads, head dim]; nnx's heads come second."""
    def swap(t):
        return jnp.swapaxes(t, 1, 2)
    return swap(jax.nn.dot_product_attention(swap(d["q"]), swap(d["k"]), swap(d["v"]),
                                             is_causal=causal))


def conv(d, strides, padding):
    return jax.lax.conv_general_dilated(d["image"], d["kernel"], strides, padding,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def matmul_error(data, case, single):
    """What x @ w and its gradients may differ by beyond ULPS, per element: each side's dot
    products sum in their own order, within K eps of the sum of their terms' magnitudes (K terms,
    Higham's bound), and the gradients' cotangent carries the value's error."""
    eps = float(np.finfo(np.float32).eps)
    x, w = data["x"].astype(np.float64), data["w"].astype(np.float64)
    (m, k), n = x.shape, w.shape[1]
    value = 2 * k * eps * (np.abs(x) @ np.abs(w))
    cotangent = np.abs(x @ w) + COTANGENT_SHIFT + value
    return {"value": value,
            "grad_x": 2 * n * eps * (cotangent @ np.abs(w).T) + value @ np.abs(w).T,
            "grad_w": 2 * m * eps * (np.abs(x).T @ cotangent) + np.abs(x).T @ value}


def jax_error(data, case, single):
    """For ops that sum many rounded terms (softmax of dot products, convolutions, norms): each
    part's bound adds JAX_ERROR_FACTOR times jax's own float32 error (`single`, the case's
    float32 parts), its largest distance from the float64 result, so nnx must be about as
    accurate as jax."""
    exact = parts_of(case, {k: jnp.asarray(v.astype(np.float64) if v.dtype == np.float32 else v)
                            for k, v in data.items()})
    return {part: JAX_ERROR_FACTOR * float(np.max(np.abs(single[part] - exact[part])))
            for part in exact}


# Each case: the peer's function of the inputs, the inputs to differentiate (none for bool and
# integer results, nor for inputs holding NaN outside LINEAR_LOSS's cases), and where the bound
# has more to it than ULPS, a function (data, case, the case's float32 parts) giving each part's
# additional error.
CASES = {
    "add": (lambda d: d["x"] + d["y"], ["x", "y"]),
    "sub_row": (lambda d: d["x"] - d["b"], ["x", "b"]),
    "mul_col": (lambda d: d["x"] * d["c"], ["x", "c"]),
    "div": (lambda d: d["x"] / d["pos"], ["x", "pos"]),
    "maximum": (lambda d: jnp.maximum(d["x"], d["y"]), ["x", "y"]),
    "minimum_row": (lambda d: jnp.minimum(d["x"], d["b"]), ["x", "b"]),
    "maximum_nan": (lambda d: jnp.maximum(d["xn"], d["y"]), ["xn", "y"]),
    "minimum_nan_row": (lambda d: jnp.minimum(d["xn"], d["b"]), ["xn", "b"]),
    "add_scalar": (lambda d: d["x"] + 1.5, ["x"]),
    "mul_scalar": (lambda d: d["x"] * -2.0, ["x"]),
    "neg": (lambda d: -d["x"], ["x"]),
    "exp": (lambda d: jnp.exp(d["x"]), ["x"]),
    "log": (lambda d: jnp.log(d["pos"]), ["pos"]),
    "tanh": (lambda d: jnp.tanh(d["x"]), ["x"]),
    "relu": (lambda d: jax.nn.relu(d["x"]), ["x"]),
    "gelu_exact": (lambda d: jax.nn.gelu(d["x"], approximate=False), ["x"]),
    "gelu_tanh": (lambda d: jax.nn.gelu(d["x"], approximate=True), ["x"]),
    "gelu_default": (lambda d: jax.nn.gelu(d["x"]), ["x"]),
    "silu": (lambda d: jax.nn.silu(d["x"]), ["x"]),
    "sigmoid": (lambda d: jax.nn.sigmoid(d["x"]), ["x"]),
    "square": (lambda d: jnp.square(d["x"]), ["x"]),
    "rsqrt": (lambda d: jax.lax.rsqrt(d["pos"]), ["pos"]),
    "sqrt": (lambda d: jnp.sqrt(d["pos"]), ["pos"]),
    "cube": (lambda d: jnp.power(d["x"], 3), ["x"]),
    "power_half": (lambda d: jnp.power(d["pos"], 0.5), ["pos"]),
    "abs": (lambda d: jnp.abs(d["x"]), ["x"]),
    "sin": (lambda d: jnp.sin(d["x"]), ["x"]),
    "cos": (lambda d: jnp.cos(d["x"]), ["x"]),
    "softplus": (lambda d: jax.nn.softplus(d["x"]), ["x"]),
    "log_sigmoid": (lambda d: jax.nn.log_sigmoid(d["x"]), ["x"]),
    "clip": (lambda d: jnp.clip(d["x"], -0.5, 0.5), ["x"]),
    "clip_min": (lambda d: jnp.clip(d["x"], 0.25, None), ["x"]),
    "clip_max": (lambda d: jnp.clip(d["x"], None, 1.0), ["x"]),
    "equal": (lambda d: d["x"] == d["y"], []),
    "not_equal_row": (lambda d: d["x"] != d["b"], []),
    "less_col": (lambda d: d["x"] < d["c"], []),
    "less_equal": (lambda d: d["x"] <= d["y"], []),
    "greater": (lambda d: d["x"] > d["y"], []),
    "greater_equal_row": (lambda d: d["x"] >= d["b"], []),
    "greater_nan": (lambda d: d["xn"] > d["y"], []),
    "equal_zero_nan": (lambda d: d["xn"] == 0.0, []),
    "less_equal_one_nan": (lambda d: d["xn"] <= 1.0, []),
    "not_equal_self_nan": (lambda d: d["xn"] != d["xn"], []),
    "logical_and": (lambda d: jnp.logical_and(d["x"] > 0, d["y"] < 0), []),
    "logical_or": (lambda d: jnp.logical_or(d["x"] > d["y"], jnp.isnan(d["xn"])), []),
    "logical_not": (lambda d: jnp.logical_not(d["x"] >= d["b"]), []),
    "isfinite": (lambda d: jnp.isfinite(d["xn"]), []),
    "isnan": (lambda d: jnp.isnan(d["xn"]), []),
    "where": (lambda d: jnp.where(d["x"] > d["y"], d["x"], d["y"]), ["x", "y"]),
    "where_scalar_y": (lambda d: jnp.where(d["x"] > 0, d["x"], 0.0), ["x"]),
    "where_scalar_x": (lambda d: jnp.where(d["x"] < d["b"], -1.0, d["y"]), ["y"]),
    "where_broadcast": (lambda d: jnp.where(d["c"] > 0, d["x"], d["b"]), ["x", "b"]),
    "where_nan": (lambda d: jnp.where(jnp.isnan(d["xn"]), 0.0, d["xn"]), []),
    "sum_all": (lambda d: jnp.sum(d["x"]), ["x"]),
    "sum0": (lambda d: jnp.sum(d["x"], 0), ["x"]),
    "sum1_keep": (lambda d: jnp.sum(d["x"], 1, keepdims=True), ["x"]),
    "mean_all": (lambda d: jnp.mean(d["x"]), ["x"]),
    "mean1": (lambda d: jnp.mean(d["x"], 1), ["x"]),
    "max0": (lambda d: jnp.max(d["x"], 0), ["x"]),
    "max1_keep": (lambda d: jnp.max(d["x"], 1, keepdims=True), ["x"]),
    "min1": (lambda d: jnp.min(d["x"], 1), ["x"]),
    "argmax0": (lambda d: jnp.argmax(d["x"], 0), []),
    "argmax1": (lambda d: jnp.argmax(d["x"], 1), []),
    "argmin0": (lambda d: jnp.argmin(d["x"], 0), []),
    "argmin1": (lambda d: jnp.argmin(d["x"], 1), []),
    "argmax_nan": (lambda d: jnp.argmax(d["xn"], 1), []),
    "argmin_nan": (lambda d: jnp.argmin(d["xn"], 0), []),
    "max_nan": (lambda d: jnp.max(d["xn"], 1), []),
    "min_nan": (lambda d: jnp.min(d["xn"], 0), []),
    "softmax1": (lambda d: jax.nn.softmax(d["x"], axis=1), ["x"]),
    "softmax0": (lambda d: jax.nn.softmax(d["x"], axis=0), ["x"]),
    "log_softmax1": (lambda d: jax.nn.log_softmax(d["x"], axis=1), ["x"]),
    "matmul": (lambda d: d["x"] @ d["w"], ["x", "w"], matmul_error),
    "matmul_vector_left": (lambda d: d["b"] @ d["w"], ["b", "w"], jax_error),
    "matmul_vector_right": (lambda d: d["x"] @ d["b"], ["x", "b"], jax_error),
    "transpose": (lambda d: d["x"].T, ["x"]),
    "reshape": (lambda d: d["x"].reshape(4, 24), ["x"]),
    "flatten": (lambda d: d["x"].reshape(-1), ["x"]),
    "concatenate0": (lambda d: jnp.concatenate([d["x"], d["y"]], 0), ["x", "y"]),
    "concatenate1": (lambda d: jnp.concatenate([d["x"], d["y"]], 1), ["x", "y"]),
    "slice": (lambda d: d["x"][:, 2:10], ["x"]),
    "select": (lambda d: d["x"][3], ["x"]),
    "matmul_softmax": (lambda d: jax.nn.softmax(d["x"] @ d["w"], axis=1), ["x", "w"],
                       jax_error),
    "matmul_relu_max": (lambda d: jnp.max(jax.nn.relu(d["x"] @ d["w"]), 0), ["x", "w"],
                        jax_error),
    "layer_norm": (layer_norm, ["x", "scale", "bias"], jax_error),
    "rms_norm": (rms_norm, ["x", "scale"], jax_error),
    "attention": (attention, ["q", "k", "v"], jax_error),
    "attention_causal": (lambda d: attention(d, causal=True), ["q", "k", "v"], jax_error),
    "embedding_lookup": (lambda d: jnp.take(d["w"], d["ids"], axis=0), ["w"]),
    "embedding_lookup_from_end": (lambda d: jnp.take(d["w"], d["ids_from_end"], axis=0), ["w"]),
    "conv_same": (lambda d: conv(d, (1, 1), "SAME"), ["image", "kernel"], jax_error),
    "conv_valid_stride2": (lambda d: conv(d, (2, 2), "VALID"), ["image", "kernel"], jax_error),
}


def parts_of(case, d, linear=False):
    """A case's value and gradients on the inputs d, as numpy arrays (`linear`: of the output's
    plain sum, else of the loss COTANGENT_SHIFT describes)."""
    fn, grads = case[0], case[1]
    parts = {"value": np.asarray(fn(d))}
    if grads:
        def loss(*args):
            out = fn({**d, **dict(zip(grads, args))})
            if linear:
                return jnp.sum(out)
            return 0.5 * jnp.sum(jnp.square(out)) + COTANGENT_SHIFT * jnp.sum(out)
        for g, value in zip(grads, jax.grad(loss, tuple(range(len(grads))))(
                *[d[g] for g in grads])):
            parts["grad_" + g] = np.asarray(value)
    return parts


def expected(data):
    """Per case, the peer's value and gradients."""
    d = {k: jnp.asarray(v) for k, v in data.items()}
    return {name: parts_of(case, d, name in LINEAR_LOSS) for name, case in CASES.items()}


def mismatch(got, want, error=0.0):
    """How far got is from want: for floats the worst element over its bound (ULPS, plus the
    case's own `error` where it has one; NaN where NaN, infinities equal), else 0 when equal and
    inf when not."""
    if want.dtype.kind != "f":
        return 0.0 if np.array_equal(got, want) else float("inf")
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return float("inf")
    finite = np.isfinite(want)
    if not np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]):
        return float("inf")
    if not np.isfinite(got[finite]).all():
        return float("inf")
    bound = ULPS * np.finfo(np.float32).eps * np.maximum(np.abs(want[finite]), 1.0)
    bound = bound + np.broadcast_to(error, want.shape)[finite]
    diff = np.abs(got[finite].astype(np.float64) - want[finite])
    return float(np.max(diff / bound, initial=0.0))


def main():
    args = parse_args()
    data = inputs()
    write_inputs(args.workdir, data, cases={k: v[1] for k, v in CASES.items()},
                 linear_loss=sorted(LINEAR_LOSS))
    want = expected(data)
    errors = {name: case[2](data, case, want[name]) if len(case) > 2 else {}
              for name, case in CASES.items()}
    runs = rank_runs(args, 4)
    failures = []
    for tag, cmd in runs.items():
        run(cmd, RANK_TIMEOUT_S)
        for name, parts in want.items():
            worst, bad = 0.0, []
            for r in range(ROUNDS):
                for part, w in parts.items():
                    path = os.path.join(args.workdir, f"{tag}_{r}_{name}_{part}.bin")
                    got = np.fromfile(path, dtype=w.dtype).reshape(w.shape)  # int64 indices
                    m = mismatch(got, w, errors[name].get(part, 0.0))
                    worst = max(worst, m)
                    if m > 1:
                        bad.append(f"round {r} {part}")
                        if len(bad) == 1:
                            print(f"  {tag} {name} round {r} {part}:\n  got  {got.tolist()}\n"
                                  f"  want {w.tolist()}")
            print(f"{'ok  ' if not bad else 'FAIL'} {tag:<7} {name:<20} {worst:.2f} of the bound"
                  + (": " + ", ".join(bad) if bad else ""))
            if bad:
                failures.append(f"{tag} {name}")
    summary = f"FAILED {len(failures)}: " + ", ".join(failures) if failures else "all passed"
    print(f"jax {jax.__version__}: {summary}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
