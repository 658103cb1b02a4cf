#!/usr/bin/env bash
# The main command, tools/train.sh, as a user runs it (run by CTest; not a timing test):
#   resume — `tools/train.sh CONFIG 2` interrupted by Ctrl-C (SIGINT to its process group, as a
#            terminal sends it) exits 130 and prints the command that goes on; that command, run
#            as printed, resumes from the checkpoint the ranks wrote at the step they stopped at
#            and ends byte-identical to an unbroken tools/train.sh run (final weights, optimizer
#            state, every step's loss); train.log keeps both parts; both print the final accuracy.
#   failed — a run that fails (before writing anything, or at step 10) says FAILED and where its
#            log is, and lists and plots only the files it wrote, never an earlier run's.
#   compare — the comparison (tools/train.sh alone) at 2 ranks whose runs all fail at step 1
#            shows no plot and leaves no earlier comparison's; failing at step 12, after their
#            step-10 lines, it plots those.
# tools/train.sh runs TRAINER (ADA_TRAINER: it builds nothing while the suite runs) and writes
# its run folders under the source tree's runs/ (removed at the end).
# usage: train_sh_e2e.sh TRAINER SOURCE_DIR WORK_DIR CASE
# shellcheck source-path=SCRIPTDIR source=e2e_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/e2e_common.sh"
export ADA_TRAINER=$trainer

case $case in
resume)
  # Two copies of one config: tools/train.sh names a run folder after its config.
  tag=train_sh_e2e_$$
  for name in unbroken stopped; do
    cat > "$PWD/${tag}_$name.yaml" <<'YAML'
