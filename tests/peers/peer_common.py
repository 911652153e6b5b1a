"""What the live peers share: their command line, and running nnx's half of a comparison."""
import argparse
import json
import os
import subprocess


def parse_args(extra=None):
    """--values-bin (nnx's program), --mpirun and --workdir; `extra(parser)` adds the rest."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--values-bin", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--workdir", required=True)
    if extra:
        extra(parser)
    return parser.parse_args()


def run(cmd, timeout_s):
    """Runs cmd, printing it; on failure prints its output and exits naming it."""
    print("+ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        print(done.stdout + done.stderr)
        raise SystemExit(f"FAIL {cmd[0]} exited {done.returncode}")


def rank_runs(args, ranks):
    """tag -> command: the values program on 1 rank ("1rank") and under mpirun on `ranks`
    ("<ranks>ranks"), each passed --workdir and its tag."""
    many = f"{ranks}ranks"
    return {"1rank": [args.values_bin, args.workdir, "1rank"],
            many: [args.mpirun, "-np", str(ranks), "--oversubscribe", args.values_bin,
                   args.workdir, many]}


def write_inputs(workdir, data, **listed):
    """Writes each numpy array of `data` as workdir/NAME.bin (raw) and workdir/inputs.json naming
    their shapes and dtypes, with the `listed` entries beside them."""
    os.makedirs(workdir, exist_ok=True)
    for name, value in data.items():
        value.tofile(os.path.join(workdir, name + ".bin"))
    with open(os.path.join(workdir, "inputs.json"), "w") as f:
        json.dump({"inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)}
                              for k, v in data.items()}, **listed}, f)
