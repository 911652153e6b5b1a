"""nnx against its peers, side by side in one run on this machine. Workloads:
  (a) the MLP of bench_train_step (784-1024-1024-10, Adam, global batch 256), data parallel on 1, 2
      and 4 ranks: nnx, hand-written LibTorch (1 rank), PyTorch DDP, Flax NNX under nnx.jit;
  (b) the seed-003 DotReluDot at depth 1024 and 4096 on the (2, 4) data x model mesh: nnx, Flax;
  (c) FSDP, the MLP with its kernels split over the data axis on 2 and 4 ranks: nnx, PyTorch FSDP2
      (fully_shard), Flax.
Each rank of nnx and of PyTorch gets cores / ranks threads; Flax runs N fake devices in one process.
Each row runs its systems one after another, --repeats times over (3 by default), so that every
system of a row sees the same spells of the machine. Prints a Markdown table of median samples/s
with nnx / best peer (the medians', and each repeat's), and writes every JSON line to --json.

Usage: peers.py --build build [--steps 50] [--repeats 3] [--json results.jsonl] [--plot plot.png]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
RUN_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run_json(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, env=RUN_ENV, timeout=1800)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"{cmd[0]} exited {out.returncode}")
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    return [l for l in lines if "system" in l]


def mpirun(n, *cmd):
    # Unbound, as the Python peers' processes: mpirun would pin a lone rank to one core.
    return ["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none", *cmd]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args()
    bench = os.path.join(args.build, "tools", "bench")
    py = sys.executable
    steps = str(args.steps)
    rows = []  # (workload, ranks, {system: median samples/s}, [nnx / best peer of each repeat])
    all_lines = []

    def add(workload, ranks, commands):
        """Runs the row's commands in turn, --repeats times over, and keeps the medians."""
        runs = []  # one {system: samples/s} per repeat
        for repeat in range(args.repeats):
            lines = [l for cmd in commands for l in run_json(cmd)]
            runs.append({l["system"]: l["samples_per_s"] for l in lines})
            all_lines.extend(dict(l, workload=workload, repeat=repeat) for l in lines)
        medians = {s: statistics.median(r[s] for r in runs) for s in runs[0]}
        rows.append((workload, ranks, medians, [nnx_over_best_peer(r) for r in runs]))

    train_step = os.path.join(bench, "bench_train_step")
    torch_mlp = [py, os.path.join(here, "peers", "torch_mlp.py")]
    flax = [py, os.path.join(here, "peers", "flax_peers.py")]
    for n in (1, 2, 4):
        add("(a) MLP data parallel", n, [
            mpirun(n, train_step, steps, "dp"),
            torch_mlp + ["--system", "ddp", "--ranks", str(n), "--steps", steps],
            flax + ["mlp", "--devices", str(n), "--steps", steps]])
    for depth in (1024, 4096):
        dot_steps = "10" if depth == 4096 else "20"
        add(f"(b) DotReluDot depth {depth}, mesh (2,4)", 8, [
            mpirun(8, os.path.join(bench, "bench_dot_relu_dot"), str(depth), "2", "4", "256",
                   dot_steps),
            flax + ["dot", "--depth", str(depth), "--steps", dot_steps]])
    for n in (2, 4):
        add("(c) MLP FSDP (kernels over data)", n, [
            mpirun(n, train_step, steps, "fsdp"),
            torch_mlp + ["--system", "fsdp2", "--ranks", str(n), "--steps", steps],
            flax + ["mlp", "--devices", str(n), "--layout", "fsdp", "--steps", steps]])

    systems = ["nnx", "libtorch", "pytorch_ddp", "pytorch_fsdp2", "flax_nnx_jit"]
    print("| workload | ranks | " + " | ".join(systems) + " | nnx / best peer | each repeat |")
    print("|" + "---|" * (len(systems) + 4))
    for workload, ranks, got, each in rows:
        cells = [f"{got[s]:.0f}" if s in got else "" for s in systems]
        print(f"| {workload} | {ranks} | " + " | ".join(cells) +
              f" | {nnx_over_best_peer(got):.2f} | " + ", ".join(f"{r:.2f}" for r in each) + " |")
    if args.json:
        with open(args.json, "w") as f:
            for line in all_lines:
                f.write(json.dumps(line) + "\n")
    if args.plot:
        plot(rows, systems, args.plot)


def nnx_over_best_peer(got):
    peers = [v for k, v in got.items() if k != "nnx"]
    return got["nnx"] / max(peers) if peers else float("nan")


def plot(rows, systems, path):
    """A clustered bar chart of samples/s relative to nnx, one cluster per row (gnuplot)."""
    data = path + ".dat"
    with open(data, "w") as f:
        f.write("row " + " ".join(systems) + "\n")
        for workload, ranks, got, _ in rows:
            depth = workload.split("depth ")[1].split(",")[0] if "depth" in workload else ""
            label = workload.split(")")[0] + ")" + (f" d{depth}" if depth else "") + f" {ranks}r"
            f.write(f'"{label}" ' + " ".join(
                f"{got[s] / got['nnx']:.3f}" if s in got else "-" for s in systems) + "\n")
    script = f"""
set terminal pngcairo size 1100,480 noenhanced
set output '{path}'
set style data histograms
set style histogram clustered gap 1
set style fill solid border -1
set datafile missing '-'
set ylabel 'samples/s relative to nnx'
set yrange [0:*]
set key outside right
set xtics rotate by -30
plot for [i=2:{len(systems) + 1}] '{data}' using i:xtic(1) title columnhead(i)
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.remove(data)


if __name__ == "__main__":
    main()
