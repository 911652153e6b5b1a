"""What the live peers share: their command line, and running nnx's half of a comparison."""
import argparse
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
