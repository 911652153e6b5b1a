"""Flax NNX under nnx.jit on N fake CPU devices, on the workloads of nnx's benchmarks:
  mlp      the MLP of bench_train_step (784-1024-1024-10, cross entropy, Adam, global batch 256)
           over a ("data",) mesh; --layout dp (parameters replicated) or fsdp (kernel rows split
           over "data");
  dot      the seed-003 DotReluDot of bench_dot_relu_dot at --depth, (2, 4) ("data", "model")
           mesh, batch 256, MSE, Adam.
Prints one JSON line: median ms per step and samples/s (after 3 compiled warm-up steps).

Usage: flax_peers.py mlp --devices N [--layout dp|fsdp] | dot --depth D [--steps S]
"""
import argparse
import json
import os
import statistics
import sys
import time


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=["mlp", "dot"])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--layout", choices=["dp", "fsdp"], default="dp")
    parser.add_argument("--depth", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=30)
    return parser.parse_args()


args = parse()
devices = 8 if args.workload == "dot" else args.devices
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

BATCH = 256


class Mlp(nnx.Module):
    def __init__(self, fsdp, rngs):
        init = nnx.initializers.lecun_normal()
        kernel = nnx.with_partitioning(init, ("data", None)) if fsdp else init
        self.hidden1 = nnx.Linear(784, 1024, kernel_init=kernel, rngs=rngs)
        self.hidden2 = nnx.Linear(1024, 1024, kernel_init=kernel, rngs=rngs)
        self.head = nnx.Linear(1024, 10, kernel_init=kernel, rngs=rngs)

    def __call__(self, x):
        return self.head(nnx.relu(self.hidden2(nnx.relu(self.hidden1(x)))))


class DotReluDot(nnx.Module):
    def __init__(self, depth, rngs):
        init = nnx.initializers.lecun_normal()
        self.dot1 = nnx.Linear(depth, depth, use_bias=False, rngs=rngs,
                               kernel_init=nnx.with_partitioning(init, (None, "model")))
        self.w2 = nnx.Param(init(rngs.params(), (depth, depth)), sharding=("model", None))

    def __call__(self, x):
        y = nnx.relu(self.dot1(x))
        y = jax.lax.with_sharding_constraint(y, P("data", "model"))
        return jnp.dot(y, self.w2[...])


def median_step_seconds(step, steps):
    for _ in range(3):
        jax.block_until_ready(step())
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        jax.block_until_ready(step())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    if args.workload == "mlp":
        mesh = jax.make_mesh((devices,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
        build = lambda: Mlp(args.layout == "fsdp", nnx.Rngs(0))  # noqa: E731
        x = jax.random.normal(jax.random.key(1), (BATCH, 784))
        y = jax.random.randint(jax.random.key(2), (BATCH,), 0, 10)
        loss = lambda m, x, y: optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean()  # noqa: E731
        lr = 1e-4
    else:
        mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
        build = lambda: DotReluDot(args.depth, nnx.Rngs(0))  # noqa: E731
        x = jax.random.normal(jax.random.key(1), (BATCH, args.depth))
        y = jax.random.normal(jax.random.key(2), (BATCH, args.depth))
        loss = lambda m, x, y: jnp.mean((m(x) - y) ** 2)  # noqa: E731
        lr = 1e-3

    @nnx.jit
    def create():
        model = build()
        state = nnx.state(model)
        nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
        return model

    with jax.set_mesh(mesh):
        model = create()
        optimizer = nnx.Optimizer(model, optax.adam(lr), wrt=nnx.Param)
        data = NamedSharding(mesh, P("data"))
        x, y = jax.device_put(x, data), jax.device_put(y, data)

        @nnx.jit
        def train_step(model, optimizer, x, y):
            value, grads = nnx.value_and_grad(loss)(model, x, y)
            optimizer.update(model, grads)
            return value

        seconds = median_step_seconds(lambda: train_step(model, optimizer, x, y), args.steps)
    line = {"bench": "train_step" if args.workload == "mlp" else "dot_relu_dot",
            "system": "flax_nnx_jit", "devices": devices, "global_batch": BATCH,
            "step_ms": round(seconds * 1e3, 2), "samples_per_s": round(BATCH / seconds, 1)}
    if args.workload == "mlp":
        line["layout"] = args.layout
    else:
        line["depth"], line["mesh"] = args.depth, [2, 4]
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
