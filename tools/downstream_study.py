#!/usr/bin/python3
"""Does Adasum keep downstream quality? (issue 34, item 6, at a small scale.) Pre-trains BERT-tiny
with LAMB + averaging and LAMB + Adasum (configs/bert_tiny_mlm_lamb{,_adasum}.yaml, their LRs and
factors as committed, shortened: RANKS ranks x 32 sequences of 128, PRETRAIN_STEPS steps), SEEDS
seeds each; fine-tunes every checkpoint on SpamAssassin spam vs ham (configs/bert_tiny_spam.yaml,
2 epochs, fine-tuning seeds FT_SEEDS) and also from scratch; and reports downstream test accuracy
against the pre-training MLM loss (held-out data/mlm-eval), with Welch's t-test between the two.
With --kinds probe (or finetune probe), every checkpoint (and a random encoder) is probed: the
same fine-tuning with the embeddings and encoder frozen (train.freeze) and only a linear
classifier trained on the mean of the encoder's outputs (model.pooling: mean), at LR PROBE_LR —
what the encoder learnt, without the full fine-tuning relearning it.

Without --choose-lr nothing is chosen (the recipes are fixed before the runs), so each fine-tuning
is evaluated once, at its end, on the test split (train.eval_every larger than the run: only the
final evaluation). Cells are cached in OUT/cells.json (written after each cell, keyed by the
command line), so a stopped study resumes (a damaged cells.json stops the runner before any cell
runs, naming it, and is left as it was; --report-only with no cell to report says so and exits
1, as study.py does); a run stopped partway (its ranks sent SIGTERM or
SIGUSR1 by a scheduler: the trainer's stop checkpoint; or killed after a periodic one) goes on
from its newest checkpoint when the same command and trainer version run it again; checkpoints stay under runs/downstream/ (--runs; 17-53 MB each,
not committed).

    /usr/bin/python3 tools/downstream_study.py [--out docs/results/bert_tiny_downstream]
        [--ranks 2] [--pretrain-steps 300] [--seeds 1 2 3] [--ft-seeds 1 2 3] [--report-only]
        [--device cpu|cuda] [--trainer T] [--mpirun M] [--kinds finetune probe] [--choose-lr]
        [--runs runs/downstream]

--choose-lr adds a second protocol beside the fixed recipes: each checkpoint's LR for each kind is
chosen on the dev split (data/spam/dev.jsonl, cells "dev ..."), by the mean dev accuracy over the
fine-tuning seeds, from a window of LR_LADDER widened until the best is inside it (or at the
ladder's end), and the test split is read only at the chosen LR (a table of its own per kind,
with the dev accuracies at every LR tried).

--device cuda runs every pre-training and fine-tuning with train.device cuda (the ranks of a
pre-training share the one GPU through MPI staging): `bash tools/gpu_test.sh downstream [STEPS]`
on a lent GPU machine, after `tools/gpu_bundle.sh --downstream` here.
"""
import argparse
import collections
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
from study.report import NOT_JUDGED, noise_verdict, welch  # noqa: E402  (Welch's t-test: (difference, two-sided p))
from study.run import (Progress, attempt_version, call_stopping_at_a_step, gpu_name, machine, raise_if_stopped_by_signal,  # noqa: E402
                       stop_on_sigterm, trainer_identity)
DEFAULT_OUT = os.path.join(REPO, "docs", "results", "bert_tiny_downstream")
DEFAULT_SEEDS = [1, 2, 3]  # pre-training and fine-tuning seeds
KINDS = ("finetune", "probe")  # the whole model trained; the encoder frozen, the head trained
METHODS = {"lamb_average": "configs/bert_tiny_mlm_lamb.yaml",
           "lamb_adasum": "configs/bert_tiny_mlm_lamb_adasum.yaml"}
