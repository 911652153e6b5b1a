"""What every lint script ends with: its findings, a one-line summary, and the exit status."""
import pathlib
import sys


def run(check):
    """Calls check(root) on the argument (default: the repository) and exits 1 on findings."""
    root = sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    problems, summary, ok = check(pathlib.Path(root))
    for p in problems:
        print(p)
    print(summary if problems else ok)
    sys.exit(1 if problems else 0)
