#!/usr/bin/env python3
"""A counted fault sweep for nnx: damaged checkpoints, ranks killed mid-step and mid-save, and
collective mismatches, each run as counted, seeded trials against the built binaries. Prints a
table of classes x outcomes and exits 1 if any trial had a bad outcome (see README.md).

usage: tools/fault_sweep/sweep.py [--trials N | --quick] [--seed S] [--build DIR] [--keep]
                                  [--only CLASS[:K],...] [--list] [--disk-full-method M]
Python 3 standard library only. Runs one trial at a time, every command under `timeout` and
`nice -n 10`, in a temporary work directory that is removed at the end (unless --keep).
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

RANKS = 2
# The checkpoint trials: 2 epochs of 32 steps, one checkpoint per epoch and one at
# --stop-after-step. --model-parallel 2 gives two shard files and variables split into chunks.
MAIN_FLAGS = ["--train-records", "4096", "--batch", "128", "--epochs", "2", "--hidden", "64",
              "--model-parallel", "2"]
MAIN_EPOCH_STEPS = 32
MAIN_STEPS = 64
# The kill trials: 8 steps per epoch, a checkpoint every 8 steps, bigger checkpoints (3 MiB) so
# that saves take long enough to be interrupted.
KILL_FLAGS = ["--train-records", "1024", "--batch", "128", "--epochs", "30", "--hidden", "256",
              "--model-parallel", "2"]
TRAIN_TIMEOUT = 180    # a training run or a resume (they take 1 to 5 s)
VERIFY_TIMEOUT = 60    # nnx-ckpt verify
KILL_BOUND = 60        # a job with a killed rank must end within this many seconds
COLLECTIVE_TIMEOUT = 10  # NNX_COLLECTIVE_TIMEOUT for the flag-mismatch trials (default: 300)

GOOD = ["clear_error", "recovered"]
BAD = ["unclear_error", "crash", "hang", "silent_wrong", "partial_as_good", "no_restore",
       "setup_error"]
COLUMNS = GOOD + BAD + ["skipped"]
SEVERITY = {"clear_error": 0, "recovered": 0, "skipped": 1, "setup_error": 2,
            "unclear_error": 3, "no_restore": 4, "partial_as_good": 5, "silent_wrong": 6,
            "crash": 7, "hang": 8}
HEADINGS = {"clear_error": "clear", "recovered": "recov", "unclear_error": "unclear",
            "crash": "crash", "hang": "hang", "silent_wrong": "silent", "partial_as_good": "partial",
            "no_restore": "norestore", "setup_error": "setup", "skipped": "skip"}
CRASH_PATTERNS = re.compile(
    r"exited on signal|Segmentation fault|core dumped|terminate called|[Bb]acktrace|"
    r"Process received signal|SIGSEGV|SIGABRT|SIGBUS|Floating point exception")
NNX_LINE = re.compile(r"^nnx: (?:rank (\d+): )?(.*)$", re.M)


# ---------------------------------------------------------------------------------------------
# Running commands

class Run:
    def __init__(self, cmd, rc, secs, out, timed_out, limit):
        self.cmd, self.rc, self.secs, self.out, self.timed_out = cmd, rc, secs, out, timed_out
        self.limit = limit

    def hung(self):
        # `timeout` exits 124 (or 137 after -k); its SIGKILL to its group can also end itself
        return (self.timed_out or self.rc in (124, 137) or
                (self.rc == -signal.SIGKILL and self.secs >= self.limit))

    def crashed(self):
        if self.hung():
            return False
        return self.rc < 0 or self.rc >= 128 or bool(CRASH_PATTERNS.search(self.out))

    def nnx_lines(self):
        return [(m.group(1), m.group(2)) for m in NNX_LINE.finditer(self.out)]

    def brief(self):
        lines = [l for l in self.out.splitlines() if l.startswith(("nnx", "problem:"))]
        text = " | ".join(lines[:3]) if lines else self.out.strip().splitlines()[-1:] or [""]
        text = text if isinstance(text, str) else text[0]
        return f"status {self.rc} in {self.secs:.1f}s: {text[:400]}"


def descendants(pid):
    """The pids below `pid` (from /proc), deepest last."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


def kill_tree(proc):
    """SIGKILL a process this script started and everything below it, one pid at a time."""
    pids = descendants(proc.pid)
    for p in [proc.pid] + pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Runner:
    def __init__(self, args):
        self.env = dict(os.environ)
        self.env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                         "OMPI_MCA_rmaps_base_oversubscribe": "1"})
        self.env.pop("NNX_COLLECTIVE_TIMEOUT", None)
        self.current = None  # the job running now, killed if the sweep is interrupted

    def wrap(self, cmd, timeout):
        return ["timeout", "-k", "5", str(int(timeout)), "nice", "-n", "10"] + list(cmd)

    def start(self, cmd, timeout, log, env=None):
        full_env = dict(self.env)
        full_env.update(env or {})
        f = open(log, "wb")
        proc = subprocess.Popen(self.wrap(cmd, timeout), stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=full_env, start_new_session=True)
        proc._log, proc._file, proc._t0, proc._timeout, proc._cmd = log, f, time.time(), timeout, cmd
        self.current = proc
        return proc

    def finish(self, proc, extra=20):
        timed_out = False
        try:
            proc.wait(timeout=max(1.0, proc._timeout + extra - (time.time() - proc._t0)))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc)
            proc.wait()
        secs = time.time() - proc._t0
        proc._file.close()
        self.current = None
        with open(proc._log, "rb") as f:
            out = f.read().decode("utf-8", "replace")
        return Run(proc._cmd, proc.returncode, secs, out, timed_out, proc._timeout)

    def run(self, cmd, timeout, log, env=None):
        return self.finish(self.start(cmd, timeout, log, env))


# ---------------------------------------------------------------------------------------------
# Checkpoint files

def committed_steps(ckdir):
    if not os.path.isdir(ckdir):
        return []
    return sorted(int(n) for n in os.listdir(ckdir)
                  if n.isdigit() and os.path.exists(os.path.join(ckdir, n, "manifest.json")))


def load_manifest(step_dir):
    with open(os.path.join(step_dir, "manifest.json")) as f:
        return json.load(f)


def save_manifest(step_dir, manifest):
    with open(os.path.join(step_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def shard_files(step_dir):
    return sorted(n for n in os.listdir(step_dir) if n.endswith(".safetensors"))


def header_span(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    return 8 + n


def flip_bit(path, offset, bit):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ (1 << bit)]))
        return b, b ^ (1 << bit)


