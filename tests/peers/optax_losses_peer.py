"""Live comparison of nnx's losses with optax's own, in float32: each loss's values and the
gradient of their sum with respect to its first input, on 1 rank and on 2 ranks with the rows
split over the mesh.

Usage: optax_losses_peer.py --values-bin build/tests/optax_losses_values --mpirun mpirun
       --workdir DIR
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from peer_common import parse_args, rank_runs, run, write_inputs  # noqa: E402

RANK_TIMEOUT_S = 300
ROWS, CLASSES = 8, 10
# Bound per element, in float32 ulps of the larger of the value and 1: the two sides run the
# same formulas, but XLA fuses and reorders them (log_softmax's sum, the exp and log kernels).
ULPS = 4


def inputs():
    rng = np.random.default_rng(11)
    logits = (rng.standard_normal((ROWS, CLASSES)) * 3).astype(np.float32)
    logits[0, 0] = 40.0  # large logits: the stable forms must not overflow
    logits[1, 1] = -40.0
    return {
        "logits": logits,
        "labels": rng.integers(0, CLASSES, ROWS).astype(np.int64),
        "distribution": np.asarray(jax.nn.softmax(rng.standard_normal((ROWS, CLASSES)))
                                   ).astype(np.float32),
        "binary": rng.uniform(0, 1, (ROWS, CLASSES)).astype(np.float32),
        "targets": (rng.standard_normal((ROWS, CLASSES)) * 2).astype(np.float32),
    }


# Each loss: its two inputs, and optax's function of them.
LOSSES = {
    "softmax_cross_entropy_with_integer_labels":
        (("logits", "labels"), optax.softmax_cross_entropy_with_integer_labels),
    "softmax_cross_entropy": (("logits", "distribution"), optax.softmax_cross_entropy),
    "sigmoid_binary_cross_entropy": (("logits", "binary"), optax.sigmoid_binary_cross_entropy),
    "huber_loss": (("logits", "targets"), lambda x, y: optax.huber_loss(x, y, delta=1.5)),
    "squared_error": (("logits", "targets"), optax.squared_error),
    "l2_loss": (("logits", "targets"), optax.l2_loss),
    "cross_entropy_mean": (("logits", "labels"),
                           lambda x, y: optax.softmax_cross_entropy_with_integer_labels(x, y)
                           .mean()),
}


def main():
    args = parse_args()
    data = inputs()
    write_inputs(args.workdir, data, losses={k: list(v[0]) for k, v in LOSSES.items()})
    runs = rank_runs(args, 2)
    failures = []
    eps = float(np.finfo(np.float32).eps)
    for tag, cmd in runs.items():
        run(cmd, RANK_TIMEOUT_S)
        for name, ((first, second), fn) in LOSSES.items():
            x, y = jnp.asarray(data[first]), jnp.asarray(data[second])
            want_value = np.asarray(fn(x, y))
            want_grad = np.asarray(jax.grad(lambda a: jnp.sum(fn(a, y)))(x))
            for part, want in (("value", want_value), ("grad", want_grad)):
                got = np.fromfile(os.path.join(args.workdir, f"{tag}_{name}_{part}.bin"),
                                  dtype=np.float32).reshape(want.shape)
                bound = ULPS * eps * np.maximum(np.abs(want), 1.0)
                worst = float(np.max(np.abs(got.astype(np.float64) - want) / bound))
                ok = np.isfinite(got).all() and worst <= 1
                print(f"{'ok  ' if ok else 'FAIL'} {tag:<7} {name:<42} {part:<5} "
                      f"{worst:.2f} of the bound")
                if not ok:
                    failures.append(f"{tag} {name} {part}")
    print(f"optax {optax.__version__}, jax {jax.__version__}: "
          f"{'FAILED ' + str(len(failures)) if failures else 'all passed'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
