"""PyTorch's own optimizer steps on one GPU, at their fastest (fused=True where PyTorch has a
fused kernel, else foreach), on the parameters bench_device_optimizers uses (a GPT stack of
d_model 1024 and 4 blocks), in float32, bfloat16 or float16. optax's Lion has no PyTorch peer.
Prints one JSON line per chain: median ms per step after 3 warm-up steps, the host's share (until step() returns), and the mean
of --steps steps run back to back with one wait at the end. Refuses to run off a GPU unless
--allow-cpu.

Usage: torch_optimizers_device.py [--steps S] [--d-model D] [--blocks B]
                                  [--dtype float32|bfloat16|float16] [--allow-cpu]
"""
import argparse
import json
import statistics
import sys
import time

import torch


def gpt_shapes(d, blocks):
    one = [[d], [d], [d, 3 * d], [3 * d], [d, d], [d], [d], [d], [d, 4 * d], [4 * d], [4 * d, d], [d]]
    return one * blocks


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def chains(params, fused):
    kind = {"fused": True} if fused else {"foreach": True}
    return {
        "adam": lambda: torch.optim.Adam(params, lr=1e-3, **kind),
        "adamw": lambda: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kind),
        "sgd_momentum": lambda: torch.optim.SGD(params, lr=1e-2, momentum=0.9, **kind),
        "sgd_nesterov": lambda: torch.optim.SGD(params, lr=1e-2, momentum=0.9, nesterov=True,
                                                **kind),
        "rmsprop": lambda: torch.optim.RMSprop(params, lr=1e-3, alpha=0.9, foreach=True),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available() and not args.allow_cpu:
        sys.exit("torch_optimizers_device.py: no GPU (pass --allow-cpu to run on the CPU)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    params = []
    for shape in gpt_shapes(args.d_model, args.blocks):
        p = torch.nn.Parameter((torch.randn(shape, device=device) * 0.02).to(dtype))
        p.grad = (torch.randn(shape, device=device) * 1e-3).to(dtype)
        params.append(p)
    for name, make in chains(params, fused=device == "cuda").items():
        optimizer = make()
        times, host = [], []
        for i in range(-3, args.steps):
            for record in (host, times):
                sync(device)
                t0 = time.perf_counter()
                optimizer.step()
                if record is times:
                    sync(device)
                elapsed = (time.perf_counter() - t0) * 1e3
                if i >= 0:
                    record.append(elapsed)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            optimizer.step()
        sync(device)
        back_to_back = (time.perf_counter() - t0) * 1e3 / args.steps
        mode = "foreach" if name == "rmsprop" or device != "cuda" else "fused"
        print(json.dumps({"bench": "device_optimizers", "chain": name, "system": f"pytorch_{mode}",
                          "device": device, "dtype": args.dtype,
                          "parameters": sum(p.numel() for p in params),
                          "steps": args.steps, "ms": round(statistics.median(times), 3),
                          "host_ms": round(statistics.median(host), 3),
                          "back_to_back_ms": round(back_to_back, 3)}))


if __name__ == "__main__":
    main()
