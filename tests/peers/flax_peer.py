"""Live comparison with Flax NNX itself (CPU, 8 fake devices): the seed-003 DotReluDot guide's
five Adam losses against nnx on 1 and 8 ranks, meshes (2,4) and (4,2), at relative 1e-5; and
the initial state of every layer nnx has a Flax twin for, built with Rngs(0), value for value;
those layers' outputs and parameter gradients on the same inputs, at relative 1e-5; and 2^20
samples of jax.random's normal, truncated_normal and uniform, bit for bit.

Usage: flax_peer.py --values-bin build/tests/flax_peer_values --mpirun mpirun --workdir DIR
"""
import json
import os
import subprocess
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402
from peer_common import parse_args  # noqa: E402

RANK_TIMEOUT_S = 600
failures = []


def check(ok, message):
    print(("ok   " if ok else "FAIL ") + message, flush=True)
    if not ok:
        failures.append(message)


class DotReluDot(nnx.Module):
    """The guide's layer, as the guide writes it."""

    def __init__(self, depth, rngs):
        init_fn = nnx.initializers.lecun_normal()
        self.dot1 = nnx.Linear(depth, depth, use_bias=False, rngs=rngs,
                               kernel_init=nnx.with_partitioning(init_fn, (None, "model")))
        self.w2 = nnx.Param(init_fn(rngs.params(), (depth, depth)), sharding=("model", None))

    def __call__(self, x):
        y = jax.nn.relu(self.dot1(x))
        y = jax.lax.with_sharding_constraint(y, P("data", "model"))
        return jnp.dot(y, self.w2[...])


def flax_guide_losses(mesh_shape):
    mesh = jax.make_mesh(mesh_shape, ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)

    @nnx.jit
    def create_sharded_model():
        model = DotReluDot(1024, rngs=nnx.Rngs(0))
        state = nnx.state(model)
        nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
        return model

    with jax.set_mesh(mesh):
        model = create_sharded_model()
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        data = NamedSharding(mesh, P("data", None))
        x = jax.device_put(jax.random.normal(jax.random.key(1), (8, 1024)), data)
        y = jax.device_put(jax.random.normal(jax.random.key(2), (8, 1024)), data)

        @nnx.jit
        def train_step(model, optimizer, x, y):
            loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
            optimizer.update(model, grads)
            return loss

        return [float(train_step(model, optimizer, x, y)) for _ in range(5)]


def sequential(rngs):
    return nnx.Sequential(nnx.Linear(4, 3, rngs=rngs), nnx.relu, nnx.Linear(3, 4, rngs=rngs))


def flax_layers():
    """Flax's twins of the layers flax_peer_values builds, each with Rngs(0)."""
    r = lambda: nnx.Rngs(0)  # noqa: E731
    return {
        "Linear": nnx.Linear(16, 32, rngs=r()),
        "Embed": nnx.Embed(10, 8, rngs=r()),
        "Conv": nnx.Conv(3, 8, (3, 3), rngs=r()),
        "LayerNorm": nnx.LayerNorm(6, rngs=r()),
        "RMSNorm": nnx.RMSNorm(6, rngs=r()),
        "BatchNorm": nnx.BatchNorm(6, rngs=r()),
        "MultiHeadAttention": nnx.MultiHeadAttention(4, 16, decode=False, rngs=r()),
        "LinearGeneral": nnx.LinearGeneral(16, (4, 4), rngs=r()),
        "Sequential": sequential(r()),
        "LoRA": nnx.LoRA(8, 2, 12, rngs=r()),
        "LoRALinear": nnx.LoRALinear(8, 12, lora_rank=2, rngs=r()),
    }


def run(cmd, **env_extra):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               **env_extra)
    print("$ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, check=True, timeout=RANK_TIMEOUT_S, env=env,
                          stderr=subprocess.PIPE, text=True)
    sys.stderr.write(done.stderr)
    return done.stderr


def compare_layers(nnx_doc):
    for name, module in flax_layers().items():
        flat = nnx.to_flat_state(nnx.state(module, nnx.Any(nnx.Param, nnx.BatchStat)))
        expected = {".".join(str(k) for k in path): np.asarray(v.get_value()) for path, v in flat}
        got = {e["path"]: np.asarray(e["value"], dtype=np.float32).reshape(e["shape"])
               for e in nnx_doc[name] if e["kind"] in ("Param", "BatchStat", "LoRAParam")}
        check(sorted(got) == sorted(expected),
              f"{name}: paths nnx {sorted(got)} vs Flax {sorted(expected)}")
        for path in sorted(set(got) & set(expected)):
            a, b = got[path], expected[path]
            same = a.shape == b.shape and np.array_equal(a, b)
            diff = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("nan")
            check(same, f"{name}.{path} {list(b.shape)}: equal to Flax's (max |diff| {diff:.3g})")


