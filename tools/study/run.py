"""Running cells: one trainer run under mpirun per cell and its record (status, final metric, eval
curve, the validation figure choices are made on, machine, the binary's commit and version),
the cache of finished cells (a cell folder's study_cell.json, or an earlier report's
cells.json; a cell counts as finished for the trainer version that ran it), and an ETA for the
cells left."""
import errno
import fcntl
import itertools
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

from runlog import read_metrics

from .spec import ROOT, StudyError, fmt_metric, fmt_time

CELL_MARKER = "study_cell.json"


def read_curve(folder, metric):
    """From a run's metrics.jsonl: eval points [(step, value)], loss points [(step, loss)] and
    the wall time of each evaluation [(step, seconds since the run started)]."""
    rows = read_metrics(folder)
    if rows is None:
        return [], [], []
    evals, losses, walls = {}, {}, {}
    for row in rows:
        if metric in row and isinstance(row.get("step"), int):
            evals[row["step"]] = row[metric]
            if isinstance(row.get("wall_s"), (int, float)):
                walls[row["step"]] = row["wall_s"]
        if "loss" in row and isinstance(row.get("step"), int):
            losses[row["step"]] = row["loss"]
    return sorted(evals.items()), sorted(losses.items()), sorted(walls.items())


def first_error(log_text):
    """The first error the trainer logged (with its indented continuation lines), else the log's
    last lines: what to show for a failed cell instead of mpirun's abort banner."""
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if " error: " in line:
            more = list(itertools.takewhile(lambda l: l.startswith("  "), lines[i + 1:i + 4]))
            return " ".join([line.split(" error: ", 1)[1]] + [m.strip() for m in more])
    return " | ".join([l for l in lines if l.strip()][-4:])


def is_diverged_value(study, value):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return True
    if study.diverged is None:
        return False
    return value <= study.diverged if study.goal == "max" else value >= study.diverged


class CellBusy(StudyError):
    """A cell's folder is the output folder of a trainer run that is still alive (one that outlived
    the runner that started it): the runner neither deletes nor reuses it."""


def flock_or_holder(fd):
    """Takes an exclusive flock on `fd` without waiting: None when taken, else the text the holder
    wrote in the file ("process PID on HOST since TIME", as base/dir_lock.cc and lock_study write
    it). OSError for any other failure."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        return os.pread(fd, 512, 0).decode(errors="replace").strip() or "a process that wrote nothing there"


def lock_holder(folder):
    """Who holds `folder`/.lock, the flock a trainer holds on its output folder for its whole run
    (base/dir_lock.cc), or None when no live process holds it (no such file: none; the kernel drops
    the lock when its process ends)."""
    try:
        fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return flock_or_holder(fd)
    finally:
        os.close(fd)  # (releases the lock taken to test it)


# The study-level lock: one runner at a time on a study's runs folder and on its results folder
# (two would delete each other's cell folders and overwrite each other's cells.json).
STUDY_LOCK = ".study.lock"


def lock_study(folder, what):
    """Takes an exclusive flock on `folder`/.study.lock (the folder made if absent) for this
    process, writes the holder's PID, host and start time into it, and returns its descriptor
    (closing it releases the lock; the kernel drops it however the process ends). StudyError when
    another process holds it, naming the file, the holder and what to do. `what` names the
    folder's option (--runs, --results)."""
    path = os.path.join(folder, STUDY_LOCK)
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise StudyError(f"{what} {folder}: cannot make the lock file {path} ({e.strerror})")
    try:
        holder = flock_or_holder(fd)
    except OSError as e:
        os.close(fd)
        raise StudyError(f"{what} {folder}: cannot lock {path} ({e.strerror})")
    if holder:
        os.close(fd)
        pid = holder.split()[1] if holder.startswith("process ") else "PID"
        raise StudyError(f"{what} {folder} is in use by another study.py ({holder}, which holds {path}): "
                         f"wait for it to end, or stop it (kill {pid}: its cell in progress stops at a step with "
                         f"a checkpoint), or give this invocation another {what}")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    try:  # the holder's description, for the message above; a failure to write it loses only that
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {platform.node()} since {when}\n".encode(), 0)
    except OSError:
        pass
    return fd


def busy_message(cell_name, folder, holder):
    return (f"{cell_name}: its folder {folder} is in use by a live trainer run ({holder}, which holds "
            f"{os.path.join(folder, '.lock')}); an earlier runner's run that outlived it (kill -9 of study.py "
            f"leaves its mpirun training)? The runner neither deletes nor reuses that folder: wait for that run "
            f"to end, or kill it (the PID named), then run the study again")