model: {name: lenet5}
data: {name: mnist, path: data/mnist, workers: 1}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
schedule: {name: constant}
reducer: {name: adasum}
train: {steps: 40, batch_per_rank: 16, log_every: 1, eval_every: 20, seed: 3}
checkpoint: {every: 10, keep: 2}
YAML
  done
  u=$src/runs/${tag}_unbroken-np2 s=$src/runs/${tag}_stopped-np2 d=$src/runs/${tag}_unbroken-np4
  trap 'end_background; rm -rf "$u" "$s" "$d"' EXIT
  ADA_TRAINER=$PWD/no_trainer bash "$src/tools/train.sh" "$PWD/${tag}_unbroken.yaml" 2 > bad.txt 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q "^train.sh: ADA_TRAINER=$PWD/no_trainer is not an executable trainer" bad.txt \
    || { cat bad.txt; fail "ADA_TRAINER naming no trainer: exit $rc without the message that says so"; }
  timeout 300 bash "$src/tools/train.sh" "$PWD/${tag}_unbroken.yaml" 2 > unbroken.txt 2>&1 || { tail -20 unbroken.txt; fail "the unbroken run failed"; }
  # 40 steps of 32 MNIST images: well above chance (train.sh would print COLLAPSED at <= 20%).
  grep -q "^train.sh: final test accuracy [0-9.]*%" unbroken.txt || { tail -5 unbroken.txt; fail "the unbroken run did not print its final test accuracy"; }

  # Rank 0 waits at the start of step 15 until it is signalled (ADA_FAULT :wait), so the run is
  # still going when Ctrl-C comes, after step 10's checkpoint. Job control (set -m) starts it in
  # its own process group, as a terminal does, and without the SIGINT that a script's background
  # jobs otherwise ignore.
  set -m
  ADA_FAULT=step@0#15:wait bash "$src/tools/train.sh" "$PWD/${tag}_stopped.yaml" 2 > stopped.txt 2>&1 < /dev/null &
  pid=$!
  set +m
  for _ in $(seq 600); do
    [ -e "$s/checkpoints/ckpt-00000010.json" ] || ! kill -0 $pid 2> /dev/null && break
    sleep 0.1
  done
  [ -e "$s/checkpoints/ckpt-00000010.json" ] || { kill -KILL -- -$pid; tail -20 stopped.txt; fail "no checkpoint at step 10 within 60 s"; }
  kill -INT -- -$pid
  for _ in $(seq 1200); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
  kill -0 $pid 2> /dev/null && { kill -KILL -- -$pid; tail -20 stopped.txt; fail "Ctrl-C: tools/train.sh still running 120 s later"; }
  wait $pid
  rc=$?
  [ $rc -eq 130 ] || { tail -20 stopped.txt; fail "Ctrl-C: tools/train.sh exited $rc, not 130"; }
  step=$(grep -o "stopped by SIGUSR1 at step [0-9]* of 40: checkpoint at step [0-9]* written" stopped.txt | head -1 | awk '{print $6}')
  [ -n "$step" ] || { tail -20 stopped.txt; fail "Ctrl-C: the ranks did not say they stopped at a step with a checkpoint"; }
  go_on=$(grep -o "^train.sh: interrupted; runs/${tag}_stopped-np2 holds the run up to its last checkpoint; to go on: .*" stopped.txt | sed 's/.*; to go on: //')
  [ "$go_on" = "ADA_TRAINER=$(printf %q "$trainer") tools/train.sh $PWD/${tag}_stopped.yaml 2 --resume auto" ] \
    || { tail -5 stopped.txt; fail "Ctrl-C: tools/train.sh did not print the command that goes on (got '$go_on')"; }

  (cd "$src" && unset ADA_TRAINER && timeout 300 bash -c "$go_on") > resumed.txt 2>&1 || { tail -20 resumed.txt; fail "the printed command ($go_on) failed"; }
  grep -q "resumed from runs/${tag}_stopped-np2/checkpoints/ckpt-$(printf %08d "$step").json" resumed.txt \
    || { grep -i resum resumed.txt; fail "the printed command did not resume from step $step's checkpoint"; }
  grep -q "^train.sh: final test accuracy [0-9.]*%" resumed.txt || { tail -5 resumed.txt; fail "the resumed run did not print its final test accuracy"; }
  grep -q "stopped by SIGUSR1 at step $step" "$s/train.log" && grep -q "resumed from" "$s/train.log" \
    || fail "$s/train.log does not hold both the stopped and the resumed part"
  n=0
  for f in "$u"/checkpoints/ckpt-00000040.*safetensors; do
    cmp -s "$f" "$s/checkpoints/$(basename "$f")" || fail "$(basename "$f") differs between the unbroken and the stopped-and-resumed run"
    n=$((n + 1))
  done
  [ $n -gt 0 ] || fail "the unbroken run has no final checkpoint files"
  cmp -s <(grep -o '"loss":[^,]*' "$u/metrics.jsonl") <(grep -o '"loss":[^,]*' "$s/metrics.jsonl") \
    || fail "the losses in metrics.jsonl differ from the unbroken run's"
  # The command to compare runs names the trainer's run folders under runs/ (both of these), not
  # folders of runs such as runs/studies, and works as printed.
  cmp_cmd=$(grep -o "^train.sh: compare runs:  .*" resumed.txt | sed 's/^train.sh: compare runs:  //')
  [[ " $cmp_cmd " == *" runs/${tag}_unbroken-np2 "* && " $cmp_cmd " == *" runs/${tag}_stopped-np2 "* ]] \
    || { tail -5 resumed.txt; fail "the compare command does not name both runs (got '$cmp_cmd')"; }
  png=$PWD/compare.png
  (cd "$src" && eval "${cmp_cmd/-o compare.png/-o $png}") > /dev/null 2>&1 && [ -s "$png" ] \
    || fail "the printed compare command failed: $cmp_cmd"
  # RANKS may be left out before --set (4 ranks).
  timeout 300 bash "$src/tools/train.sh" "$PWD/${tag}_unbroken.yaml" --set train.steps=2 --set train.eval_every=0 \
    > default_ranks.txt 2>&1 || { tail -20 default_ranks.txt; fail "tools/train.sh CONFIG --set ... failed"; }
  grep -q "^train.sh: run folder      runs/${tag}_unbroken-np4$" default_ranks.txt \
    || { tail -5 default_ranks.txt; fail "tools/train.sh CONFIG --set ... did not run on 4 ranks"; }
  echo "resume: Ctrl-C stopped tools/train.sh at step $step (exit 130); '$go_on' resumed there; $n final checkpoint file(s) byte-identical, losses equal"
  ;;
failed)
  # A failed run presents no earlier run's files as its own: after a good run of a config, a run
  # of it that fails before writing anything (an unknown config key) says FAILED with its log, and
  # neither lists the earlier metrics.jsonl as its own nor redraws curves.png from them; a run that
  # fails after writing metrics lines lists and plots those.
  tag=train_sh_e2e_failed_$$
  cat > "$PWD/$tag.yaml" <<'YAML'
