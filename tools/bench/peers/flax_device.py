"""Flax NNX under nnx.jit on one device (JAX's default: the GPU where jax has CUDA), on the
workloads of bench_device_train, same sizes, same loss, Adam:
  dot_relu_dot  x @ W1 -> relu -> @ W2, MSE (defaults: depth 8192, batch 512)
  gpt           pre-LayerNorm blocks, causal self-attention and a GELU MLP of 4 * d, MSE against a
                random target (defaults: d_model 768, 12 heads, seq 1024, batch 8, 4 blocks)
Matmuls run in full float32 (jax_default_matmul_precision=float32), as LibTorch's do by default,
rather than JAX's TF32 default on GPUs. Refuses to run off a GPU unless --allow-cpu.
Prints one JSON line: median ms per step after 3 compiled warm-up steps.

Usage: flax_device.py WORKLOAD [--steps S] [--allow-cpu] [key=value ...]   (bench_device_train's keys)
"""
import argparse
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import optax
from flax import nnx

DEFAULTS = {"dot_relu_dot": {"depth": 8192, "batch": 512},
            "gpt": {"d_model": 768, "heads": 12, "seq": 1024, "batch": 8, "blocks": 4}}


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=sorted(DEFAULTS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--allow-cpu", action="store_true", help="run on JAX's CPU backend too")
    parser.add_argument("sizes", nargs="*", help="key=value")
    args = parser.parse_intermixed_args()
    size = dict(DEFAULTS[args.workload])
    for item in args.sizes:
        key, _, value = item.partition("=")
        if key not in size:
            parser.error(f"'{item}' is not a size of {args.workload}; keys: {sorted(size)}")
        size[key] = int(value)
    return args, size


class DotReluDot(nnx.Module):
    def __init__(self, depth, rngs):
        self.dot1 = nnx.Linear(depth, depth, use_bias=False, rngs=rngs)
        self.w2 = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (depth, depth)))

    def __call__(self, x):
        return jnp.dot(nnx.relu(self.dot1(x)), self.w2[...])


class Block(nnx.Module):
    def __init__(self, d, heads, rngs):
        self.ln1 = nnx.LayerNorm(d, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(heads, d, decode=False, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(d, 4 * d, rngs=rngs)
        self.down = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x, mask):
        h = x + self.attention(self.ln1(x), mask=mask)
        return h + self.down(nnx.gelu(self.up(self.ln2(h)), approximate=True))


class Stack(nnx.Module):
    def __init__(self, size, rngs):
        self.blocks = nnx.List([Block(size["d_model"], size["heads"], rngs)
                                for _ in range(size["blocks"])])

    def __call__(self, x):
        mask = nnx.make_causal_mask(jnp.ones(x.shape[:2]))
        for block in self.blocks:
            x = block(x, mask)
        return x


def main():
    args, size = parse()
    jax.config.update("jax_default_matmul_precision", "float32")
    if jax.default_backend() != "gpu" and not args.allow_cpu:
        print(f"flax_device.py: JAX runs on '{jax.default_backend()}', not a GPU; install jax "
              "with CUDA, or pass --allow-cpu", file=sys.stderr)
        return 1
    keys = jax.random.split(jax.random.key(1), 2)
    if args.workload == "dot_relu_dot":
        model = DotReluDot(size["depth"], nnx.Rngs(0))
        shape = (size["batch"], size["depth"])
        lr = 1e-3
    else:
        model = Stack(size, nnx.Rngs(0))
        shape = (size["batch"], size["seq"], size["d_model"])
        lr = 1e-4
    x, y = jax.random.normal(keys[0], shape), jax.random.normal(keys[1], shape)
    optimizer = nnx.Optimizer(model, optax.adam(lr), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    for _ in range(3):
        jax.block_until_ready(train_step(model, optimizer, x, y))
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        jax.block_until_ready(train_step(model, optimizer, x, y))
        times.append(time.perf_counter() - t0)
    line = {"bench": "device_train", "workload": args.workload, "system": "flax_nnx_jit",
            "device": str(jax.devices()[0]), "matmul_precision": "float32",
            "steps": args.steps, **size,
            "step_ms": round(statistics.median(times) * 1e3, 3)}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