def run_cell(cell, args, folder, deadline=None, progress=None):
    """Runs one cell; returns its record (also written as study_cell.json unless it failed).
    deadline (cut_off): (steps, label of the point that reached the target in them): the run
    ends at its first evaluation from that step on if it has not reached the target by then.
    progress: called every PROGRESS_S while the cell trains (a Progress)."""
    study = cell.study
    holder = lock_holder(folder) if os.path.isdir(folder) else None
    if holder:
        raise CellBusy(busy_message(cell.name, folder, holder))
    # An unfinished earlier attempt starts again, unless the study resumes cells: then the
    # trainer goes on from the attempt's newest checkpoint (--resume auto; fresh if it has none),
    # if the same trainer version made it. A finished (stale) cell always starts again.
    resumed = study.resume_cells and os.path.isdir(folder) and \
        not os.path.exists(os.path.join(folder, CELL_MARKER)) and \
        attempt_version(os.path.join(folder, "log.txt")) == getattr(args, "trainer_version", None)
    if os.path.isdir(folder) and not resumed:
        shutil.rmtree(folder)
    os.makedirs(folder, exist_ok=True)
    mpirun = [args.mpirun, "-np", str(cell.ranks), "--oversubscribe", "--bind-to", "none",
              "--mca", "mpi_yield_when_idle", "1"]
    cmd = mpirun + [args.trainer, "--config", study.base_path]
    # Not settings of the cell (its hash leaves them out): where it runs, and a cut-off deadline.
    extra = [f"output.dir={folder}", "checkpoint.overwrite=true"]
    device = getattr(args, "device", "cpu")
    if device != "cpu":
        extra.append(f"train.device={device}")
    if deadline:
        extra.append(f"train.stop_at.give_up_at_step={deadline[0]}")
    for s in cell.trainer_sets() + extra:
        cmd += ["--set", s]
    cmd += study.trainer_args
    if study.resume_cells:
        cmd += ["--resume", "auto"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    stopped_for = []  # why the runner stopped the run itself (missing_figures), if it did

    def tick():  # each PROGRESS_S while the cell trains: true stops the run
        if progress:
            progress()
        reason = missing_figures(study, folder)
        if reason:
            stopped_for.append(reason)
        return bool(reason)
    start = time.time()
    log_path = os.path.join(folder, "log.txt")
    try:
        with open(log_path, "a" if resumed else "w") as log:
            if resumed:
                log.write("\n# study.py: an earlier attempt of this cell was interrupted; resuming it\n")
            log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
            log.flush()
            rc = call_stopping_at_a_step(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                         progress=tick, progress_s=PROGRESS_S)
    except OSError as e:
        if e.filename:
            raise
        raise OSError(e.errno, e.strerror, log_path) from e  # a full disk: a write's error names no file
    wall = time.time() - start
    with open(os.path.join(folder, "log.txt"), errors="replace") as f:
        log_text = f.read()
    if resumed:  # this attempt's part of the log: an earlier attempt's error is not this one's
        log_text = log_text[log_text.rfind("# study.py: an earlier attempt"):]
    if not stopped_for:
        raise_if_stopped_by_signal(cell.name, rc, log_text,
                                   "" if study.resume_cells else " (resume_cells is off: a rerun starts the cell again)")
    evals, losses, walls = read_curve(folder, study.metric)
    sel_evals = read_curve(folder, study.select)[0] if study.select else []
    summary = {}
    if os.path.isfile(os.path.join(folder, "summary.json")):
        with open(os.path.join(folder, "summary.json")) as f:
            summary = json.load(f)
    final = summary.get(study.metric, evals[-1][1] if evals else None) if rc == 0 else (evals[-1][1] if evals else None)
    sel_final = None
    if study.select:
        sel_final = summary.get(study.select) if rc == 0 else (sel_evals[-1][1] if sel_evals else None)
    nonfinite = "is NaN/Inf" in log_text  # the trainer's stop on a non-finite loss or gradient
    # The figures the run did write, for a metric it did not (a typo in the study, or no such split).
    had = ", ".join(sorted(k for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                           and re.search(r"top\d|accuracy|loss|perplexity|ppl|^eval_|^val_|^test_", k))) or "none"
    if stopped_for:
        status, reason = "failed", stopped_for[0]
    elif rc == 0 and study.metric not in summary:
        status = "failed"
        reason = (f"the run ended without '{study.metric}' (metric.name of study {study.path}) in summary.json, "
                  f"whose figures are: {had} (a misspelt metric.name, or no evaluation set?)")
    elif rc == 0 and study.select and study.select not in summary:
        status = "failed"
        reason = (f"the run ended without '{study.select}' (metric.select of study {study.path}) in summary.json, "
                  f"whose figures are: {had}; set data.validation_size, or correct metric.select")
    elif rc == 0:
        status, reason = ("diverged", f"final {study.metric} {final}") if is_diverged_value(study, final) else ("ok", "")
    elif nonfinite:
        status, reason = "diverged", "stopped on NaN/Inf"
    else:
        status = "failed"
        reason = f"exit code {rc}: " + first_error(log_text)
    rec = {**identity(cell), "hash": cell.hash, "status": status,
           "reason": reason, "exit_code": rc, "final": final,
           # A resumed cell: the trainer's own count over its attempts (up to each one's last checkpoint).
           "wall_s": round(summary.get("wall_seconds", wall) if resumed else wall, 2),
           "resumed": resumed,
           "steps": summary.get("steps", evals[-1][0] if evals else None),
           # train.stop_at.give_up_after ended the run short of the target (None: it did not).
           "gave_up_at": summary.get("gave_up_at_step"),
           "evals": evals, "eval_wall": walls, "losses": losses[:: max(1, len(losses) // 200)],
           "command": " ".join(shlex.quote(c) for c in cmd),
           "machine": machine() + (f", GPU {gpu_name()}" if device != "cpu" else "")
                      + (f", trainer built for {summary['build_march']}" if summary.get("build_march") else ""),
           # What the binary that ran says of itself (summary.json), else what it said at the
           # start of this invocation (`trainer --version`), else HEAD.
           "commit": display_commit(summary.get("commit")) or args.build_commit or commit(),
           "trainer_version": summary.get("trainer_version") or args.trainer_version}
    if study.select:
        rec["select_final"], rec["select_evals"] = sel_final, sel_evals
    if device != "cpu":
        rec["device"] = device
    if deadline:
        rec["cut_off"] = {"at": deadline[0], "by": deadline[1]}
    if status != "failed":
        with open(os.path.join(folder, CELL_MARKER), "w") as f:
            json.dump(rec, f)
    return rec


def missing_figures(study, folder):
    """Why the run writing into `folder` cannot give the study its figures, judged at its first
    evaluation (its first metrics.jsonl line with an eval_ or val_ figure): metric.name or
    metric.select, when an evaluation figure, is not among that evaluation's figures (a misspelt
    name, or no such split). None when they are there, or there is no evaluation yet. Names that
    are not evaluation figures are left to the end of the run (summary.json)."""
    try:
        rows = read_metrics(folder) or []
    except (OSError, ValueError):
        return None
    first = next((r for r in rows if any(k.startswith(EVAL_PREFIXES) for k in r)), None)
    if first is None:
        return None
    had = ", ".join(sorted(k for k in first if k.startswith(EVAL_PREFIXES)))
    for key, name, hint in (("metric.name", study.metric, "a misspelt metric.name, or no evaluation set?"),
                            ("metric.select", study.select, "set data.validation_size, or correct metric.select")):
        if isinstance(name, str) and name.startswith(EVAL_PREFIXES) and name not in first:
            return (f"the run's first evaluation (step {first.get('step')}) gave no '{name}' ({key} of study "
                    f"{study.path}), only: {had} ({hint}); the runner stopped the run there")
    return None


# What the trainer's evaluation figures are called: test split, validation split.
EVAL_PREFIXES = ("eval_", "val_")


class TrainerStopped(KeyboardInterrupt):
    """A cell's trainer stopped for a signal that did not come through the runner (its ranks were
    sent SIGTERM or SIGUSR1: a scheduler preempting them): the study stops as on Ctrl-C, recording
    nothing of the cell, instead of recording it as failed and going on."""


def raise_if_stopped_by_signal(name, rc, log_text, note=""):
    """Raises TrainerStopped when the trainer run `name` exited 128 + SIGTERM / SIGINT / SIGUSR1 after
    saying it stopped for that signal (its log `log_text`); `note` ends the message."""
    stopped = re.search(r"stopped by (SIG\w+) at step (\d+)", log_text)
    if rc in (128 + signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGUSR1) and stopped:
        raise TrainerStopped(f"{name}: its trainer was stopped by {stopped[1]} from outside the runner (a "
                             f"scheduler's preemption?) at step {stopped[2]}, with a checkpoint there" + note)


class Progress:
    """Called every PROGRESS_S while a trainer run goes on (its output folder `folder`): prints a
    line with its newest logged step (of `total_steps`, where known), the newest value of `figure`
    (a metrics.jsonl key; else the training loss) against `target`, and the rate, when the run has
    logged a step since the last line. `show` formats the figure. `open_line`: the first line goes
    under a line still open (the study's cell line). `lines`: how many it printed."""

    def __init__(self, folder, total_steps=None, figure=None, show=lambda v: f"{v:.4f}", target=None,
                 open_line=False, out=None):
        self.folder, self.total_steps, self.figure, self.show, self.target = folder, total_steps, figure, show, target
        self.open_line, self.out = open_line, out or sys.stdout
        self.start, self.last_step, self.lines = time.time(), None, 0

    @classmethod
    def of_cell(cls, study, folder, total_steps, out=None):
        """For a study's cell: the figure choices are made on (metric.select, else the metric)."""
        return cls(folder, total_steps, study.select or study.metric, lambda v: fmt_metric(study, v), study.target,
                   open_line=True, out=out)

    def __call__(self):
        try:  # a progress line is not worth stopping the run for
            rows = [r for r in read_metrics(self.folder) or [] if isinstance(r, dict) and isinstance(r.get("step"), int)]
        except (OSError, ValueError):
            return
        if not rows or rows[-1]["step"] == self.last_step:
            return
        self.last_step = step = rows[-1]["step"]

        def newest(key):
            return next(((r["step"], r[key]) for r in reversed(rows) if isinstance(r.get(key), (int, float))), None)
        name = self.figure or "loss"
        figure, rate = newest(name), newest("samples_per_s")
        target = f" (target {self.show(self.target)})" if self.target is not None and self.figure else ""
        text = (f"    step {step}" + (f"/{self.total_steps}" if self.total_steps else "")
                + (f": {name} {self.show(figure[1])} at step {figure[0]}{target}" if figure else "")
                + (f", {rate[1]:.0f} samples/s" if rate else "") + f", {fmt_time(time.time() - self.start)} so far")
        print(("\n" if self.open_line and self.lines == 0 else "") + text, file=self.out, flush=True)
        self.lines += 1


# How often a cell in progress says how far it has come (Progress).
PROGRESS_S = 60

# How long an interrupted runner waits for its trainer run to stop at a step with a checkpoint:
# the rest of one step (about 20 s for 8K sequences of BERT-tiny on 2 cores; local SGD, DiLoCo
# and WAGMA stop at their next world synchronisation) and one checkpoint write.
STOP_GRACE_S = 120


def call_stopping_at_a_step(cmd, grace_s=STOP_GRACE_S, say=print, progress=None, progress_s=PROGRESS_S,
                            **popen_kw):
    """Runs `cmd`, an mpirun line, and returns its exit code; calls `progress()` (if given) every
    progress_s seconds while it runs, and stops the run as below, returning its exit code, when
    that returns true. Interrupted (Ctrl-C, or SIGTERM to
    the runner: KeyboardInterrupt), it sends mpirun SIGUSR1 once, which mpirun forwards to every
    rank: they stop at one step, write a checkpoint and exit (138); it waits for that up to grace_s
    (a second interrupt cuts it short), then SIGTERMs mpirun, which kills the ranks, and re-raises.
    mpirun runs in a session of its own: a terminal's Ctrl-C would reach it, and mpirun answers
    SIGINT or SIGTERM by killing the ranks 1 s later, too soon for most checkpoints (subprocess.call
    killed mpirun outright, leaving the run to its last periodic checkpoint)."""
    p = subprocess.Popen(cmd, start_new_session=True, **popen_kw)
    try:
        while True:
            try:
                return p.wait(timeout=progress_s if progress else None)
            except subprocess.TimeoutExpired:
                if progress():
                    if stop_at_a_step(p, grace_s, say, ""):
                        raise KeyboardInterrupt
                    return p.returncode
    except KeyboardInterrupt:
        stop_at_a_step(p, grace_s, say, "; interrupt again to kill it now")
        raise


def stop_at_a_step(p, grace_s, say, note):
    """Sends the mpirun `p` SIGUSR1 (its ranks stop at a step with a checkpoint there) and waits
    up to grace_s (an interrupt cuts that short), then ends it: SIGTERM, and SIGKILL 15 s later.
    Returns whether an interrupt cut the wait short."""
    p.send_signal(signal.SIGUSR1)
    say(f"\nstopping the trainer run at its next step, with a checkpoint there (up to {grace_s} s{note}) ...",
        flush=True)
    interrupted = False
    try:
        p.wait(timeout=grace_s)
    except KeyboardInterrupt:
        interrupted = True
    except subprocess.TimeoutExpired:
        pass
    if p.poll() is None:
        say("the trainer run did not stop in time: killing it", flush=True)
        p.terminate()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return interrupted


def stop_on_sigterm():
    """`kill` (SIGTERM) interrupts a runner as Ctrl-C does (KeyboardInterrupt): the trainer run in
    progress then stops at a step (call_stopping_at_a_step), instead of the runner dying alone and
    leaving its mpirun and ranks training on."""
    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)


def attempt_version(log_path):
    """The trainer version an earlier attempt logged last in its log `log_path` (None: none logged)."""
    try:
        with open(log_path, errors="replace") as f:
            found = re.findall(r"\(trainer version (\S+)\)", f.read())
    except OSError:
        return None
    return found[-1] if found else None


def identity(cell):
    """What a cell is called and where it sits in the grid. The names (cell, method, variant)
    are not in its settings hash, so a cached record gets all of these from the study as it is
    now (a method renamed, a setting moved into a variant): a report never shows a name or
    column the study file no longer has."""
    return {"name": cell.name, "method": cell.method, "ranks": cell.ranks, "micro_batches": cell.mb,
            "variant": cell.variant, "seed": cell.seed, "point": cell.point,
            "examples_per_step": cell.examples_per_step, "overrides": cell.overrides}


def stale(rec, version):
    """Why a finished cell does not count for the trainer `version` (None: it does). A cell ran
    by another trainer version, or by one that did not say its version, is stale: the trainer's
    code and defaults are part of what a cell measures. version None (no trainer binary that
    names its version): nothing is stale."""
    if version is None or rec.get("trainer_version") == version:
        return None
    return f"ran on trainer {rec.get('trainer_version') or 'of unrecorded version'}, now {version}"


def load_cached(folder, cell):
    path = os.path.join(folder, CELL_MARKER)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            rec = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    if rec.get("hash") != cell.hash:
        return None
    if "eval_wall" not in rec:  # written by an older runner
        rec["eval_wall"] = read_curve(folder, cell.study.metric)[2]
    if "gave_up_at" not in rec:  # likewise
        try:
            with open(os.path.join(folder, "summary.json")) as f:
                rec["gave_up_at"] = json.load(f).get("gave_up_at_step")
        except (OSError, json.JSONDecodeError):
            rec["gave_up_at"] = None
    return {**rec, **identity(cell)}


def load_published(path):
    """Finished cells of an earlier report's cells.json by settings hash ({} when there is none).
    A file that is there but damaged (not JSON, not {"cells": [...]}, a cell without the fields a
    report reads) is refused (StudyError naming the file, the cell and the field), never taken as
    empty: a run would then overwrite it and lose the cells published there."""
    if not os.path.exists(path):
        return {}
    fix = ("; repair it (git diff / git checkout of the published file), or move it away to rerun its cells: "
           "the runner neither reads nor overwrites it as it is")
    try:
        with open(path) as f:
            text = f.read()
        doc = json.loads(text)
    except OSError as e:
        raise StudyError(f"{path}: cannot read ({e.strerror})" + fix)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise StudyError(f"{path}: not valid JSON ({e})" + fix)
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        what = "'cells' is not a list" if isinstance(doc, dict) else f"not an object (a JSON {type(doc).__name__})"
        raise StudyError(f"{path}: {what}; a study's cells.json is {{\"study\": ..., \"metric\": ..., "
                         f"\"cells\": [one cell a line]}}" + fix)
    cells = doc["cells"]
    lines = text.splitlines()
    one_a_line = len(lines) == len(cells) + 2  # as write_cells_json writes it: cell i on line i + 2

    def number(v):
        return v is None or isinstance(v, (int, float)) and not isinstance(v, bool)

    def curve(v):
        return isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], int)
                                           and not isinstance(p[0], bool) and number(p[1]) for p in v)
    checks = {"name": (lambda v: isinstance(v, str), "a string"),
              "hash": (lambda v: isinstance(v, str), "a string (the cell's settings hash)"),
              "status": (lambda v: v in ("ok", "diverged", "failed"), "one of ok, diverged, failed"),
              "method": (lambda v: isinstance(v, str), "a string"),
              "ranks": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
              "final": (number, "a number or null"),
              "evals": (curve, "a list of [step, value] pairs")}
    out = {}
    for i, rec in enumerate(cells):
        where = f"line {i + 2}" if one_a_line else f"cells[{i}]"
        if not isinstance(rec, dict):
            raise StudyError(f"{path}: {where}: a cell must be an object, got {json.dumps(rec)[:60]}" + fix)
        if isinstance(rec.get("name"), str):
            where += f" (cell {rec['name']})"
        for key, (ok, what) in checks.items():
            if key not in rec:
                raise StudyError(f"{path}: {where}: no '{key}'" + fix)
            if not ok(rec[key]):
                raise StudyError(f"{path}: {where}: '{key}' must be {what}, got {json.dumps(rec[key])[:60]}" + fix)
        if "select_evals" in rec and not curve(rec["select_evals"]):
            raise StudyError(f"{path}: {where}: 'select_evals' must be a list of [step, value] pairs" + fix)
        if rec["status"] != "failed":
            out[rec["hash"]] = rec
    return out


