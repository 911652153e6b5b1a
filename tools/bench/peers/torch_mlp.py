"""PyTorch's data-parallel peers on the MLP of bench_train_step (784-1024-1024-10, cross entropy,
Adam, global batch 256): DDP, or FSDP2 (fully_shard on every Linear and the root), over gloo on
N CPU processes, each with cores / N threads. Prints one JSON line: median ms per step, samples/s.

Usage: torch_mlp.py --system ddp|fsdp2 --ranks N [--steps 100]
"""
import argparse
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

GLOBAL_BATCH = 256


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlp():
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def worker(rank, args, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.ranks))
    torch.manual_seed(0)
    model = mlp()
    if args.system == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    # The fastest Adam PyTorch offers on CPU: the fused kernel where this build has it.
    try:
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    except (RuntimeError, ValueError):
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
    local = GLOBAL_BATCH // args.ranks
    x, y = torch.randn(local, 784), torch.randint(10, (local,))
    times = []
    for step in range(args.steps + 5):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        dist.barrier()
        if step >= 5:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        step_s = statistics.median(times)
        results.put({"bench": "train_step", "system": f"pytorch_{args.system}",
                     "layout": "fsdp" if args.system == "fsdp2" else "dp", "ranks": args.ranks,
                     "threads": torch.get_num_threads(), "global_batch": GLOBAL_BATCH,
                     "steps": args.steps, "step_ms": round(step_s * 1e3, 2),
                     "samples_per_s": round(GLOBAL_BATCH / step_s)})
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=["ddp", "fsdp2"], required=True)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(args, free_port(), results), nprocs=args.ranks, join=True)
    print(json.dumps(results.get()), flush=True)


if __name__ == "__main__":
    main()
