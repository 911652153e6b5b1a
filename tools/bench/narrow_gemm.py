"""The two orders of a GEMM by a narrow right operand, in LibTorch's CPU BLAS: x [batch, in] @ K
[in, columns] with K row-major (as nnx and Flax store a kernel) or column-major (K^T contiguous, as
torch::nn::Linear stores its weight), and the kernel's gradient as x^T @ g or as (g^T @ x)^T.
nnx picks the column-major order below 12 columns (sharding/ops_matmul.cpp); this prints why.

The calls alternate, median of `reps` each. Prints one JSON line per shape, times in ms and the
ratios row-major / column-major (above 1: the column-major order is faster).

Usage: python3 narrow_gemm.py [--threads 2] [--reps 400]
"""
import argparse
import json
import statistics
import time

import torch


def medians(calls, reps):
    times = {name: [] for name in calls}
    for _ in range(20):  # warm-up
        for call in calls.values():
            call()
    for _ in range(reps):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=400)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for batch in (32, 256, 1024):
        for inputs, columns in [(1024, c) for c in (1, 2, 4, 8, 10, 11, 12, 16, 32)] + [(256, 10),
                                                                                       (4096, 10)]:
            x = torch.randn(batch, inputs)
            kernel = torch.randn(inputs, columns)
            bias = torch.randn(columns)
            g = torch.randn(batch, columns)
            t = medians(
                {
                    "forward_row_major": lambda: torch.addmm(bias, x, kernel),
                    "forward_column_major": lambda: torch.addmm(bias, x, kernel.t().contiguous().t()),
                    "kernel_grad_row_major": lambda: x.t().mm(g),
                    "kernel_grad_column_major": lambda: g.t().mm(x).t().contiguous(),
                },
                args.reps,
            )
            print(json.dumps({
                "bench": "narrow_gemm", "batch": batch, "in": inputs, "columns": columns,
                "threads": args.threads, **{k + "_ms": round(v, 4) for k, v in t.items()},
                "forward_ratio": round(t["forward_row_major"] / t["forward_column_major"], 3),
                "kernel_grad_ratio": round(
                    t["kernel_grad_row_major"] / t["kernel_grad_column_major"], 3),
            }), flush=True)


if __name__ == "__main__":
    main()