class Eta:
    """Remaining time from the cells run so far, per rank count where known (runs at the same
    rank count cost about the same), else the mean over all."""

    def __init__(self):
        self.by_ranks = {}

    def add(self, ranks, seconds):
        self.by_ranks.setdefault(ranks, []).append(seconds)

    def remaining(self, cells):
        all_t = [t for ts in self.by_ranks.values() for t in ts]
        if not all_t:
            return None
        mean_all = sum(all_t) / len(all_t)
        return sum(sum(self.by_ranks[c.ranks]) / len(self.by_ranks[c.ranks]) if c.ranks in self.by_ranks
                   else mean_all for c in cells)


def machine(cpuinfo="/proc/cpuinfo"):
    cpu, flags, ids = "?", set(), {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and cpu == "?":
                    cpu = value
                elif key in ("cpu family", "model"):
                    ids.setdefault(key, value)
                elif key == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    # The model name is often just "AMD EPYC": the vector width says which kernels ran, and
    # the family and model tell CPU generations apart (AMD family 25 model 1 is a Zen 3, 17 a
    # Zen 4; both Zen 4 and Zen 5 have AVX-512). "; " inside the brackets: reports take the
    # CPU as the text before the first ", ".
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    details = [isa] if isa else []
    if "cpu family" in ids and "model" in ids:
        details.append(f"family {ids['cpu family']} model {ids['model']}")
    cpu += f" ({'; '.join(details)})" if details else ""
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {mem}, {platform.system()} {platform.release()}"


def gpu_name():
    """The first GPU's name and memory (nvidia-smi), for cells trained on a GPU."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        out = []
    return out[0].strip() if out else "unknown GPU (nvidia-smi did not answer)"


def display_commit(sha):
    """A binary's commit as reports write it: "abc1234 (built with uncommitted changes)"."""
    if not sha or sha == "unknown":
        return None
    return sha.replace("+changes", " (built with uncommitted changes)")


def trainer_identity(trainer):
    """(commit, version) as `trainer --version` names them (commit as display_commit writes it,
    version None for a trainer older than versions), or (None, None): no such binary, or one
    without --version."""
    try:
        out = subprocess.run([trainer, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    m = re.search(r"built from commit (\S+)", out)
    v = re.search(r"trainer version (\S+)", out)
    version = v.group(1) if v and v.group(1) != "unknown" else None
    return (display_commit(m.group(1)) if m else None), version


def trainer_commit(trainer):
    """The commit `trainer --version` names, or None (no such binary, or one without --version)."""
    return trainer_identity(trainer)[0]


def commit():
    try:
        sha = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                      stderr=subprocess.DEVNULL).strip()
        # Changes to reports and study files do not change what a cell runs (its settings are
        # recorded with it); any other uncommitted file is named.
        status = subprocess.check_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                         text=True, stderr=subprocess.DEVNULL).splitlines()
        dirty = [l[3:] for l in status if not l[3:].startswith(("docs/results/", "studies/"))]
        if not dirty:
            return sha
        return sha + " (with uncommitted changes to " + ", ".join(dirty[:3]) + (" ..." if len(dirty) > 3 else "") + ")"
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