def forward_loss(y):
    """flax_peer_values's loss of a layer's output."""
    return 0.5 * jnp.sum(jnp.square(y)) + 0.375 * jnp.sum(y)


def flax_forward(module, call):
    """The layer's output and its parameters' gradients for forward_loss, as numpy arrays."""
    def loss_fn(m):
        y = call(m)
        return forward_loss(y), y
    (_, y), grads = nnx.value_and_grad(loss_fn, has_aux=True)(module)
    flat = nnx.to_flat_state(grads)
    return np.asarray(y), {".".join(str(k) for k in path): np.asarray(v.get_value())
                           for path, v in flat}


def flax_forwards():
    """Flax's outputs and gradients of the layers flax_peer_values's forward mode calls."""
    r = lambda: nnx.Rngs(0)  # noqa: E731
    x = lambda *shape: jax.random.normal(jax.random.key(3), shape)  # noqa: E731
    out = {}
    out["Linear"] = flax_forward(nnx.Linear(16, 32, rngs=r()), lambda m: m(x(3, 16)))
    embed = nnx.Embed(10, 8, rngs=r())
    out["Embed"] = flax_forward(embed, lambda m: m(jnp.array([1, 3, 3, 9, 0])))
    out["Embed.attend"] = flax_forward(embed, lambda m: m.attend(x(2, 8)))
    out["Conv"] = flax_forward(nnx.Conv(3, 8, (3, 3), rngs=r()), lambda m: m(x(2, 6, 6, 3)))
    strided = nnx.Conv(3, 8, (3, 3), strides=(2, 2), padding="VALID", rngs=r())
    out["Conv.strided"] = flax_forward(strided, lambda m: m(x(2, 7, 7, 3)))
    out["LayerNorm"] = flax_forward(nnx.LayerNorm(6, rngs=r()), lambda m: m(x(4, 6)))
    out["RMSNorm"] = flax_forward(nnx.RMSNorm(6, rngs=r()), lambda m: m(x(4, 6)))
    norm = nnx.BatchNorm(6, rngs=r())
    out["BatchNorm"] = flax_forward(norm, lambda m: m(x(4, 6)))
    out["BatchNorm.state"] = {"mean": np.asarray(norm.mean.get_value()),
                              "var": np.asarray(norm.var.get_value())}
    norm.eval()
    out["BatchNorm.eval"] = flax_forward(norm, lambda m: m(x(4, 6)))
    mha = nnx.MultiHeadAttention(4, 16, decode=False, rngs=r())
    out["MultiHeadAttention"] = flax_forward(mha, lambda m: m(x(2, 5, 16)))
    causal = nnx.make_causal_mask(jnp.ones((2, 5)))
    out["MultiHeadAttention.causal"] = flax_forward(mha, lambda m: m(x(2, 5, 16), mask=causal))
    out["LinearGeneral"] = flax_forward(nnx.LinearGeneral(16, (4, 4), rngs=r()),
                                        lambda m: m(x(3, 16)))
    out["Sequential"] = flax_forward(sequential(r()), lambda m: m(x(3, 4)))
    out["LoRA"] = flax_forward(nnx.LoRA(8, 2, 12, rngs=r()), lambda m: m(x(3, 8)))
    out["LoRALinear"] = flax_forward(nnx.LoRALinear(8, 12, lora_rank=2, rngs=r()),
                                     lambda m: m(x(3, 8)))
    for name, layer in (("Dropout", nnx.Dropout(0.5, rngs=r())),
                        ("Dropout.seeded", nnx.Dropout(0.25, rngs=nnx.Rngs(0, dropout=1)))):
        out[name] = [np.asarray(layer(x(4, 6))) for _ in range(2)]
    return out


def close(got, want):
    """Within 1e-5 of the largest of |want| and 1, as the losses are: the two libraries sum
    their products in their own orders."""
    if got.shape != want.shape:
        return False, float("nan")
    diff = float(np.max(np.abs(got - want), initial=0.0))
    return diff <= 1e-5 * max(1.0, float(np.max(np.abs(want), initial=0.0))), diff


