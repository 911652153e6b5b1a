"""Live comparison with optax itself: every optimizer nnx has, alone and chained with schedules,
weight decay masks and clipping, over 6 steps of the same gradients, in float32, float64,
bfloat16 and float16. optax runs op by op, so that in bfloat16 and float16 each operation and each
scalar rounds as nnx rounds them: there every case without clipping must equal optax bit for bit
(clipping takes its norm in sums of that dtype in optax, in double in nnx). nnx runs on 1 rank
and on 2 ranks with the kernel split over the mesh and a ZeRO-sharded bias.

Usage: optax_peer.py --values-bin build/tests/optax_peer_values --mpirun mpirun --workdir DIR
The float64 half runs in a child process with JAX_ENABLE_X64=1 (--dtype float64).
"""
import json
import os
import subprocess
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from peer_common import parse_args, run  # noqa: E402

STEPS = 6
SHAPES = {"kernel": (8, 13), "bias": (14,), "scale": (4, 3, 5)}
RANK_TIMEOUT_S = 600
# Bound per element: 2 ulp of the value plus 2 ulp of the largest move (|final - initial|) of its
# tensor. XLA's pow and rsqrt are not correctly rounded (optax's b**t and rmsprop's rsqrt are a
# last bit off at some steps), and an update that is a last bit off moves a parameter that passes
# near zero by many of that parameter's own ulps.
ULPS = 2


# Each case: how both sides build the optimizer (tests/peers/optax_peer_values.cpp reads these).
CASES = [
    {"name": "sgd", "opt": "sgd", "lr": 0.1},
    {"name": "sgd_momentum", "opt": "sgd", "lr": 0.05, "momentum": 0.9},
    {"name": "sgd_nesterov", "opt": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True},
    {"name": "adam", "opt": "adam", "lr": 0.01},
    {"name": "adam_eps", "opt": "adam", "lr": 0.003, "b1": 0.8, "b2": 0.99, "eps": 1e-3},
    {"name": "adamw_cosine_masked", "opt": "adamw",
     "lr": {"schedule": "warmup_cosine", "init": 0.0, "peak": 0.01, "warmup": 2, "decay": 6},
     "weight_decay": 0.1, "mask": "kernel"},
    {"name": "lion", "opt": "lion", "lr": 0.001, "weight_decay": 0.01},
    {"name": "rmsprop", "opt": "rmsprop", "lr": 0.01},
    {"name": "rmsprop_momentum", "opt": "rmsprop", "lr": 0.01, "momentum": 0.9,
     "initial_scale": 0.5},
    {"name": "clip_adam", "opt": "adam", "lr": 0.003, "clip": 1.0},
    {"name": "clip_adamw_piecewise", "opt": "adamw", "clip": 2.5, "weight_decay": 0.05,
     "lr": {"schedule": "piecewise", "init": 0.01, "boundaries": {"2": 0.5, "4": 0.1}}},
    {"name": "clip_not_reached_sgd", "opt": "sgd", "lr": 0.1, "momentum": 0.5, "clip": 1e6},
]

failures = []


def cases_for(dtype):
    """The cases in `dtype`: in float16 an eps of 1e-8 is zero (a division by zero where a second
    moment underflows), so there Adam, AdamW and RMSProp take 1e-4 where the case sets none."""
    if dtype != "float16":
        return CASES
    return [dict(c, eps=c.get("eps", 1e-4)) if c["opt"] in ("adam", "adamw", "rmsprop") else c
            for c in CASES]


def check(ok, message):
    print(("ok   " if ok else "FAIL ") + message, flush=True)
    if not ok:
        failures.append(message)


def learning_rate(spec, dtype):
    if not isinstance(spec, dict):
        return spec
    if spec["schedule"] == "warmup_cosine":
        schedule = optax.warmup_cosine_decay_schedule(spec["init"], spec["peak"], spec["warmup"],
                                                      spec["decay"])
    else:
        schedule = optax.piecewise_constant_schedule(
            spec["init"], {int(k): v for k, v in spec["boundaries"].items()})
    if dtype != "float64":
        return schedule
    # optax's join_schedules evaluates the int32 count in float32 even under x64; given the
    # count as float64, the schedule's own formula runs in float64, as nnx's does.
    return lambda count: schedule(count.astype(jnp.float64))