def csv_rows(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for i, line in enumerate(f):
            if i == 0 or not line.strip():
                continue
            try:
                rows[int(line.split(",", 1)[0])] = line.rstrip("\n")
            except ValueError:
                rows[f"bad:{i}"] = line
    return rows


def dir_size(path):
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))


# ---------------------------------------------------------------------------------------------
# The sweep

class Trial:
    """One trial's steps: each a (name, outcome, detail); the outcome is the worst step's."""

    def __init__(self, cls, index, seed):
        self.cls, self.index, self.seed = cls, index, seed
        self.rng = random.Random(f"{seed}/{cls}/{index}")
        self.steps, self.what, self.primary = [], "", None

    def step(self, name, outcome, detail=""):
        self.steps.append((name, outcome, detail))
        return outcome

    def outcome(self):
        if not self.steps:
            return "skipped"
        worst = max(self.steps, key=lambda s: SEVERITY[s[1]])
        if SEVERITY[worst[1]] > 0:
            return worst[1]
        for name, outcome, _ in self.steps:
            if name == self.primary:
                return outcome
        return self.steps[-1][1]


class Sweep:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build)
        self.fm = os.path.join(self.build, "examples", "fashion_mnist")
        self.ckpt = os.path.join(self.build, "tools", "nnx-ckpt", "nnx-ckpt")
        self.probe = os.path.join(self.build, "tests", "nnx_exit_probe")
        self.runner = Runner(args)
        self.work = tempfile.mkdtemp(prefix="nnx-fault-sweep-")
        self.mpirun = shutil.which("mpirun") or "mpirun"
        self.results = {}
        self.notes = []
        self.chattr_paths = []

    # -- helpers ------------------------------------------------------------------------------
    def mpi(self, flags, ranks=RANKS):
        return [self.mpirun, "-np", str(ranks), "--oversubscribe", self.fm] + flags

    def train(self, out, flags, log, extra=()):
        return self.runner.run(self.mpi(flags + ["--out", out] + list(extra)), TRAIN_TIMEOUT, log)

    def verify(self, path, log, wrap=None):
        cmd = [self.ckpt, "verify", path]
        return self.runner.run((wrap or []) + cmd, VERIFY_TIMEOUT, log)

    def classify_error(self, r, must, ranks=RANKS, max_lines=None):
        """clear_error, unclear_error, crash or hang for a run that should fail; None if it
        succeeded (the caller decides what success means)."""
        if r.hung():
            return "hang", f"no end within the time limit ({r.brief()})"
        if r.crashed():
            return "crash", r.brief()
        if r.rc == 0:
            return None, r.brief()
        lines = r.nnx_lines()
        if not lines:
            return "unclear_error", f"no 'nnx:' line: {r.brief()}"
        per_rank = {}
        for rank, _ in lines:
            per_rank[rank] = per_rank.get(rank, 0) + 1
        if any(n > 1 for n in per_rank.values()) or len(lines) > ranks:
            return "unclear_error", f"{len(lines)} 'nnx:' lines (a rank repeated itself): {r.brief()}"
        if max_lines is not None and len(lines) > max_lines:
            return "unclear_error", f"{len(lines)} 'nnx:' lines, expected {max_lines}: {r.brief()}"
        text = "\n".join(f"rank {rank}: {msg}" if rank is not None else msg for rank, msg in lines)
        if must and not any(re.search(m, text) for m in must):
            return "unclear_error", f"the message names none of {must}: {r.brief()}"
        return "clear_error", r.brief()

    def classify_verify(self, r, must, expect_fail=True):
        if r.hung():
            return "hang", r.brief()
        if r.crashed():
            return "crash", r.brief()
        problems = [l for l in r.out.splitlines() if l.startswith(("problem:", "nnx-ckpt:"))]
        if not expect_fail:
            if r.rc == 0:
                return "recovered", "verified clean (expected)"
            return "unclear_error", f"an intact checkpoint failed verify: {r.brief()}"
        if r.rc == 0:
            return "silent_wrong", f"the damaged checkpoint verified clean: {r.brief()}"
        if r.rc != 1 or not problems:
            return "unclear_error", f"no 'problem:' line or status not 1: {r.brief()}"
        text = "\n".join(problems)
        if must and not any(re.search(m, text) for m in must):
            return "unclear_error", f"verify names none of {must}: {r.brief()}"
        return "clear_error", r.brief()

    def check_resumed(self, r, out, ref, expect_step):
        """A resume that should succeed from `expect_step` and then log the reference's losses
        and epoch lines: recovered, or what went wrong."""
        if r.hung():
            return "hang", r.brief()
        if r.crashed():
            return "crash", r.brief()
        m = re.search(r"resumed from step (\d+) \(epoch (\d+), batch (\d+)\)", r.out)
        if r.rc != 0:
            return "no_restore", f"the committed step {expect_step} did not resume: {r.brief()}"
        if not m:
            return "no_restore", f"no 'resumed from step' line: {r.brief()}"
        step, epoch = int(m.group(1)), int(m.group(2))
        ok, diff = self.same_as_reference(out, ref, step, epoch)
        if step != expect_step:
            kind = "partial_as_good" if step > expect_step else "no_restore"
            return kind, (f"resumed from step {step}, expected the last committed step "
                          f"{expect_step} ({'values equal the reference' if ok else diff})")
        if not ok:
            return "silent_wrong", f"resumed from step {step} but {diff}"
        return "recovered", f"resumed from step {step}, losses equal the reference"

    def same_as_reference(self, out, ref, step, epoch):
        got, want = csv_rows(os.path.join(out, "losses.csv")), csv_rows(os.path.join(ref, "losses.csv"))
        for k, line in want.items():
            if k > step and got.get(k) != line:
                return False, f"losses.csv step {k}: got {got.get(k)!r}, reference {line!r}"
        got_e, want_e = csv_rows(os.path.join(out, "epochs.csv")), csv_rows(os.path.join(ref, "epochs.csv"))
        for k, line in want_e.items():
            if k > epoch and got_e.get(k) != line:
                return False, f"epochs.csv epoch {k}: got {got_e.get(k)!r}, reference {line!r}"
        return True, ""

    def fresh(self, t, tdir, stop):
        """A fresh checkpoint from a real training run: steps 32 and `stop`."""
        out = os.path.join(tdir, "run")
        r = self.train(out, MAIN_FLAGS, os.path.join(tdir, "train.log"),
                       ["--stop-after-step", str(stop)])
        steps = committed_steps(os.path.join(out, "checkpoints"))
        if r.rc != 0 or steps != [MAIN_EPOCH_STEPS, stop]:
            t.step("setup", "setup_error", f"training run: steps {steps}, {r.brief()}")
            return None
        return out

    # -- references ----------------------------------------------------------------------------
    def references(self):
        self.ref_main = os.path.join(self.work, "ref_main")
        r = self.train(self.ref_main, MAIN_FLAGS, os.path.join(self.work, "ref_main.log"))
        steps = committed_steps(os.path.join(self.ref_main, "checkpoints"))
        if r.rc != 0 or len(csv_rows(os.path.join(self.ref_main, "losses.csv"))) != MAIN_STEPS:
            sys.exit(f"sweep: the reference run failed: {r.brief()}\n{r.out[-3000:]}")
        last = os.path.join(self.ref_main, "checkpoints", str(steps[-1]))
        self.ckpt_bytes = dir_size(last)
        self.shard_sizes = [os.path.getsize(os.path.join(last, n)) for n in shard_files(last)]
        self.max_file_bytes = max(self.shard_sizes)
        self.manifest_bytes = os.path.getsize(os.path.join(last, "manifest.json"))
        print(f"reference run: {MAIN_STEPS} steps in {r.secs:.1f}s, checkpoint "
              f"{self.ckpt_bytes} bytes", flush=True)
        self.ref_kill = None

    def kill_reference(self):
        if self.ref_kill is None:
            self.ref_kill = os.path.join(self.work, "ref_kill")
            r = self.train(self.ref_kill, KILL_FLAGS, os.path.join(self.work, "ref_kill.log"))
            if r.rc != 0:
                sys.exit(f"sweep: the kill reference run failed: {r.brief()}\n{r.out[-3000:]}")
            self.kill_secs = r.secs
            print(f"kill reference run: {r.secs:.1f}s", flush=True)
        return self.ref_kill

    # -- capabilities ---------------------------------------------------------------------------
    def probe_caps(self):
        self.can_ns_mount = False
        d = os.path.join(self.work, "cap")
        os.makedirs(d)
        try:
            r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                'mount -t tmpfs -o size=64k tmpfs "$1" && '
                                'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && '
                                '! touch "$1/x" 2>/dev/null', "sh", d],
                               capture_output=True, timeout=30)
            self.can_ns_mount = r.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.can_chattr = False
        if not self.can_ns_mount:
            try:
                r = subprocess.run(["chattr", "+i", d], capture_output=True, timeout=30)
                if r.returncode == 0:
                    self.can_chattr = True
                    subprocess.run(["chattr", "-i", d], capture_output=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        method = self.args.disk_full_method
        if method == "auto":
            method = "tmpfs" if self.can_ns_mount else "fsize"
        if method == "tmpfs" and not self.can_ns_mount:
            sys.exit("sweep: --disk-full-method tmpfs needs unshare -m and mount (not permitted)")
        self.disk_full_method = method
        ro = ("read-only bind mount in a private mount namespace" if self.can_ns_mount else
              "chattr +i (immutable directory)" if self.can_chattr else "none available")
        df = ("a tmpfs of a random size mounted in a private mount namespace" if method == "tmpfs"
              else "RLIMIT_FSIZE of a random size with SIGXFSZ ignored (writes fail with EFBIG)")
        print(f"read-only directory: {ro}; disk full: {df}", flush=True)

    # -- class 1: bad checkpoints ------------------------------------------------------------
    def bad_checkpoint(self, t, damage):
        tdir = t.dir
        stop = t.rng.randint(MAIN_EPOCH_STEPS + 1, MAIN_STEPS - 1)
        out = self.fresh(t, tdir, stop)
        if out is None:
            return
        ck = os.path.join(out, "checkpoints")
        sdir = os.path.join(ck, str(stop))
        d = damage(t, out, ck, sdir, stop)
        if d is None:
            return
        t.what = d["what"]
        pristine = os.path.join(tdir, "after_damage")
        shutil.copytree(ck, pristine, symlinks=True)
        # 1. verify
        v = self.verify(d.get("verify", sdir), os.path.join(tdir, "verify.log"))
        t.step("verify", *self.classify_verify(v, d["must"], d.get("verify_fails", True)))
        # 2. restore
        r = self.runner.run(self.mpi(MAIN_FLAGS + ["--out", out, "--resume"]), TRAIN_TIMEOUT,
                            os.path.join(tdir, "resume.log"))
        if d.get("falls_back") is not None:
            t.step("restore", *self.check_resumed(r, out, self.ref_main, d["falls_back"]))
        else:
            kind, detail = self.classify_error(r, d["must"])
            if kind is None:
                m = re.search(r"resumed from step (\d+)", r.out)
                same, diff = (self.same_as_reference(out, self.ref_main, stop, 1) if m
                              else (False, "no resume line"))
                kind = "silent_wrong"
                detail = (f"the damaged checkpoint restored without an error "
                          f"({'values equal the reference' if same else diff}): {r.brief()}")
            elif re.search(r"^resumed from step", r.out, re.M):
                detail += " [note: rank 0 printed 'resumed from step' before the job ended]"
            t.step("restore", kind, detail)
        t.primary = "restore"
        # 3. the previous committed checkpoint still restores
        prev = d.get("previous", MAIN_EPOCH_STEPS)
        if prev is not None:
            shutil.rmtree(ck)
            shutil.copytree(pristine, ck, symlinks=True)
            if os.path.isdir(sdir):
                os.rename(sdir, os.path.join(ck, f"damaged-{stop}"))
            pv = self.verify(os.path.join(ck, str(prev)), os.path.join(tdir, "verify_prev.log"))
            if pv.rc != 0:
                t.step("previous", "no_restore", f"the previous step {prev} fails verify: {pv.brief()}")
            r = self.runner.run(self.mpi(MAIN_FLAGS + ["--out", out, "--resume"]), TRAIN_TIMEOUT,
                                os.path.join(tdir, "resume_prev.log"))
            t.step("previous", *self.check_resumed(r, out, self.ref_main, prev))

    def names_for(self, sdir, files=(), variables=()):
        return [re.escape(f) for f in files] + [re.escape(v) for v in variables]

    def d_truncated(self, t, out, ck, sdir, stop):
        name = t.rng.choice(shard_files(sdir))
        path = os.path.join(sdir, name)
        size = os.path.getsize(path)
        new = t.rng.randrange(0, size)
        os.truncate(path, new)
        return {"what": f"truncate {stop}/{name} {size} -> {new} bytes",
                "must": self.names_for(sdir, [name])}

    def d_bitflip_data(self, t, out, ck, sdir, stop):
        m = load_manifest(sdir)
        chunks = [(v["path"], c) for v in m["variables"] for c in v["chunks"]]
        total = sum(c["nbytes"] for _, c in chunks)
        k = t.rng.randrange(total)
        for path, c in chunks:
            if k < c["nbytes"]:
                break
            k -= c["nbytes"]
        bit = t.rng.randrange(8)
        off = c["offset"] + k
        before, after = flip_bit(os.path.join(sdir, c["file"]), off, bit)
        return {"what": f"flip bit {bit} of byte {off} of {stop}/{c['file']} (in {path}, "
                        f"0x{before:02x}->0x{after:02x})",
                "must": self.names_for(sdir, [c["file"]], [path])}

    def d_bitflip_header(self, t, out, ck, sdir, stop):
        name = t.rng.choice(shard_files(sdir))
        path = os.path.join(sdir, name)
        span = header_span(path)
        # a quarter of the flips hit the 8-byte length prefix, the rest the JSON
        off = t.rng.randrange(8) if t.rng.random() < 0.25 else t.rng.randrange(8, span)
        bit = t.rng.randrange(8)
        before, after = flip_bit(path, off, bit)
        where = "length prefix" if off < 8 else f"JSON header ({span - 8} bytes)"
        return {"what": f"flip bit {bit} of byte {off} of {stop}/{name}, in the {where}: "
                        f"{chr(before) if 32 <= before < 127 else hex(before)!r}->"
                        f"{chr(after) if 32 <= after < 127 else hex(after)!r}",
                "must": self.names_for(sdir, [name])}

    def d_manifest_dtype(self, t, out, ck, sdir, stop):
        m = load_manifest(sdir)
        v = t.rng.choice(m["variables"])
        old = v["dtype"]
        v["dtype"] = t.rng.choice([d for d in ["F64", "F32", "F16", "BF16", "I64", "I32", "I16",
                                               "I8", "U8", "BOOL"] if d != old])
        save_manifest(sdir, m)
        return {"what": f"manifest of step {stop}: {v['path']} dtype {old} -> {v['dtype']}",
                "must": self.names_for(sdir, ["manifest.json"], [v["path"]])}

    def d_manifest_shape(self, t, out, ck, sdir, stop):
        m = load_manifest(sdir)
        v = t.rng.choice([v for v in m["variables"] if v["shape"]])
        old = list(v["shape"])
        mode = t.rng.choice(["global", "chunk", "both"])
        def edit(shape):
            s = list(shape)
            if len(s) >= 2 and s[0] != s[1] and t.rng.random() < 0.5:
                return s[::-1]  # the same element count
            i = t.rng.randrange(len(s))
            s[i] = max(0, s[i] + t.rng.choice([-1, 1, s[i]]))  # one less, one more, or doubled
            return s
        new = edit(old)
        if mode in ("global", "both"):
            v["shape"] = new
        c = t.rng.choice(v["chunks"])
        old_c = list(c["shape"])
        if mode == "chunk":
            c["shape"] = edit(old_c)
        elif mode == "both" and len(v["chunks"]) == 1:
            c["shape"] = new
        save_manifest(sdir, m)
        return {"what": f"manifest of step {stop}: {v['path']} ({mode}) shape {old} -> "
                        f"{v['shape']}, chunk {old_c} -> {c['shape']}",
                "must": self.names_for(sdir, ["manifest.json"], [v["path"]])}

    def d_start_swap(self, t, out, ck, sdir, stop):
        m = load_manifest(sdir)
        multi = [v for v in m["variables"] if len(v["chunks"]) >= 2]
        v = t.rng.choice(multi)
        a, b = t.rng.sample(range(len(v["chunks"])), 2)
        ca, cb = v["chunks"][a], v["chunks"][b]
        ca["start"], cb["start"] = cb["start"], ca["start"]
        save_manifest(sdir, m)
        return {"what": f"manifest of step {stop}: {v['path']} chunks {a} and {b} swap their "
                        f"starts {cb['start']} and {ca['start']}",
                "must": self.names_for(sdir, [ca["file"], cb["file"]], [v["path"]])}

    def d_manifest_cut(self, t, out, ck, sdir, stop):
        path = os.path.join(sdir, "manifest.json")
        size = os.path.getsize(path)
        new = t.rng.randrange(0, size)
        os.truncate(path, new)
        return {"what": f"truncate {stop}/manifest.json {size} -> {new} bytes",
                "must": self.names_for(sdir, ["manifest.json"])}

    def d_missing_shard(self, t, out, ck, sdir, stop):
        name = t.rng.choice(shard_files(sdir))
        os.remove(os.path.join(sdir, name))
        return {"what": f"delete {stop}/{name}", "must": self.names_for(sdir, [name])}

    def d_foreign_manifest(self, t, out, ck, sdir, stop):
        hidden = t.rng.choice([32, 48, 96, 128])
        donor = os.path.join(t.dir, "donor")
        flags = list(MAIN_FLAGS)
        flags[flags.index("--hidden") + 1] = str(hidden)
        dstop = t.rng.randint(MAIN_EPOCH_STEPS + 1, MAIN_STEPS - 1)
        r = self.train(donor, flags, os.path.join(t.dir, "donor.log"),
                       ["--stop-after-step", str(dstop)])
        dsdir = os.path.join(donor, "checkpoints", str(dstop))
        if r.rc != 0 or not os.path.exists(os.path.join(dsdir, "manifest.json")):
            t.step("setup", "setup_error", f"donor run (--hidden {hidden}): {r.brief()}")
            return None
        mode = t.rng.choice(["manifest", "whole"])
        dm = load_manifest(dsdir)
        mine = {v["path"]: v["shape"] for v in load_manifest(sdir)["variables"]}
        differ = [v["path"] for v in dm["variables"] if mine.get(v["path"]) != v["shape"]]
        if mode == "manifest":
            shutil.copy(os.path.join(dsdir, "manifest.json"), os.path.join(sdir, "manifest.json"))
            files = shard_files(sdir)
        else:
            shutil.rmtree(sdir)
            shutil.copytree(dsdir, sdir)
            files = []
        return {"what": f"step {stop}: the {'manifest' if mode == 'manifest' else 'whole checkpoint'}"
                        f" of a --hidden {hidden} run (step {dstop})",
                "must": self.names_for(sdir, files + ["manifest.json"], differ),
                "verify_fails": mode == "manifest"}

    def d_empty_dir(self, t, out, ck, sdir, stop):
        mode = t.rng.choice(["step", "all"])
        if mode == "step":  # the latest step's directory, emptied: not a checkpoint any more
            for n in os.listdir(sdir):
                os.remove(os.path.join(sdir, n))
            return {"what": f"empty the directory of step {stop}",
                    "must": self.names_for(sdir, ["manifest.json", sdir]),
                    "falls_back": MAIN_EPOCH_STEPS}
        shutil.rmtree(ck)
        os.makedirs(ck)
        return {"what": "empty the checkpoints directory", "verify": ck,
                "must": self.names_for(sdir, [ck, "manifest.json"]), "previous": None}

    # read-only: saving into a read-only directory must fail clearly; the checkpoints there are
    # kept and restore once writable.
    def ro_wrap(self, path):
        if self.can_ns_mount:
            return ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 97; '
                    'shift; exec "$@"', "sh", path]
        return []

    def read_only(self, t):
        if not (self.can_ns_mount or self.can_chattr):
            t.step("setup", "skipped", "no way to make a directory read-only for root here "
                   "(no mount namespace, no chattr)")
            return
        mode = t.rng.choice(["resume", "fresh"])
        out = os.path.join(t.dir, "run")
        ck = os.path.join(out, "checkpoints")
        stop = t.rng.randint(MAIN_EPOCH_STEPS + 1, MAIN_STEPS - 1)
        if mode == "resume":
            if self.fresh(t, t.dir, stop) is None:
                return
            before = {s: dir_size(os.path.join(ck, str(s))) for s in committed_steps(ck)}
        else:
            os.makedirs(ck)
            before = {}
        t.what = (f"resume (from step {stop}) with a read-only checkpoints directory" if mode == "resume"
                  else "a fresh run whose checkpoints directory is read-only")
        flags = MAIN_FLAGS + ["--out", out] + (["--resume"] if mode == "resume" else [])
        if self.can_ns_mount:
            cmd = self.ro_wrap(ck) + self.mpi(flags)
        else:
            subprocess.run(["chattr", "+i", ck], check=True)
            self.chattr_paths.append(ck)
            cmd = self.mpi(flags)
        must = [r"Read-only file system", r"Permission denied", r"Operation not permitted"]
        try:
            if mode == "resume":
                vr = self.verify(os.path.join(ck, str(stop)), os.path.join(t.dir, "verify.log"),
                                 self.ro_wrap(ck) if self.can_ns_mount else None)
                t.step("verify", *self.classify_verify(vr, [], expect_fail=False))
            r = self.runner.run(cmd, TRAIN_TIMEOUT, os.path.join(t.dir, "ro_run.log"))
        finally:
            if not self.can_ns_mount:
                subprocess.run(["chattr", "-i", ck])
                self.chattr_paths.remove(ck)
        if r.rc == 97:
            t.step("setup", "setup_error", "the read-only bind mount failed")
            return
        kind, detail = self.classify_error(r, must)
        if kind is None:
            kind, detail = "silent_wrong", f"the run reported success though it could not save: {r.brief()}"
        t.step("save", kind, detail)
        t.primary = "save"
        after = {s: dir_size(os.path.join(ck, str(s))) for s in committed_steps(ck)}
        if after != before:
            t.step("kept", "partial_as_good", f"checkpoints changed in a read-only directory: {before} -> {after}")
        if mode == "resume":
            r = self.runner.run(self.mpi(MAIN_FLAGS + ["--out", out, "--resume"]), TRAIN_TIMEOUT,
                                os.path.join(t.dir, "resume_prev.log"))
            t.step("previous", *self.check_resumed(r, out, self.ref_main, stop))

    # disk full during save
    def disk_full(self, t):
        out = os.path.join(t.dir, "run")
        ck = os.path.join(out, "checkpoints")
        os.makedirs(ck)
        stop = t.rng.randint(MAIN_EPOCH_STEPS + 1, MAIN_STEPS - 1)
        frac = t.rng.uniform(0.2, 1.8)
        flags = MAIN_FLAGS + ["--out", out, "--stop-after-step", str(stop)]
        log = os.path.join(t.dir, "full_run.log")
        if self.disk_full_method == "tmpfs":
            keep = os.path.join(t.dir, "tmpfs_copy")
            os.makedirs(keep)
            mode = t.rng.choice(["bytes", "bytes", "manifest", "inodes"])
            pages = lambda n: -(-n // 4096)
            shards = sum(pages(n) for n in self.shard_sizes)
            man = pages(self.manifest_bytes)
            if mode == "bytes":  # the space runs out at a random byte of the saves
                size = max(4096, int(frac * self.ckpt_bytes))
                opts = f"size={size}"
                t.what = f"tmpfs of {size} bytes ({frac:.2f} checkpoints)"
            elif mode == "manifest":  # the shards fit, the manifest of the 1st or 2nd save not
                nth = t.rng.randrange(2)
                size = 4096 * (nth * (shards + man) + shards + t.rng.randrange(man))
                opts = f"size={size}"
                t.what = f"tmpfs of {size} bytes (full while writing save {nth + 1}'s manifest)"
            else:  # no inode left for a directory or file of a save
                inodes = t.rng.randint(2, 8)  # 9 hold both saves
                opts = f"nr_inodes={inodes}"
                t.what = f"tmpfs with {inodes} inodes"
            t.what += f" as the checkpoints directory, stop after step {stop}"
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   'mp=$1; opts=$2; keep=$3; shift 3; '
                   'mount -t tmpfs -o "$opts" tmpfs "$mp" || exit 97; '
                   '"$@"; rc=$?; cp -a "$mp"/. "$keep"/; exit $rc',
                   "sh", ck, opts, keep] + self.mpi(flags)
            r = self.runner.run(cmd, TRAIN_TIMEOUT, log)
            if r.rc == 97:
                t.step("setup", "setup_error", f"mount failed: {r.brief()}")
                return
            shutil.rmtree(ck)
            os.rename(keep, ck)
        else:
            # The limit is per file and every checkpoint's files have the same sizes, so the
            # first save fails whenever any does: this checks the error, not the fallback.
            frac = t.rng.uniform(0.05, 0.99)
            size = max(4096, int(frac * self.max_file_bytes))
            t.what = (f"RLIMIT_FSIZE {size} bytes per file ({frac:.2f} of the largest shard "
                      f"file), stop after step {stop}")

            # Only the ranks get the limit (mpirun's and Open MPI's own files would hit it
            # too), with SIGXFSZ ignored so that writes fail with EFBIG; the shared-memory
            # transport's backing files would also exceed it, so the ranks talk over TCP.
            cmd = [self.mpirun, "-np", str(RANKS), "--oversubscribe", "--mca", "btl", "self,tcp",
                   "prlimit", f"--fsize={size}:{size}", "sh", "-c", 'trap "" XFSZ; exec "$@"',
                   "sh", self.fm] + flags
            r = self.runner.run(cmd, TRAIN_TIMEOUT, log)
        kind, detail = self.classify_error(r, [r"No space left on device", r"File too large"])
        steps = committed_steps(ck)
        if kind is None:
            if steps == [MAIN_EPOCH_STEPS, stop]:
                kind, detail = "skipped", f"everything fit ({r.brief()})"
            else:
                kind, detail = "silent_wrong", (f"the run reported success but committed only "
                                                f"steps {steps}: {r.brief()}")
        t.step("save", kind, detail)
        t.primary = "save"
        for s in steps:  # every committed checkpoint must be whole
            v = self.verify(os.path.join(ck, str(s)), os.path.join(t.dir, f"verify_{s}.log"))
            if v.rc != 0:
                t.step("committed", "partial_as_good", f"step {s} has a manifest but fails verify: {v.brief()}")
        r = self.runner.run(self.mpi(MAIN_FLAGS + ["--out", out, "--resume"]), TRAIN_TIMEOUT,
                            os.path.join(t.dir, "resume.log"))
        if steps:
            t.step("previous", *self.check_resumed(r, out, self.ref_main, steps[-1]))
        else:
            kind, detail = self.classify_error(r, [re.escape(ck)])
            if kind is None:
                kind, detail = "partial_as_good", f"resumed though no checkpoint was committed: {r.brief()}"
            t.step("previous", kind, detail)

    # -- class 2: a rank killed ---------------------------------------------------------------
    def kill_rank(self, t, when):
        ref = self.kill_reference()
        for attempt in range(3):
            out = os.path.join(t.dir, f"run{attempt}")
            ck = os.path.join(out, "checkpoints")
            proc = self.runner.start(self.mpi(KILL_FLAGS + ["--out", out]), TRAIN_TIMEOUT,
                                     os.path.join(t.dir, f"train{attempt}.log"))
            target = t.rng.randrange(RANKS)
            delay = t.rng.uniform(0.0, max(0.2, 0.6 * self.kill_secs))
            extra = t.rng.uniform(0.0, 0.005)
            # mid-save: the first save at or after this step (8 steps per epoch, 30 epochs)
            save_from = 8 * t.rng.randint(2, 24)
            killed, hit, where = self.kill_when(proc, ck, target, when, delay, extra, save_from)
            if killed is None:  # the job ended before the moment came
                self.runner.finish(proc)
                continue
            t_kill = time.time()
            try:
                proc.wait(timeout=KILL_BOUND)
                ended = time.time() - t_kill
                r = self.runner.finish(proc)
            except subprocess.TimeoutExpired:
                kill_tree(proc)
                self.runner.finish(proc)
                t.what = f"SIGKILL rank {target} {where}"
                t.step("end", "hang", f"the job did not end within {KILL_BOUND}s of the kill")
                return
            survivors = [p for p in killed["others"] if alive(p)]
            t.what = (f"SIGKILL rank {target} {where}" +
                      (" (a save was in progress)" if hit and when == "step" else "") +
                      f", the job ended {ended:.1f}s later")
            if survivors:
                for p in survivors:
                    os.kill(p, signal.SIGKILL)
                t.step("end", "hang", f"ranks {survivors} outlived mpirun")
                return
            t.step("end", "recovered", f"ended {ended:.1f}s after the kill (status {r.rc})")
            if when == "save" and not hit:
                t.what += " [the save had committed before the kill landed]"
            steps = committed_steps(ck)
            for s in steps:
                v = self.verify(os.path.join(ck, str(s)), os.path.join(t.dir, f"verify_{s}.log"))
                if v.rc != 0:
                    t.step("committed", "partial_as_good", f"step {s} has a manifest but fails verify: {v.brief()}")
            r = self.runner.run(self.mpi(KILL_FLAGS + ["--out", out, "--resume"]), TRAIN_TIMEOUT,
                                os.path.join(t.dir, "resume.log"))
            if not steps:
                t.step("resume", "skipped", "no checkpoint had been committed")
                return
            t.step("resume", *self.check_resumed(r, out, ref, steps[-1]))
            t.primary = "resume"
            t.hit = hit
            return
        t.what = f"SIGKILL a rank mid-{when}"
        t.step("attempt", "skipped", "the job ended before the kill in 3 attempts")

    def rank_pids(self, proc):
        pids = {}
        for p in descendants(proc.pid):
            try:
                with open(f"/proc/{p}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            for e in env:
                if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                    pids[int(e.split(b"=")[1])] = p
        return pids

    def kill_when(self, proc, ck, target, when, delay, extra, save_from):
        """Waits for the first committed checkpoint, then (mid-step) `delay` seconds, or
        (mid-save) a step directory without its manifest; SIGKILLs rank `target`."""
        deadline = time.time() + 60
        while not committed_steps(ck):
            if proc.poll() is not None or time.time() > deadline:
                return None, False, ""
            time.sleep(0.01)
        first = committed_steps(ck)[0]
        hit, where = False, ""
        if when == "step":
            end = time.time() + delay
            while time.time() < end:
                if proc.poll() is not None:
                    return None, False, ""
                time.sleep(0.01)
        else:
            done = set(committed_steps(ck))
            while True:
                if proc.poll() is not None:
                    return None, False, ""
                try:
                    names = os.listdir(ck)
                except OSError:
                    names = []
                pending = [n for n in names if n.isdigit() and int(n) not in done
                           and int(n) >= save_from and not os.path.exists(os.path.join(ck, n, "manifest.json"))
                           and os.listdir(os.path.join(ck, n))]
                if pending:
                    if extra > 0:
                        time.sleep(extra)
                    break
                time.sleep(0.001)
        pids = self.rank_pids(proc)
        if target not in pids:
            return None, False, ""
        steps_before = committed_steps(ck)
        pending_dirs = [n for n in os.listdir(ck) if n.isdigit()
                        and not os.path.exists(os.path.join(ck, n, "manifest.json"))]
        try:
            os.kill(pids[target], signal.SIGKILL)
        except ProcessLookupError:
            return None, False, ""
        hit = bool(pending_dirs)
        if when == "step":
            where = f"{delay:.2f}s after the first checkpoint (committed {steps_before})"
        else:
            where = (f"while step {','.join(pending_dirs) or '?'} was being saved "
                     f"(committed {steps_before})")
        return {"others": [p for r, p in pids.items() if r != target]}, hit, where

    # -- class 3: collective mismatches --------------------------------------------------------
    def probe_case(self, t, mode):
        env, ranks, bound = {}, 2, 30
        must = {"uncaught": [r"rank 1: \[main\] the data file is corrupt"],
                "early_return": [r"rank 1 has left main while this rank waits in"],
                "second_leaver": [r"rank 1 has left main while this rank waits in all_reduce over 'pair'"],
                "cross_wait": [r"collectives wait on each other across communicators"]}
        if mode == "skipped":
            tmo = t.rng.randint(2, 6)
            env = {"NNX_COLLECTIVE_TIMEOUT": str(tmo)}
            must["skipped"] = [rf"has waited {tmo} s \(NNX_COLLECTIVE_TIMEOUT\)"]
            bound = tmo + 25
        if mode == "second_leaver":
            ranks = 3
        if mode == "cross_wait":  # the full check's stall probe, with the timeout far away
            env, bound = {"NNX_CHECK_COLLECTIVES": "1"}, 15
        t.what = f"nnx_exit_probe {mode} on {ranks} ranks" + (f", {env}" if env else "")
        cmd = [self.mpirun, "-np", str(ranks), "--oversubscribe", self.probe, mode]
        r = self.runner.run(cmd, 90, os.path.join(t.dir, "probe.log"), env=env)
        kind, detail = self.classify_error(r, must[mode], ranks,
                                           max_lines=1 if mode == "uncaught" else None)
        if kind is None:
            kind, detail = "silent_wrong", f"exited 0: {r.brief()}"
        if mode == "uncaught" and kind == "clear_error" and r.rc != 1:
            kind, detail = "unclear_error", f"status {r.rc}, expected 1: {r.brief()}"
        if kind == "clear_error" and r.secs > bound:
            kind, detail = "hang", f"took {r.secs:.1f}s (bound {bound}s): {r.brief()}"
        t.step("run", kind, detail)

    def flag_mismatch(self, t):
        odd = t.rng.randrange(RANKS)
        variant = t.rng.choice(["hidden", "batch", "train-records", "epochs", "stop-after-step"])
        base = ["--train-records", "4096", "--batch", "128", "--epochs", "2", "--hidden", "64",
                "--model-parallel", "2"]
        other = list(base)
        def setf(flags, name, value):
            if f"--{name}" in flags:
                flags[flags.index(f"--{name}") + 1] = str(value)
            else:
                flags += [f"--{name}", str(value)]
        value = {"hidden": t.rng.choice([32, 48, 96, 128]), "batch": t.rng.choice([64, 256]),
                 "train-records": t.rng.choice([1024, 2048, 3072]), "epochs": 1,
                 "stop-after-step": t.rng.randint(1, 60)}[variant]
        setf(other, variant, value)
        out = os.path.join(t.dir, "run")
        per_rank = [other if r == odd else base for r in range(RANKS)]
        cmd = [self.mpirun]
        for r, flags in enumerate(per_rank):
            if r:
                cmd.append(":")
            cmd += ["-np", "1", "--oversubscribe", self.fm] + flags + ["--out", out]
        env = {"NNX_COLLECTIVE_TIMEOUT": str(COLLECTIVE_TIMEOUT)}
        if t.rng.random() < 0.5:
            env["NNX_CHECK_COLLECTIVES"] = "1"
        t.what = (f"fashion_mnist with --{variant} {value} on rank {odd} only "
                  f"({' '.join(f'{k}={v}' for k, v in env.items())})")
        r = self.runner.run(cmd, 120, os.path.join(t.dir, "run.log"), env=env)
        must = [r"disagree", r"has left main", r"has waited \d+ s", r"differ"]
        kind, detail = self.classify_error(r, must)
        if kind is None:
            kind, detail = "silent_wrong", f"the mismatched job exited 0: {r.brief()}"
        bound = COLLECTIVE_TIMEOUT + 50
        if kind == "clear_error" and r.secs > bound:
            kind, detail = "hang", f"took {r.secs:.1f}s (bound {bound}s): {r.brief()}"
        t.step("run", kind, detail)

    # -- driver -------------------------------------------------------------------------------
    def classes(self):
        return [
            ("truncated_shard", lambda t: self.bad_checkpoint(t, self.d_truncated)),
            ("bitflip_data", lambda t: self.bad_checkpoint(t, self.d_bitflip_data)),
            ("bitflip_header", lambda t: self.bad_checkpoint(t, self.d_bitflip_header)),
            ("manifest_dtype", lambda t: self.bad_checkpoint(t, self.d_manifest_dtype)),
            ("manifest_shape", lambda t: self.bad_checkpoint(t, self.d_manifest_shape)),
            ("chunk_start_swap", lambda t: self.bad_checkpoint(t, self.d_start_swap)),
            ("manifest_truncated", lambda t: self.bad_checkpoint(t, self.d_manifest_cut)),
            ("missing_shard", lambda t: self.bad_checkpoint(t, self.d_missing_shard)),
            ("foreign_manifest", lambda t: self.bad_checkpoint(t, self.d_foreign_manifest)),
            ("empty_dir", lambda t: self.bad_checkpoint(t, self.d_empty_dir)),
            ("read_only_dir", self.read_only),
            ("disk_full_save", self.disk_full),
            ("kill_mid_step", lambda t: self.kill_rank(t, "step")),
            ("kill_mid_save", lambda t: self.kill_rank(t, "save")),
            ("probe_uncaught", lambda t: self.probe_case(t, "uncaught")),
            ("probe_early_return", lambda t: self.probe_case(t, "early_return")),
            ("probe_skipped", lambda t: self.probe_case(t, "skipped")),
            ("probe_second_leaver", lambda t: self.probe_case(t, "second_leaver")),
            ("probe_cross_wait", lambda t: self.probe_case(t, "cross_wait")),
            ("flag_mismatch", self.flag_mismatch),
        ]

    def run(self, selection, trials):
        self.probe_caps()
        self.references()
        self.bad = []
        for name, fn in self.classes():
            if selection and name not in selection:
                continue
            indices = selection[name] if selection and selection[name] else range(trials)
            counts = {c: 0 for c in COLUMNS}
            for i in indices:
                t = Trial(name, i, self.args.seed)
                t.dir = os.path.join(self.work, f"{name}-{i}")
                os.makedirs(t.dir)
                t0 = time.time()
                try:
                    fn(t)
                except Exception as e:  # a fault in the sweep itself, not in nnx
                    t.step("sweep", "setup_error", f"the sweep failed: {type(e).__name__}: {e}")
                outcome = t.outcome()
                counts[outcome] += 1
                secs = time.time() - t0
                print(f"[{name} #{i}] {t.what}: {outcome} ({secs:.1f}s)", flush=True)
                for step, o, detail in t.steps:
                    if SEVERITY[o] > 0 or self.args.verbose:
                        print(f"    {step}: {o}: {detail}", flush=True)
                if SEVERITY[outcome] > 1:
                    self.bad.append((name, i, outcome, t))
                if not self.args.keep:
                    shutil.rmtree(t.dir, ignore_errors=True)
            self.results[name] = counts

    def table(self):
        width = max(len(n) for n in self.results) if self.results else 10
        cols = ["trials"] + [HEADINGS[c] for c in COLUMNS]
        lines = [f"{'class':<{width}}  " + " ".join(f"{c:>9}" for c in cols)]
        total = {c: 0 for c in COLUMNS}
        for name, counts in self.results.items():
            n = sum(counts.values())
            lines.append(f"{name:<{width}}  {n:>9} " + " ".join(f"{counts[c]:>9}" for c in COLUMNS))
            for c in COLUMNS:
                total[c] += counts[c]
        lines.append(f"{'total':<{width}}  {sum(total.values()):>9} " +
                     " ".join(f"{total[c]:>9}" for c in COLUMNS))
        return "\n".join(lines)

    def cleanup(self):
        if self.runner.current is not None and self.runner.current.poll() is None:
            kill_tree(self.runner.current)
            self.runner.current.wait()
        for p in self.chattr_paths:
            subprocess.run(["chattr", "-i", p])
        if self.args.keep:
            print(f"work directory kept: {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def parse_only(text, names):
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        name, _, k = item.partition(":")
        if name not in names:
            sys.exit(f"sweep: unknown class '{name}' (--list shows them)")
        out.setdefault(name, [])
        if k:
            out[name].append(int(k))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10, help="trials per class (default 10)")
    ap.add_argument("--quick", action="store_true", help="1 trial per class (for CI)")
    ap.add_argument("--seed", type=int, default=None, help="the sweep's seed (default: random)")
    ap.add_argument("--build", default=os.path.join(here, "..", "..", "build"),
                    help="the build directory (default: build/ of this checkout)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--only", default="", help="CLASS[:TRIAL],... run only these (reproduce a trial)")
    ap.add_argument("--list", action="store_true", help="list the classes and exit")
    ap.add_argument("--verbose", action="store_true", help="print every step of every trial")
    ap.add_argument("--disk-full-method", choices=["auto", "tmpfs", "fsize"], default="auto",
                    help="tmpfs (needs mount namespaces) or RLIMIT_FSIZE; auto picks tmpfs if it can")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)
    trials = 1 if args.quick else args.trials
    if trials < 1:
        ap.error("--trials must be >= 1")

    sweep = Sweep.__new__(Sweep)  # for the class names only
    names = [n for n, _ in Sweep.classes(sweep)]
    if args.list:
        print("\n".join(names))
        return 0
    selection = parse_only(args.only, names)
    build = os.path.abspath(args.build)
    for rel in ("examples/fashion_mnist", "tools/nnx-ckpt/nnx-ckpt", "tests/nnx_exit_probe"):
        if not os.access(os.path.join(build, rel), os.X_OK):
            print(f"sweep: {os.path.join(build, rel)} is missing; build it first", file=sys.stderr)
            return 2
    for tool in ("mpirun", "timeout", "nice"):
        if not shutil.which(tool):
            print(f"sweep: '{tool}' is not on PATH", file=sys.stderr)
            return 2

    sweep = Sweep(args)
    t0 = time.time()
    print(f"fault sweep: seed {args.seed}, {trials} trial(s) per class, build {build}, "
          f"work {sweep.work}", flush=True)

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    try:
        sweep.run(selection, trials)
    except KeyboardInterrupt:
        print("sweep: interrupted", file=sys.stderr)
        sweep.cleanup()
        return 130
    secs = time.time() - t0
    print()
    print(sweep.table())
    print(f"\nseed {args.seed}; {secs:.0f}s; columns: clear = a clear error (non-zero status, one "
          "'nnx:' line per failing rank naming the problem), recov = recovered (the job ended in "
          "time and the last committed checkpoint verified and resumed exactly); bad: unclear, "
          "crash, hang, silent (wrong values restored, a damaged checkpoint verified clean, or a "
          "failed save reported as success), partial (a partial or damaged checkpoint taken as "
          "good), norestore (the previous committed checkpoint did not restore), setup (the "
          "fresh training run itself failed)")
    if sweep.bad:
        print(f"\n{len(sweep.bad)} trial(s) with a bad outcome:")
        for name, i, outcome, t in sweep.bad:
            print(f"  {name} #{i}: {outcome}: {t.what}")
            for step, o, detail in t.steps:
                if SEVERITY[o] > 1:
                    print(f"      {step}: {o}: {detail}")
            print(f"      reproduce: {sys.argv[0]} --seed {args.seed} --only {name}:{i} --keep")
    sweep.cleanup()
    return 1 if sweep.bad else 0


if __name__ == "__main__":
    sys.exit(main())