# The probe's recipe, fixed before any probe cell of a study ran: the head alone takes a larger LR
# than fine-tuning's; the mean of the outputs, not the pooled [CLS], which MLM alone never trains
# (a pilot on the dev split, 1,500-step checkpoint against a random encoder, seeds 1-3: 77.99 %
# against 68.71 % with the mean, 72.01 % against 68.60 % with the pooled [CLS]).
PROBE_LR = 1e-3
PROBE_BASE = ["--set", "train.freeze=[embeddings, encoder]", "--set", "model.pooling=mean"]
PROBE = PROBE_BASE + ["--set", f"optimizer.lr={PROBE_LR}"]
# --choose-lr: each checkpoint's fine-tuning and probe LR chosen on the dev split (mean dev
# accuracy over the fine-tuning seeds; ties to the lower dev loss), then the test split read at the
# chosen LR only. A fixed LR favours checkpoints whose outputs suit it: under AdamW a probe's step
# moves its logits in proportion to its features' scale. The LRs tried: a window of a ladder,
# first LR_START (around the fixed recipe's LR), widened one rung at a time while the best is at
# an edge of the window and the ladder goes on, so that the choice is bracketed.
FINETUNE_LR = 1e-4  # configs/bert_tiny_spam.yaml's
LR_LADDER = {"finetune": [1.25e-5, 2.5e-5, 5e-5, FINETUNE_LR, 2e-4, 4e-4, 8e-4, 1.6e-3, 3.2e-3, 6.4e-3],
             "probe": [3e-5, 1e-4, 3e-4, PROBE_LR, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0, 3.0]}
LR_START = {"finetune": [5e-5, FINETUNE_LR, 2e-4], "probe": [3e-4, PROBE_LR, 3e-3, 1e-2]}
MPI = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1")


def resumable(log, ckpt_dir, cmd_line, version):
    """Whether an unfinished earlier run can go on from its newest checkpoint (--resume auto)
    instead of starting again: its log `log` begins with this very command line and last names
    this trainer version (not None), and it left checkpoints in `ckpt_dir` (a stop checkpoint
    after a signal, or a periodic one)."""
    try:
        with open(log, errors="replace") as f:
            first = f.readline().rstrip("\n")
        left = any(n.endswith(".json") for n in os.listdir(ckpt_dir))
    except OSError:
        return False
    return version is not None and left and first == "$ " + cmd_line and attempt_version(log) == version