def compare_forwards(nnx_doc):
    for name, want in flax_forwards().items():
        if name == "BatchNorm.state":
            got = {e["path"]: np.asarray(e["value"], dtype=np.float32).reshape(e["shape"])
                   for e in nnx_doc[name] if e["kind"] == "BatchStat"}
            for path, value in want.items():
                ok, diff = close(got.get(path, np.array([])), value)
                check(ok, f"BatchNorm's running {path} after a training call: equal to Flax's "
                          f"(max |diff| {diff:.3g})")
            continue
        if name.startswith("Dropout"):
            for call, value in enumerate(want):
                got = np.asarray(nnx_doc[name][call], dtype=np.float32).reshape(value.shape)
                check(np.array_equal(got, value),
                      f"{name} call {call + 1}: Flax's mask and scaling, bit for bit "
                      f"({int(np.sum(got != value))} of {value.size} values differ)")
            continue
        want_y, want_grads = want
        doc = nnx_doc[name]
        ok, diff = close(np.asarray(doc["output"], dtype=np.float32).reshape(doc["shape"]), want_y)
        check(ok, f"{name}: output {list(want_y.shape)} equal to Flax's (max |diff| {diff:.3g})")
        got = {e["path"]: np.asarray(e["value"], dtype=np.float32).reshape(e["shape"])
               for e in doc["grads"]}
        check(sorted(got) == sorted(want_grads),
              f"{name}: gradient paths nnx {sorted(got)} vs Flax {sorted(want_grads)}")
        for path in sorted(set(got) & set(want_grads)):
            ok, diff = close(got[path], want_grads[path])
            check(ok, f"{name}: gradient of {path} equal to Flax's (max |diff| {diff:.3g})")


def compare_random(workdir):
    n = 1 << 20
    expected = {
        "normal": jax.random.normal(jax.random.key(0), (n,)),
        "truncated_normal": jax.random.truncated_normal(jax.random.key(1), -2.0, 2.0, (n,)),
        "uniform": jax.random.uniform(jax.random.key(2), (n,), minval=-3.0, maxval=5.0),
    }
    for name, want in expected.items():
        got = np.fromfile(os.path.join(workdir, name + ".f32"), dtype=np.float32)
        want = np.asarray(want)
        differ = int(np.sum(got != want)) if got.shape == want.shape else -1
        check(differ == 0, f"jax.random.{name}: {differ} of {n} samples differ from nnx's")


def compare_losses(label, got, expected):
    rel = max(abs(g - e) / abs(e) for g, e in zip(got, expected))
    check(len(got) == 5 and rel <= 1e-5,
          f"DotReluDot {label}: losses {['%.7f' % v for v in got]} vs Flax's, max rel {rel:.2e}")


def main():
    args = parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    print(f"jax {jax.__version__}, flax {nnx.__name__.split('.')[0]} on {len(jax.devices())} CPU devices")

    layers_file = os.path.join(args.workdir, "layers.json")
    run([args.values_bin, "layers", layers_file])
    with open(layers_file) as f:
        compare_layers(json.load(f))

    forward_file = os.path.join(args.workdir, "forward.json")
    run([args.values_bin, "forward", forward_file])
    with open(forward_file) as f:
        compare_forwards(json.load(f))

    run([args.values_bin, "random", args.workdir])
    compare_random(args.workdir)

    flax = {shape: flax_guide_losses(shape) for shape in [(2, 4), (4, 2)]}
    print(f"Flax losses (2,4): {flax[(2, 4)]}\nFlax losses (4,2): {flax[(4, 2)]}")
    for ranks, shape in [(1, (1, 1)), (8, (2, 4)), (8, (4, 2))]:
        out = os.path.join(args.workdir, f"losses_{shape[0]}x{shape[1]}.json")
        cmd = [args.values_bin, "dot_relu_dot", str(shape[0]), str(shape[1]), out]
        if ranks > 1:
            cmd = [args.mpirun, "-np", str(ranks), "--oversubscribe"] + cmd
        run(cmd)
        with open(out) as f:
            got = json.load(f)["losses"]
        for flax_shape, expected in flax.items():
            compare_losses(f"nnx {ranks} rank(s) mesh {shape} vs Flax mesh {flax_shape}", got,
                           expected)

    # The same run with NNX_LOG_REDISTRIBUTE=1: the plans are printed, the losses unchanged.
    out = os.path.join(args.workdir, "losses_logged.json")
    log = run([args.mpirun, "-np", "8", "--oversubscribe", args.values_bin, "dot_relu_dot", "2",
               "4", out], NNX_LOG_REDISTRIBUTE="1")
    plans = [line for line in log.splitlines() if line.startswith("[nnx redistribute] ")]
    print("\n".join(plans[:12]))
    with open(out) as f:
        logged = json.load(f)["losses"]
    with open(os.path.join(args.workdir, "losses_2x4.json")) as f:
        check(logged == json.load(f)["losses"], "NNX_LOG_REDISTRIBUTE=1 leaves the losses unchanged")
    check(len(plans) > 0 and all("PartitionSpec(" in line and " -> " in line for line in plans),
          f"NNX_LOG_REDISTRIBUTE=1 printed {len(plans)} plan(s) on rank 0 for the guide")
    check(any("all_reduce over 'model'" in line or "reduce_scatter over 'model'" in line
              for line in plans), "the guide's second matmul leaves a sum over 'model' to resolve")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