model: {name: lenet5}
data: {name: synthetic, size: 64, eval_size: 16, workers: 0}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
schedule: {name: constant}
reducer: {name: average}
train: {steps: 12, batch_per_rank: 8, log_every: 1, eval_every: 12, seed: 1}
checkpoint: {every: 0}
YAML
  r=$src/runs/$tag-np2 rel=runs/$tag-np2
  trap 'end_background; rm -rf "$r"' EXIT
  timeout 300 bash "$src/tools/train.sh" "$PWD/$tag.yaml" 2 > good.txt 2>&1 || { tail -20 good.txt; fail "the good run failed"; }
  grep -q "^train.sh: plot            $rel/curves.png$" good.txt && [ -s "$r/curves.png" ] \
    || { tail -8 good.txt; fail "the good run drew no curves.png"; }
  cp -p "$r/metrics.jsonl" metrics.before
  cp -p "$r/curves.png" curves.before
  sleep 1.1  # a redrawn plot would be newer by the clock
  timeout 300 bash "$src/tools/train.sh" "$PWD/$tag.yaml" 2 --set reducer.nmae=x > bad.txt 2>&1
  rc=$?
  [ $rc -ne 0 ] || { tail -8 bad.txt; fail "a run with an unknown key exited 0"; }
  grep -q "^train.sh: final FAILED (exit $rc; see $rel/train.log)$" bad.txt \
    || { tail -8 bad.txt; fail "the failed run did not say FAILED with its log"; }
  grep -q "nmae" "$r/train.log" || fail "$r/train.log is not the failed run's log"
  ! grep -q "^train.sh: metrics         $rel/metrics.jsonl" bad.txt && ! grep -q "^train.sh: plot" bad.txt \
    && ! grep -q "^train.sh: compare runs" bad.txt \
    || { tail -8 bad.txt; fail "the failed run listed the earlier run's metrics or plot as its own"; }
  grep -q "^train.sh: metrics         none written by this run (those in $rel are from before it)$" bad.txt \
    || { tail -8 bad.txt; fail "the failed run did not say the metrics in its folder are from before it"; }
  [ "$r/curves.png" -nt curves.before ] || [ curves.before -nt "$r/curves.png" ] \
    && fail "the failed run redrew curves.png from the earlier run's metrics"
  cmp -s "$r/curves.png" curves.before && cmp -s "$r/metrics.jsonl" metrics.before \
    || fail "the failed run changed the earlier run's metrics.jsonl or curves.png"
  # Failing at the start of step 10 (an injected fault on rank 0) after writing lines for steps 1-9: those are this run's.
  ADA_FAULT=step@0#10 timeout 300 bash "$src/tools/train.sh" "$PWD/$tag.yaml" 2 > mid.txt 2>&1
  rc=$?
  [ $rc -ne 0 ] && grep -q "^train.sh: final FAILED (exit $rc; see $rel/train.log)$" mid.txt \
    || { tail -8 mid.txt; fail "a run failing at step 10 did not say FAILED (exit $rc)"; }
  grep -q "^train.sh: metrics         $rel/metrics.jsonl$" mid.txt && grep -q "^train.sh: plot            $rel/curves.png$" mid.txt \
    || { tail -8 mid.txt; fail "a run failing at step 10 did not list its own metrics (and no summary) and plot"; }
  [ "$r/curves.png" -nt curves.before ] || fail "a run failing at step 10 did not draw its own curves.png"
  echo "failed: a failed run said FAILED with its log and left the earlier run's metrics and plot unlisted and untouched; one failing at step 10 listed its own"
  ;;
compare)
  d=$src/runs/compare-np2 rel=runs/compare-np2
  trap 'end_background; rm -rf "$d"' EXIT
  mkdir -p "$d" && echo "an earlier comparison's plot" > "$d/compare.png"
  ADA_COMPARE_RANKS=2 ADA_FAULT=step@0#1 timeout 300 bash "$src/tools/train.sh" > none.txt 2>&1 \
    || { tail -8 none.txt; fail "the comparison exited non-zero"; }
  [ "$(grep -c "ranks: FAILED (exit" none.txt)" -ge 2 ] || { tail -8 none.txt; fail "the runs did not fail at step 1"; }
  grep -q "^train.sh: no plot (no run wrote metrics); metrics $rel/\*/metrics.jsonl$" none.txt \
    || { tail -8 none.txt; fail "runs without metrics did not say there is no plot"; }
  [ -e "$d/compare.png" ] && fail "an earlier comparison's compare.png was left in place"
  ADA_COMPARE_RANKS=2 ADA_FAULT=step@0#12 timeout 300 bash "$src/tools/train.sh" > some.txt 2>&1 \
    || { tail -8 some.txt; fail "the comparison exited non-zero"; }
  grep -q "^train.sh: plot $rel/compare.png; metrics $rel/\*/metrics.jsonl$" some.txt && [ -s "$d/compare.png" ] \
    || { tail -8 some.txt; fail "runs that wrote lines before failing were not plotted"; }
  echo "compare: no plot from runs without metrics (and none left from before); a plot of the lines runs wrote before failing"
  ;;
*)
  fail "unknown case '$case' (resume, failed, compare)"
  ;;
esac