def load_cells(path):
    """OUT/cells.json ({} when there is none): {key: cell}, each cell an object with its figure
    (a pre-training's eval_mlm_loss, a fine-tuning's eval_accuracy). Anything else stops the study
    with a message naming the file, before a cell runs, so the cache is never written over."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, "rb") as f:
            cells = json.loads(f.read().decode("utf-8"))
    except OSError as e:
        sys.exit(f"downstream: cannot read {path} ({e.strerror})")
    except ValueError as e:  # not UTF-8, not JSON
        sys.exit(f"downstream: {path} is damaged: not JSON ({e}); it is left as it was (restore it, e.g. "
                 "from git, or move it aside to run every cell again)")
    if not isinstance(cells, dict):
        sys.exit(f"downstream: {path} is damaged: not a JSON object of cells (a {type(cells).__name__}); "
                 "it is left as it was")
    for key, cell in cells.items():
        figure = "eval_mlm_loss" if key.startswith("pretrain ") else "eval_accuracy"
        if not isinstance(cell, dict) or not isinstance(cell.get(figure), (int, float)) or isinstance(cell.get(figure), bool):
            sys.exit(f"downstream: {path} is damaged: cell '{key}' is not an object with a number {figure}; "
                     "it is left as it was")
    return cells


def at_least(lo):
    """An argparse type: a whole number >= lo ("argument --ranks: must be 1 or more, got 0")."""
    def whole(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"needs a whole number, got '{text}'") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be {lo} or more, got {v}")
        return v
    return whole


def folder_problem(path):
    """None when `path` is a folder this study can write into (made if missing), else what is
    wrong with it."""
    if os.path.exists(path) and not os.path.isdir(path):
        return "is a file, not a folder"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        return f"cannot create the folder ({e.strerror})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "is a folder this user cannot write into"
    return None


def program(ap, flag, name, fix):
    """The program `name` (given as `flag`) as the runs start it (from the repository: a relative
    path is from REPO, a bare name from PATH); refused with `fix` when there is no such executable
    file (before any cell starts, not "failed (exit 3)" cell by cell)."""
    found = os.path.join(REPO, name) if os.sep in name else shutil.which(name)
    if found and os.path.isfile(found) and os.access(found, os.X_OK):
        return found
    ap.error(f"{flag} {name}: no such executable" +
             (f" (a relative path is from the repository, {REPO})" if os.sep in name and not os.path.isabs(name)
              else "") + f"; {fix}")


def run_cell(cells, path, key, cmd, out_dir, version):
    """Runs one trainer command (cached in `cells` under `key`); `version`: the trainer's version,
    for resuming an earlier attempt it made."""
    if key in cells:
        return cells[key]
    t0 = time.time()
    log = os.path.join(REPO, out_dir) + ".log"  # beside its run folder (--runs is from REPO)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    cmd_line = " ".join(shlex.quote(c) for c in cmd)
    resumed = resumable(log, os.path.join(REPO, out_dir, "checkpoints"), cmd_line, version)
    print(f"downstream: {'resuming' if resumed else 'running'} {key}", flush=True)
    with open(log, "a" if resumed else "w") as f:
        if resumed:
            f.write("\n# downstream_study.py: an earlier attempt was interrupted; resuming it\n")
        else:
            f.write(f"$ {cmd_line}\n")
        f.flush()
        rc = call_stopping_at_a_step(cmd + (["--resume", "auto"] if resumed else []), cwd=REPO, env=ENV,
                                     stdout=f, stderr=subprocess.STDOUT,
                                     progress=Progress(os.path.join(REPO, out_dir)))
    if rc != 0:
        with open(log, errors="replace") as f:  # a signal from outside: stop as on Ctrl-C
            text = f.read()
        raise_if_stopped_by_signal(key, rc, text[text.rfind("# downstream_study.py: an earlier"):] if resumed else text,
                                   " (a rerun of the same command goes on from it)")
        sys.exit(f"downstream: {key} failed (exit {rc}); its log: {log}")
    s = json.load(open(os.path.join(REPO, out_dir, "summary.json")))
    cell = {k: s[k] for k in ("eval_mlm_loss", "eval_accuracy", "eval_loss", "steps", "commit",
                              "trainer_version") if k in s}
    cell.update(wall_s=round(time.time() - t0, 1), cpu=machine().split(", ")[0], cores=os.cpu_count(),
                command=" ".join(cmd))
    if "train.device=cuda" in cmd:
        cell["gpu"] = gpu_name()
    cells[key] = cell
    tmp = path + ".tmp"
    json.dump(cells, open(tmp, "w"), indent=1, sort_keys=True)
    os.replace(tmp, path)
    return cell


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--trainer", default=os.path.join(REPO, "build/bin/trainer"))
    ap.add_argument("--ranks", type=at_least(1), default=2, help="MPI ranks of a pre-training (1 or more)")
    ap.add_argument("--pretrain-steps", type=at_least(1), default=300, help="pre-training steps (1 or more)")
    ap.add_argument("--seeds", type=at_least(0), nargs="+", default=DEFAULT_SEEDS,
                    help="pre-training seeds (train.seed: whole numbers, 0 or more, each once)")
    ap.add_argument("--ft-seeds", type=at_least(0), nargs="+", default=DEFAULT_SEEDS,
                    help="fine-tuning seeds (train.seed: whole numbers, 0 or more, each once)")
    ap.add_argument("--runs", default="runs/downstream",
                    help="the run folders (checkpoints), relative to the repository or absolute")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--choose-lr", action="store_true",
                    help="also choose each checkpoint's LR on the dev split, starting from " +
                         "; ".join(f"{k} {', '.join(f'{x:g}' for x in g)}" for k, g in LR_START.items()) +
                         " and widening while the best is at an edge (cells 'dev ...'), then test at the "
                         "chosen LR (a table of its own)")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=["finetune"],
                    help="finetune: every parameter trained; probe: the encoder frozen (train.freeze), "
                         f"a linear classifier on the mean of its outputs trained at LR {PROBE_LR} "
                         "(cells 'probe ...'; a table of its own)")
    a = ap.parse_args()
    kinds = [k for k in KINDS if k in a.kinds]
    for flag, seeds in (("--seeds", a.seeds), ("--ft-seeds", a.ft_seeds)):
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        if twice:  # one cell per seed: a seed given twice would count its cell twice in the means
            ap.error(f"argument {flag}: seed {', '.join(map(str, twice))} given more than once")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        ap.error(f"--out {a.out} is a file, not a folder (--out names the folder of cells.json and report.md)")
    path = os.path.join(a.out, "cells.json")
    cells = load_cells(path)  # before anything runs: a damaged cache stops the study, untouched
    if a.report_only and not cells:
        sys.exit(f"downstream: --report-only: {'no cells in ' if os.path.exists(path) else 'no '}{path}: "
                 "nothing to report (--out names the folder the report is read from and written to)")
    why = folder_problem(a.out)  # the report (and cells.json) go there
    if why:
        ap.error(f"--out {a.out} {why}")
    trainer = None
    if not a.report_only:
        trainer = program(ap, "--trainer", a.trainer,
                          "build it (cmake --build build --target trainer) or name the trainer binary")
        program(ap, "--mpirun", a.mpirun, "install OpenMPI (tools/setup.sh) or name the mpirun program")
        runs = os.path.join(REPO, a.runs)
        why = folder_problem(runs)
        if why:
            ap.error(f"--runs {a.runs}{'' if runs == a.runs else f' ({runs})'} {why}")
    version = None if a.report_only else trainer_identity(trainer)[1]  # for resuming a run it began
    mpi = [a.mpirun] + MPI[1:]
    device = ["--set", f"train.device={a.device}"] if a.device != "cpu" else []
    dev_key = f" device {a.device}" if a.device != "cpu" else ""  # CPU cells keep their keys
    steps, warmup = a.pretrain_steps, max(1, a.pretrain_steps // 10)
    def ft_command(kind, method, seed, ft, lr, split, init):
        """A fine-tuning's (key, command, run folder): `lr` None for the fixed recipe's LR (its
        cells keep their keys), split "test" or "dev" (keys "dev ...")."""
        tag = (f" lr {lr:g}" if lr is not None else "")
        key = (("dev " if split == "dev" else "") + f"{kind} {method} seed {seed}{tag} ft {ft}" +
               (f" ranks {a.ranks} steps {steps}" if init else "") + dev_key)
        out = (f"{a.runs}/{kind}-{method}-s{seed}-f{ft}" + (f"-lr{lr:g}" if lr is not None else "") +
               ("-dev" if split == "dev" else ""))
        cmd = [a.trainer, "--config", "configs/bert_tiny_spam.yaml", "--set", "train.epochs=2",
               "--set", "schedule.warmup_steps=30", "--set", "train.eval_every=100000",
               "--set", f"data.eval_path=data/spam/{split}.jsonl", "--set", "checkpoint.overwrite=true"]
        cmd += device + ["--set", f"train.seed={ft}", "--set", f"output.dir={out}"]
        if kind == "probe":
            cmd += PROBE if lr is None else PROBE_BASE + ["--set", f"optimizer.lr={lr:g}"]
        elif lr is not None:
            cmd += ["--set", f"optimizer.lr={lr:g}"]
        if init:
            cmd += ["--set", f"train.init_from={init}"]
        return key, cmd, out

    def lr_arg(kind, lr):  # the fixed recipe's LR runs as the fixed cells (the same run)
        return None if lr == (PROBE_LR if kind == "probe" else FINETUNE_LR) else lr

    def chosen(kind, method, seed, init):
        """(the LR chosen on dev or None while dev cells are missing, {lr: (mean dev accuracy,
        mean dev loss)}, the window of LRs whose dev cells the choice needs so far)."""
        ladder = LR_LADDER[kind]
        lo, hi = ladder.index(LR_START[kind][0]), ladder.index(LR_START[kind][-1])
        means = {}
        while True:
            window = ladder[lo:hi + 1]
            for lr in window:
                got = [cells.get(ft_command(kind, method, seed, ft, lr, "dev", init)[0]) for ft in a.ft_seeds]
                if all(got):
                    means[lr] = (statistics.mean(c["eval_accuracy"] for c in got),
                                 statistics.mean(c.get("eval_loss", 0.0) for c in got))
            if any(lr not in means for lr in window):
                return None, means, window
            best = max(window, key=lambda x: (means[x][0], -means[x][1]))
            if best == ladder[hi] and hi + 1 < len(ladder):
                hi += 1
            elif best == ladder[lo] and lo > 0:
                lo -= 1
            else:
                return best, means, window

    def needed(kind, method, seed, init):
        """The keys of the fine-tunings this checkpoint still owes (fixed recipe; with
        --choose-lr the dev grid and the chosen LR's test runs)."""
        keys = [ft_command(kind, method, seed, ft, None, "test", init)[0] for ft in a.ft_seeds]
        if a.choose_lr:
            lr, _, window = chosen(kind, method, seed, init)
            keys += [ft_command(kind, method, seed, ft, x, "dev", init)[0] for x in window for ft in a.ft_seeds]
            if lr is not None:
                keys += [ft_command(kind, method, seed, ft, lr_arg(kind, lr), "test", init)[0] for ft in a.ft_seeds]
        return [k for k in keys if k not in cells]

    rows = []
    a.choices = {}  # (kind, method, seed): (chosen LR, {lr: (dev accuracy, dev loss)}), for the report
    for method, cfg in list(METHODS.items()) + [("scratch", None)]:
        for seed in (a.seeds if cfg else [0]):
            pre_dir = f"{a.runs}/pretrain-{method}-s{seed}"
            init = f"{pre_dir}/checkpoints" if cfg else None
            pre = None
            if cfg:
                cmd = mpi + ["-np", str(a.ranks), a.trainer, "--config", cfg] + device + [
                             "--set", f"train.steps={steps}", "--set", f"schedule.warmup_steps={warmup}",
                             "--set", f"train.seed={seed}", "--set", f"train.eval_every={steps}",
                             "--set", f"output.dir={pre_dir}", "--set", "checkpoint.overwrite=true"]
                key = f"pretrain {method} seed {seed} ranks {a.ranks} steps {steps}{dev_key}"
                if a.report_only and key not in cells:
                    continue
                ft_missing = any(needed(kind, method, seed, init) for kind in kinds)
                if ft_missing and not a.report_only and not os.path.isdir(os.path.join(REPO, pre_dir, "checkpoints")):
                    cells.pop(key, None)  # runs/ is gone (a new session): pre-train again (bitwise the same on a CPU)
                pre = run_cell(cells, path, key, cmd, pre_dir, version)
            mlm = pre["eval_mlm_loss"] if pre else None
            for kind in kinds:
                for ft in a.ft_seeds:
                    key, cmd, out = ft_command(kind, method, seed, ft, None, "test", init)
                    if a.report_only and key not in cells:
                        continue
                    c = run_cell(cells, path, key, cmd, out, version)
                    rows.append((kind, method, seed, ft, mlm, c["eval_accuracy"]))
                if not a.choose_lr:
                    continue
                while True:  # the dev cells of the window, widened while the best is at its edge
                    lr, means, window = chosen(kind, method, seed, init)
                    todo = [ft_command(kind, method, seed, ft, x, "dev", init) for x in window for ft in a.ft_seeds]
                    todo = [t for t in todo if t[0] not in cells]
                    if not todo or a.report_only:
                        break
                    for key, cmd, out in todo:
                        run_cell(cells, path, key, cmd, out, version)
                a.choices[(kind, method, seed)] = (lr, means)
                if lr is None:
                    continue
                for ft in a.ft_seeds:
                    key, cmd, out = ft_command(kind, method, seed, ft, lr_arg(kind, lr), "test", init)
                    if a.report_only and key not in cells:
                        continue
                    c = run_cell(cells, path, key, cmd, out, version)
                    rows.append(("chosen " + kind, method, seed, ft, mlm, c["eval_accuracy"]))
    if not rows:  # --report-only with no fine-tuning cell of this command (another --pretrain-steps?)
        sys.exit(f"downstream: --report-only: no fine-tuning cell in {path} for this command (--ranks "
                 f"{a.ranks} --pretrain-steps {a.pretrain_steps}, seeds {' '.join(map(str, a.seeds))}, kinds "
                 f"{' '.join(kinds)}): nothing to report; {path} is left as it was")
    report(a, cells, rows)


def seeds_text(ran, planned):
    """`ran` (the seeds with cells) as a list, naming those of `planned` not run yet."""
    missing = [x for x in planned if x not in ran]
    return ", ".join(map(str, ran)) + (f" so far ({', '.join(map(str, missing))} not run yet)" if missing else "")


def versions_text(versions):
    """What the cells' `trainer --version`s say about the trainers' sources."""
    if len(versions) == 1:
        v = next(iter(versions))
        return (f"trainer version {v} in every cell (the trainer's sources are the same in all"
                + ("; built with uncommitted changes to them" if "+changes" in v else "") + ").")
    parts = [f"{v} ({n} cells" + (", uncommitted changes to the trainer's sources" if "+changes" in v
                                   else "") + ")" for v, n in sorted(versions.items())]
    return "trainer versions " + ", ".join(parts) + ": the cells ran more than one trainer."


def report(a, cells, rows):
    pre_seeds = sorted({r[2] for r in rows if r[1] != "scratch"})  # r: kind, method, seed, ft, ...
    ft_seeds = sorted({r[3] for r in rows})
    cpus = sorted({f"{c.get('cpu', '?')} ({c.get('cores', 2)} cores)" +
                   (f" with one {c['gpu']}" if "gpu" in c else "") for c in cells.values()})
    commits = sorted({c.get("commit", "?") for c in cells.values()})
    versions = collections.Counter(c.get("trainer_version", "?") for c in cells.values())
    lines = ["# Does Adasum keep downstream quality? BERT-tiny, spam vs ham", "",
             f"Pre-training: BERT-tiny MLM on the corpus, {a.ranks} ranks x 32 sequences of 128, "
             f"{a.pretrain_steps} steps (LAMB at the committed configs' LR, warm-up a tenth), "
             "seeds " + seeds_text(pre_seeds, a.seeds) + "; fine-tuning: `configs/bert_tiny_spam.yaml`, "
             "2 epochs, seeds " + seeds_text(ft_seeds, a.ft_seeds) + ", evaluated once at the end on "
             "the test split (628 e-mails; ham is 70.2 %)"
             + (f"; the probe: the same with the embeddings and encoder frozen (`train.freeze`) and "
                f"LR {PROBE_LR}, only a classifier trained on the mean of the encoder's outputs "
                "(`model.pooling: mean`)" if "probe" in a.kinds else "")
             + (". The fixed recipes choose nothing; the tables headed \"LR chosen on the dev split\" choose "
                "each checkpoint's LR on the dev split (586 e-mails) and read the test split at that LR only."
                if a.choose_lr else ". Nothing was chosen on these runs."), "",
             f"Machine: {', '.join(cpus)}. Trainer commit(s): {', '.join(commits)}; "
             + versions_text(versions) + " Regenerate: `/usr/bin/python3 "
             f"tools/downstream_study.py --ranks {a.ranks} --pretrain-steps {a.pretrain_steps}"
             + (f" --seeds {' '.join(map(str, a.seeds))}" if a.seeds != DEFAULT_SEEDS else "")
             + (f" --ft-seeds {' '.join(map(str, a.ft_seeds))}" if a.ft_seeds != DEFAULT_SEEDS else "")
             + (f" --out {os.path.relpath(a.out, REPO)}" if os.path.abspath(a.out) != DEFAULT_OUT else "")
             + (f" --device {a.device}" if a.device != "cpu" else "")
             + (f" --kinds {' '.join(a.kinds)}" if a.kinds != ["finetune"] else "")
             + (" --choose-lr" if a.choose_lr else "")
             + "` (cells cached in cells.json; `--report-only` redraws)."]
    for kind in KINDS:
        mine = [r[1:] for r in rows if r[0] == kind]
        if mine:
            lines += [""] + kind_section(kind, mine)
    for kind in KINDS:
        mine = [r[1:] for r in rows if r[0] == "chosen " + kind]
        grid = {k[1:]: v for k, v in a.choices.items() if k[0] == kind}
        if grid:
            lines += [""] + chosen_section(kind, mine, grid)
    if a.choices:
        lines += ["", "The fixed recipes' tables read the test split once per fine-tuning, at its end; the "
                  "chosen-LR tables' LRs were chosen on the dev split (586 e-mails) alone, and the test "
                  "split was read only at the chosen LR."]
    else:
        lines += ["", "No choice was made on these runs (the recipes were fixed before them), so no "
                  "validation split was needed; each fine-tuning read the test split once, at its end."]
    open(os.path.join(a.out, "report.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


WHAT = {"finetune": "Fine-tuning (every parameter trained)",
        "probe": "Probe (embeddings and encoder frozen, a classifier on the mean of the outputs trained)"}


def chosen_section(kind, rows, grid):
    """--choose-lr: each checkpoint's mean dev accuracy over the LR grid and the LR chosen
    (grid: (method, seed): (chosen LR or None, {lr: (dev accuracy, dev loss)})), then the test
    table at the chosen LRs (rows as kind_section's)."""
    lrs = sorted({x for _, means in grid.values() for x in means})
    lines = [f"## {WHAT[kind]}, LR chosen on the dev split per checkpoint", "",
             "Mean dev accuracy % over the fine-tuning seeds at each LR (the chosen one in bold; "
             "— : not run, the best being inside that checkpoint's LRs, or not yet):", "",
             "| checkpoint | " + " | ".join(f"LR {x:g}" for x in lrs) + " | chosen |",
             "|---|" + "---|" * (len(lrs) + 1)]
    for (method, seed), (lr, means) in grid.items():
        cell = {x: (f"**{100 * means[x][0]:.2f}**" if x == lr else f"{100 * means[x][0]:.2f}") if x in means else "—"
                for x in lrs}
        lines.append(f"| {method} s{seed} | " + " | ".join(cell[x] for x in lrs) +
                     f" | {f'{lr:g}' if lr is not None else '—'} |")
    if rows:
        lines += [""] + kind_section(kind, rows, title=None)
    return lines


def kind_section(kind, rows, title=""):
    """The table, cells and comparisons of one kind of fine-tuning (rows: method, pre-training
    seed, fine-tuning seed, MLM loss, test accuracy), under a heading (title "": the kind's;
    None: none)."""
    by = {}
    for method, seed, ft, mlm, acc in rows:
        by.setdefault(method, []).append((seed, ft, mlm, acc))
    lines = [] if title is None else [f"## {title or WHAT[kind]}", ""]
    lines += ["| pre-training | MLM loss (held out), mean ± sd over seeds | test accuracy %, mean ± sd over all fine-tunings | n |",
              "|---|---|---|---|"]
    accs = {}
    for method, r in by.items():
        mlm = sorted({(s, m) for s, _, m, _ in r if m is not None})
        acc = [100 * x[3] for x in r]
        accs[method] = acc
        mlm_txt = (f"{statistics.mean(m for _, m in mlm):.4f} ± {statistics.stdev(m for _, m in mlm):.4f}"
                   if len(mlm) > 1 else "—")
        sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
        lines.append(f"| {method} | {mlm_txt} | {statistics.mean(acc):.2f} ± {sd:.2f} | {len(acc)} |")
    lines += ["", "Per cell (pre-training seed, fine-tuning seed, test accuracy %):", ""]
    for method, r in by.items():
        lines.append(f"- {method}: " + "; ".join(f"s{s}/f{f} {100 * x:.2f}" for s, f, _, x in r))
    # Pre-training seeds are the unit that differs between the methods: each checkpoint's mean
    # test accuracy over its fine-tunings.
    per = {m: [statistics.mean(100 * x for s2, _, _, x in r if s2 == s) for s in sorted({s for s, _, _, _ in r})]
           for m, r in by.items()}
    # Accuracy against pre-training loss, per checkpoint.
    points = []
    for m, r in by.items():
        mlm = dict((s, l) for s, _, l, _ in r if l is not None)
        if mlm:
            seeds = sorted({s for s, _, _, _ in r})
            pts = [(m, s, mlm[s], a) for s, a in zip(seeds, per[m]) if s in mlm]
            points += pts
            lines.append(f"- {m} per checkpoint (held-out MLM loss: mean test accuracy % over its fine-tunings): "
                         + "; ".join(f"s{s} {l:.4f}: {a:.2f}" for _, s, l, a in pts))
    if len(points) >= 3 and len({p[2] for p in points}) > 1 and len({p[3] for p in points}) > 1:
        r = statistics.correlation([p[2] for p in points], [p[3] for p in points])
        lines.append(f"- Over the {len(points)} checkpoints, Pearson's r between held-out MLM loss and mean "
                     f"test accuracy: {r:+.2f} (negative: a lower loss goes with a higher accuracy).")
    if "lamb_average" in accs and "lamb_adasum" in accs:
        d, p = welch(accs["lamb_adasum"], accs["lamb_average"])
        w2 = welch(per["lamb_adasum"], per["lamb_average"])
        na, nd = len(per["lamb_average"]), len(per["lamb_adasum"])
        n_txt = f"n = {nd} a side" if na == nd else f"n = {na} averaging, {nd} Adasum"
        lines += ["", f"Adasum minus averaging, test accuracy: {d:+.2f} points; Welch's p over all "
                  f"fine-tunings {p:.2g} (they share checkpoints: not independent)" + (f"; over the per-checkpoint means (the pre-training seed "
                  f"as the unit, {n_txt}) {w2[1]:.2g}" if w2 else "") + ". "
                  + (f"With the pre-training seed as the unit: {noise_verdict(w2[1])}." if w2 else
                     f"With the pre-training seed as the unit: {NOT_JUDGED} (one checkpoint a method).")]
    if "scratch" in accs:
        for m in ("lamb_average", "lamb_adasum"):
            if m not in by:
                continue
            w = welch(per[m], accs["scratch"])
            if w:
                lines.append(f"{m} minus no pre-training: {w[0]:+.2f} points (Welch's p {w[1]:.2g}; "
                             f"per-checkpoint means against the scratch fine-tunings): {noise_verdict(w[1])}.")
            else:
                d = statistics.mean(per[m]) - statistics.mean(accs["scratch"])
                lines.append(f"{m} minus no pre-training: {d:+.2f} points; {NOT_JUDGED} (one checkpoint).")
    return lines


if __name__ == "__main__":
    stop_on_sigterm()
    try:
        main()
    except KeyboardInterrupt as e:
        if str(e):
            print(f"downstream: {e}", file=sys.stderr)
        sys.exit("downstream: interrupted: the run in progress was stopped (at a step, with a checkpoint there, "
                 "when it stopped in time) and is not recorded; rerun the same command to go on from it (finished "
                 "cells are kept)")