def optax_optimizer(case, dtype):
    lr = learning_rate(case["lr"], dtype)
    opt = case["opt"]
    if opt == "sgd":
        tx = optax.sgd(lr, momentum=case.get("momentum"), nesterov=case.get("nesterov", False))
    elif opt == "adam":
        tx = optax.adam(lr, b1=case.get("b1", 0.9), b2=case.get("b2", 0.999),
                        eps=case.get("eps", 1e-8))
    elif opt == "adamw":
        mask = None
        if case.get("mask"):
            mask = lambda params: {k: k == case["mask"] for k in params}  # noqa: E731
        tx = optax.adamw(lr, eps=case.get("eps", 1e-8),
                         weight_decay=case.get("weight_decay", 1e-4), mask=mask)
    elif opt == "lion":
        tx = optax.lion(lr, weight_decay=case.get("weight_decay", 1e-3))
    elif opt == "rmsprop":
        tx = optax.rmsprop(lr, eps=case.get("eps", 1e-8), momentum=case.get("momentum"),
                           initial_scale=case.get("initial_scale", 0.0))
    else:
        raise ValueError(opt)
    if "clip" in case:
        tx = optax.chain(optax.clip_by_global_norm(case["clip"]), tx)
    return tx


def write_inputs(workdir, dtype):
    """Parameters and every step's gradients, raw little-endian, with cases.json."""
    rng = np.random.default_rng(7)
    params = {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}
    grads = [{k: (rng.standard_normal(s) * (1 + step)).astype(dtype) for k, s in SHAPES.items()}
             for step in range(STEPS)]
    for k, v in params.items():
        v.tofile(os.path.join(workdir, f"param_{k}.bin"))
    for step, g in enumerate(grads):
        for k, v in g.items():
            v.tofile(os.path.join(workdir, f"grad_{step}_{k}.bin"))
    with open(os.path.join(workdir, "cases.json"), "w") as f:
        json.dump({"dtype": str(np.dtype(dtype)), "steps": STEPS,
                   "shapes": {k: list(s) for k, s in SHAPES.items()},
                   "cases": cases_for(str(np.dtype(dtype)))}, f)
    return params, grads


def optax_run(case, params, grads, dtype):
    tx = optax_optimizer(case, dtype)
    p = {k: jnp.asarray(v) for k, v in params.items()}
    state = tx.init(p)
    for g in grads:
        updates, state = tx.update({k: jnp.asarray(v) for k, v in g.items()}, state, p)
        p = optax.apply_updates(p, updates)
    return {k: np.asarray(v) for k, v in p.items()}


def compare(args, dtype):
    workdir = os.path.join(args.workdir, dtype)
    os.makedirs(workdir, exist_ok=True)
    params, grads = write_inputs(
        workdir, np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype))
    runs = {"1 rank": [args.values_bin, workdir, "1rank"],
            "2 ranks (kernel split, ZeRO bias)": [args.mpirun, "-np", "2", "--oversubscribe",
                                                  args.values_bin, workdir, "2ranks"]}
    for label, cmd in runs.items():
        run(cmd, RANK_TIMEOUT_S)
        tag = cmd[-1]
        for case in cases_for(dtype):
            want = optax_run(case, params, grads, dtype)
            eps = float(ml_dtypes.finfo(np.dtype(dtype)).eps)
            worst_ulps, worst_excess = 0.0, 0.0
            for k, v in want.items():
                got = np.fromfile(os.path.join(workdir, f"out_{tag}_{case['name']}_{k}.bin"),
                                  dtype=v.dtype).reshape(v.shape)
                move = float(np.abs(v.astype(np.float64) - params[k].astype(np.float64)).max())
                assert move > 0, f"{case['name']}: optax did not move {k}"
                diff = np.abs(got.astype(np.float64) - v.astype(np.float64))
                if np.isnan(diff).any():  # a NaN on one side only, or on both: never a match
                    worst_excess = worst_ulps = float("inf")
                    continue
                bound = ULPS * eps * (np.abs(v).astype(np.float64) + move)
                worst_excess = max(worst_excess, float(np.max(diff / bound)))
                worst_ulps = max(worst_ulps, float(np.max(diff / (eps * move))))
            exact = dtype in ("bfloat16", "float16") and "clip" not in case
            check(worst_ulps == 0 if exact else worst_excess <= 1,
                  f"{dtype} {case['name']:<22} {label}: largest difference {worst_ulps:.1f} ulp "
                  f"of the move, {worst_excess:.2f} of the bound{' (must be 0)' if exact else ''}")


def main():
    args = parse_args(lambda p: p.add_argument("--dtype", choices=["float32", "float64"]))
    if args.dtype is None:  # both halves: float64 needs x64 from the start of the process
        compare(args, "float32")
        compare(args, "bfloat16")
        compare(args, "float16")
        child = subprocess.run([sys.executable] + sys.argv + ["--dtype", "float64"],
                               env=dict(os.environ, JAX_ENABLE_X64="1"), timeout=2 * RANK_TIMEOUT_S)
        if child.returncode != 0:
            failures.append("the float64 half failed")
    else:
        assert (args.dtype == "float64") == bool(jax.config.jax_enable_x64)
        compare(args, args.dtype)
    print(f"optax {optax.__version__}, jax {jax.__version__}: "
          f"{'FAILED ' + str(len(failures)) if failures else 'all passed'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
