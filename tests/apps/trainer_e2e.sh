#!/usr/bin/env bash
# End-to-end checks of build/bin/trainer under mpiexec (run by CTest; not a timing test):
#   reducers  — short runs with sum, average and adasum on 2 ranks (and on a 16-bit wire): the
#               loss falls and the parameter checksums agree on every rank at every step
#               (checksum_every: 1); local SGD's last line gives its last step's LR;
#   resume    — a run interrupted at step 10 and resumed gives the same losses, bit for bit,
#               as an unbroken run of 20 steps; each rank's dropout generator has its own seed;
#   loss_scale — dynamic and static power-of-two loss scaling give the unscaled losses bit for
#               bit, also across a resume, and the scale grows as its rule says;
#   overrides — --set changes a value (and a misspelt one is rejected); --describe prints the
#               model without reading the data; a config error is printed once, not once a rank;
#   bad       — a table of bad configs and command lines, each with the message expected;
#   smoke     — every config in configs/ runs 2 steps on synthetic data with small shapes;
#   timeline  — train.timeline writes one Chrome trace with both ranks, and buckets are reduced
#               while backward still runs (gradient and overlapped model-delta sync).
#   hf        — train.init_from a Hugging Face BertForPreTraining file (tests/golden/bert_hf),
#               into a model with NSP (every tensor used) and one without (its NSP head left
#               out, said in the log); export_hf_bert of the run's checkpoint gives HF's names;
#   finetune  — pre-train a small BERT a few steps (synthetic MLM), fine-tune it for spam vs ham
#               (data/spam, tools/fetch_data.sh spam) with train.init_from: the log names the
#               new head and the MLM head left out; a from-scratch fine-tuning of 240 steps must
#               beat the dev set's majority class (ham, 68.6 %) by 10 points; a probe
#               (train.freeze: the encoder) changes no frozen tensor and trains the head;
#               weights trained with another vocabulary of the same size are refused
#               (train.init_from, --resume); data.eval_path naming the training file, and
#               train.threads above the node's cores, are each warned about once;
#   squad     — the question-answering chain on a small SQuAD-format file made here (contexts of
#               several windows): fine-tune (model.head question_answering, data.name squad),
#               squad_predict writes predictions.json and EM/F1, squad_eval scores the file the
#               same; the model must have learnt its training questions (EM >= 80);
#   tensorboard — train.tensorboard's event files, read back by an independent reader
#               (tests/tools/tensorboard_reader.py), equal metrics.jsonl, also after a resume
#               from an earlier checkpoint (no duplicate steps);
#   mlm_eval  — the bert_tiny configs, on shards made as tools/train.sh makes them (prepare_mlm
#               with a held-out set), really evaluate: an eval line lands in metrics.jsonl; with
#               data.validation_size also a validation figure (val_mlm_loss); a corrupt shard
#               that one rank verifies stops every rank before step 1;
#   validation — data.validation_size: every evaluation line and summary.json hold val_* beside
#               eval_*, the log names the held-out examples, an evaluation set the ranks
#               cannot split evenly counts each example once, a validation set alone is enough
#               for train.eval_every, and a bad value stops the run naming the key.
# usage: trainer_e2e.sh TRAINER SOURCE_DIR WORK_DIR CASE
# shellcheck source-path=SCRIPTDIR source=e2e_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/e2e_common.sh"

# A tiny LeNet run on synthetic MNIST-shaped data (64 examples: the model can fit them).
cat > tiny.yaml <<'YAML'
model: {name: lenet5}
data: {name: synthetic, size: 64, eval_size: 16, workers: 1}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
schedule: {name: constant}
reducer: {name: average}
train: {steps: 20, batch_per_rank: 8, log_every: 1, checksum_every: 1, eval_every: 10, seed: 3}
checkpoint: {every: 10, keep: 5}
YAML

# --set for a reducer; adasum asks for model-delta mode (each rank's own optimizer state), which
# is no longer its default with SGD.
red_args() { echo --set reducer.name=$1; [ "$1" != adasum ] || echo --set reducer.target=model_delta; }

losses() { python3 -c 'import json,sys; print(" ".join("%.9g" % json.loads(l)["loss"] for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1"; }

case $case in
hf)
  # A BERT with the shapes of tests/golden/bert_hf.safetensors, on synthetic MLM data.
  cat > small_bert.yaml <<'YAML'
model: {name: bert, preset: tiny, vocab_size: 50, hidden: 32, layers: 2, heads: 2, ffn: 64, max_positions: 16, nsp: true}
data: {name: synthetic, size: 64, eval_size: 16, seq_len: 16, workers: 1}
optimizer: {name: adamw, lr: 0.001}
schedule: {name: constant}
reducer: {name: average}
train: {steps: 4, batch_per_rank: 4, log_every: 2, seed: 1}
YAML
  # The golden file's weights alone (it also holds the twin's batch and results).
  /usr/bin/python3 - "$src/tests/golden/bert_hf.safetensors" bert_hf.safetensors <<'PY' || fail "copying the weights"
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
keep, blobs, at = {}, [], 0
for k, v in h.items():
    if k == "__metadata__" or "/" in k:
        continue
    lo, hi = v["data_offsets"]; blobs.append(b[8 + n + lo:8 + n + hi])
    keep[k] = dict(v, data_offsets=[at, at + hi - lo]); at += hi - lo
head = json.dumps(keep).encode(); head += b" " * (-len(head) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
PY
  golden=$PWD/bert_hf.safetensors
  mpi 2 "$trainer" --config small_bert.yaml --set train.init_from="$golden" --set output.dir=with_nsp \
    --set checkpoint.every=2 > nsp.txt 2>&1 ||
    { cat nsp.txt; fail "init_from a Hugging Face file"; }
  grep -q "model weights initialised from $golden$" nsp.txt || { cat nsp.txt; fail "the log does not say it was initialised from every tensor"; }
  mpi 2 "$trainer" --config small_bert.yaml --set model.nsp=false --set train.init_from="$golden" --set output.dir=no_nsp > no.txt 2>&1 ||
    { cat no.txt; fail "init_from into a model without NSP"; }
  grep -q "4 of its tensors match nothing in this model and are left out: pooler.weight pooler.bias cls.nsp.weight cls.nsp.bias" no.txt ||
    { cat no.txt; fail "the log does not name the heads left out"; }
  "$(dirname "$trainer")/export_hf_bert" with_nsp/checkpoints hf.safetensors > export.txt 2>&1 || { cat export.txt; fail "export_hf_bert"; }
  # Never over its own checkpoint (it replaced the tensors it read), and a damaged newest one said.
  newest=$(ls with_nsp/checkpoints/ckpt-*.json | sort | tail -1)
  cp "${newest%.json}.safetensors" kept.safetensors
  "$(dirname "$trainer")/export_hf_bert" "$newest" "${newest%.json}.safetensors" > self.txt 2>&1 &&
    fail "export_hf_bert wrote over its own checkpoint"
  grep -q "is the input .*writing it would replace what is read" self.txt || { cat self.txt; fail "export_hf_bert over its input: no message"; }
  cmp -s kept.safetensors "${newest%.json}.safetensors" || fail "export_hf_bert changed its input"
  truncate -s 100 "${newest%.json}.safetensors"  # checkpoint.every=2: an older one is there
  "$(dirname "$trainer")/export_hf_bert" with_nsp/checkpoints older.safetensors > older.txt 2>&1 || { cat older.txt; fail "export_hf_bert past a damaged newest checkpoint"; }
  grep -q "newer checkpoints in with_nsp/checkpoints are damaged" older.txt || { cat older.txt; fail "export_hf_bert took an older checkpoint without a word"; }
  cp kept.safetensors "${newest%.json}.safetensors"
  /usr/bin/python3 - "$golden" hf.safetensors <<'PY' || fail "the exported names"
import json, struct, sys
def names(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k for k in h if k != "__metadata__"}, h.get("__metadata__", {})
gold, _ = names(sys.argv[1]); out, meta = names(sys.argv[2])
want = gold - {"bert.embeddings.position_ids", "cls.predictions.decoder.weight"}
assert out == want, (sorted(out ^ want))
assert meta.get("format") == "pt", meta
print(f"hf: {len(out)} tensors exported under Hugging Face's names")
PY
  ;;
finetune)
  for f in train dev; do
    [ -f "$src/data/spam/$f.jsonl" ] || fail "$src/data/spam/$f.jsonl is missing: run tools/fetch_data.sh spam (tools/test.sh does)"
  done
  shape=(--set model.hidden=64 --set model.layers=2 --set model.heads=2 --set model.ffn=128 --set model.max_positions=64)
  mpi 2 "$trainer" --config "$src/configs/bert_tiny_mlm_lamb.yaml" "${shape[@]}" --set data.name=synthetic \
    --set data.size=32 --set data.eval_size=0 --set data.seq_len=64 --set train.steps=2 --set train.batch_per_rank=2 \
    --set train.eval_every=null --set train.max_eval_batches=null --set schedule.warmup_steps=1 \
    --set output.dir=pretrained > pre.txt 2>&1 || { cat pre.txt; fail "the pre-training run"; }
  ft=(--config "$src/configs/bert_tiny_spam.yaml" "${shape[@]}" --set data.seq_len=64
      --set data.path="$src/data/spam/train.jsonl" --set data.eval_path="$src/data/spam/dev.jsonl"
      --set data.vocab="$src/data/bert/vocab.txt" --set train.epochs=0)
  mpi 2 "$trainer" "${ft[@]}" --set train.steps=2 --set schedule.warmup_steps=1 --set train.init_from=pretrained/checkpoints \
    --set output.dir=from_pretrained > init.txt 2>&1 || { cat init.txt; fail "fine-tuning from the checkpoint"; }
  grep -q "4 tensors not in it keep their initial values (a new head): pooler.weight pooler.bias classifier.weight classifier.bias" init.txt ||
    { cat init.txt; fail "the log does not name the new head"; }
  grep -q "match nothing in this model and are left out: cls.decoder_bias cls.transform.weight" init.txt ||
    { cat init.txt; fail "the log does not name the MLM head left out"; }
  # Weights trained on the ids of one vocabulary are refused with another of the same size (two
  # lines swapped), by train.init_from and by --resume; with the same vocabulary they load.
  awk 'NR == 2000 { held = $0; next } { print } NR == 2001 { print held }' "$src/data/bert/vocab.txt" > swapped.txt
  cmp -s swapped.txt "$src/data/bert/vocab.txt" && fail "the swapped vocabulary is the same file"
  mpi 2 "$trainer" "${ft[@]}" --set train.steps=1 --set schedule.warmup_steps=0 --set train.init_from=from_pretrained/checkpoints \
    --set output.dir=same_vocab > same_vocab.txt 2>&1 || { cat same_vocab.txt; fail "init_from a fine-tuned checkpoint of the same vocabulary"; }
  for how in init_from resume; do
    if [ $how = init_from ]; then args=(--set train.init_from=from_pretrained/checkpoints --set output.dir=other_vocab)
    else args=(--set output.dir=from_pretrained --resume auto); fi
    mpi 2 "$trainer" "${ft[@]}" --set train.steps=3 --set schedule.warmup_steps=0 --set data.vocab=swapped.txt "${args[@]}" \
      > vocab_$how.txt 2>&1 && { cat vocab_$how.txt; fail "$how with another vocabulary was accepted"; }
    grep -q "was trained on the token ids of another vocabulary (hash [0-9]*) than this run's data (hash [0-9]*)" vocab_$how.txt ||
      { cat vocab_$how.txt; fail "$how with another vocabulary: no message naming the vocabularies"; }
  done
  # A probe: the encoder loaded and frozen, only the new head (pooler, classifier) trains. The frozen
  # tensors of its checkpoints equal the pre-trained ones bit for bit; the classifier moved
  # between its first and last checkpoint.
  mpi 2 "$trainer" "${ft[@]}" --set train.steps=3 --set schedule.warmup_steps=1 --set train.init_from=pretrained/checkpoints \
    --set 'train.freeze=[embeddings, encoder]' --set checkpoint.every=1 --set checkpoint.keep=5 \
    --set output.dir=probe > probe.txt 2>&1 || { cat probe.txt; fail "the probe run"; }
  grep -q "train.freeze: 37 parameter tensors" probe.txt || { cat probe.txt; fail "the log does not count the frozen tensors"; }
  /usr/bin/python3 - pretrained/checkpoints probe/checkpoints <<'PY' || fail "train.freeze changed a frozen tensor, or trained nothing"
import glob, json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
pre = tensors(sorted(glob.glob(sys.argv[1] + "/ckpt-*.safetensors"))[-1])
probe = [tensors(p) for p in sorted(glob.glob(sys.argv[2] + "/ckpt-*.safetensors"))]
assert len(probe) >= 2, "the probe run kept fewer than two checkpoints"
frozen = [k for k in probe[0] if k.startswith(("model.embeddings.", "model.encoder."))]
assert len(frozen) == 37, frozen
bad = [k for p in probe for k in frozen if p[k] != pre[k]]
assert not bad, f"changed: {bad}"
assert probe[0]["model.classifier.weight"] != probe[-1]["model.classifier.weight"], "the classifier did not train"
print(f"finetune: {len(frozen)} frozen tensors equal the pre-trained ones bit for bit in {len(probe)} checkpoints; the classifier trained")
PY
  # Freezing a new tensor too (the pooler: not in the checkpoint) is said in the log.
  mpi 2 "$trainer" "${ft[@]}" --set train.steps=2 --set schedule.warmup_steps=1 --set train.init_from=pretrained/checkpoints \
    --set 'train.freeze=[embeddings, encoder, pooler]' --set output.dir=probe_pooler > pooler.txt 2>&1 || { cat pooler.txt; fail "the probe run with a frozen pooler"; }
  grep -q "2 of the new tensors are frozen (train.freeze), so they stay random for the whole run: pooler.weight pooler.bias" pooler.txt ||
    { cat pooler.txt; fail "the log does not say that a frozen new tensor stays random"; }
  # Evaluating on the training file, and more threads than the cores, are warned about (once).
  head -n 40 "$src/data/spam/train.jsonl" > small.jsonl
  threads=$(($(getconf _NPROCESSORS_ONLN) + 1))
  mpi 2 "$trainer" "${ft[@]}" --set train.steps=1 --set schedule.warmup_steps=0 --set data.path=small.jsonl --set train.batch_per_rank=4 \
    --set data.eval_path=small.jsonl --set train.threads=$threads --set output.dir=on_train > on_train.txt 2>&1 ||
    { cat on_train.txt; fail "the run evaluated on its training file"; }
  [ "$(grep -c "data.eval_path (set by --set data.eval_path=small.jsonl): 'small.jsonl' is also training data (data.path)" on_train.txt)" = 1 ] ||
    { cat on_train.txt; fail "no single warning that data.eval_path is the training file"; }
  [ "$(grep -c "train.threads (set by --set train.threads=$threads): $threads threads on each of this node's 2 rank(s)" on_train.txt)" = 1 ] ||
    { cat on_train.txt; fail "no single warning that train.threads oversubscribes the cores"; }
  # From scratch, 240 steps of 2 x 16 e-mails of 64 tokens (about 1.6 epochs).
  mpi 2 "$trainer" "${ft[@]}" --set train.steps=240 --set train.batch_per_rank=16 --set optimizer.lr=3e-4 \
    --set schedule.warmup_steps=24 --set train.eval_every=240 --set output.dir=scratch > scratch.txt 2>&1 ||
    { cat scratch.txt; fail "fine-tuning from scratch"; }
  /usr/bin/python3 - scratch/summary.json <<'PY' || { tail -5 scratch.txt; fail "fine-tuning did not beat the majority class by 10 points"; }
import json, sys
acc = json.load(open(sys.argv[1]))["eval_accuracy"]
majority = 1 - 184 / 586  # dev: 586 e-mails, 184 spam
print(f"finetune: dev accuracy {100 * acc:.2f} % against the majority class's {100 * majority:.2f} %")
sys.exit(0 if acc >= majority + 0.10 else 1)
PY
  ;;
squad)
  [ -f "$src/data/bert/vocab.txt" ] || fail "$src/data/bert/vocab.txt is missing: run tools/fetch_data.sh bert-vocab (tools/test.sh does)"
  /usr/bin/python3 - squad.json <<'PY' || fail "making the SQuAD file"
import json, random, sys
r = random.Random(0)
words = ("the of and to in is was for on as with by at from his her an they which this had "
         "not but one all were we when there can more if out so said what up its about into "
         "than them only other new some could time these two may then do first any my now "
         "such like our over man me even most made after also did many before must through "
         "back years where much your way well down should because each just those people").split()
names = "paris london berlin rome madrid vienna prague lisbon dublin oslo".split()
data = []
for a in range(24):
    # One question a paragraph, its answer (a year or a capital) the only such word among 30-90
    # filler words (several windows): learnt from the tokens themselves in a few hundred steps,
    # so what this checks is the chain (labels, windows, decoding, scoring), not reasoning.
    if a % 2:
        answer, q = str(1800 + 7 * a), "when was the city founded"
    else:
        answer, q = names[a // 2 % len(names)], "which city is the capital"
    ctx_words = r.choices(words, k=r.randint(20, 60)) + ["it", "is", answer]
    qas = [(q, answer)]
    ctx_words += r.choices(words, k=r.randint(10, 30))
    context = " ".join(ctx_words).capitalize() + "."
    entries = []
    for i, (q, ans) in enumerate(qas):
        start = context.find(" " + ans + " ") + 1
        entries.append({"id": f"q{a}-{i}", "question": q, "answers": [{"text": ans, "answer_start": start}]})
    data.append({"title": f"t{a}", "paragraphs": [{"context": context, "qas": entries}]})
json.dump({"version": "1.1", "data": data}, open(sys.argv[1], "w"))
PY
  cat > squad.yaml <<YAML
model: {name: bert, preset: tiny, hidden: 64, layers: 2, heads: 2, ffn: 128, max_positions: 64, head: question_answering, dropout: 0.0, attention_dropout: 0.0}
data: {name: squad, path: squad.json, eval_path: squad.json, vocab: $src/data/bert/vocab.txt, max_seq_length: 64, doc_stride: 24, max_query_length: 16, workers: 0}
optimizer: {name: adamw, lr: 0.002, weight_decay: 0.0}
schedule: {name: linear, warmup_steps: 20}
reducer: {name: average}
train: {steps: 300, batch_per_rank: 8, eval_every: 300, log_every: 50, seed: 1}
output: {dir: run}
YAML
  mpi 2 "$trainer" --config squad.yaml > train.txt 2>&1 || { cat train.txt; fail "fine-tuning on SQuAD windows"; }
  grep -q "SQuAD 'squad.json' (24 questions, [0-9]* windows)" train.txt || { cat train.txt; fail "the log does not describe the SQuAD windows"; }
  "$(dirname "$trainer")/squad_predict" --config squad.yaml --weights run/checkpoints --dataset squad.json \
    --out predictions.json > predict.txt 2>&1 || { cat predict.txt; fail "squad_predict"; }
  "$(dirname "$trainer")/squad_eval" squad.json predictions.json > eval.txt 2>&1 || { cat eval.txt; fail "squad_eval"; }
  [ "$(tail -1 predict.txt)" = "$(tail -1 eval.txt)" ] || { tail -3 predict.txt eval.txt; fail "squad_predict and squad_eval score differently"; }
  # Under mpirun the ranks share the windows (4 ranks, 39 windows: uneven shares) and rank 0
  # writes the same answers and scores (its stdout and stderr may interleave in either order).
  mpi 4 "$(dirname "$trainer")/squad_predict" --config squad.yaml --weights run/checkpoints --dataset squad.json \
    --out predictions4.json --batch 5 > predict4.txt 2>&1 || { cat predict4.txt; fail "squad_predict on 4 ranks"; }
  grep -q "windows of 64 tokens, [0-9]* to [0-9]* on each of 4 ranks" predict4.txt || { cat predict4.txt; fail "squad_predict does not say how the ranks share the windows"; }
  cmp predictions.json predictions4.json || fail "squad_predict on 4 ranks answers differently from 1"
  [ "$(grep '^{' predict4.txt)" = "$(tail -1 eval.txt)" ] || { cat predict4.txt eval.txt; fail "squad_predict on 4 ranks scores differently"; }
  # The CLI audit of stop 83: never over its dataset; no questions, or another dataset's answers, said.
  cp squad.json squad.keep
  "$(dirname "$trainer")/squad_predict" --config squad.yaml --weights run/checkpoints --dataset squad.json \
    --out squad.json > self.txt 2>&1 && fail "squad_predict wrote over its dataset"
  grep -q "\-\-out squad.json is the input squad.json" self.txt || { cat self.txt; fail "squad_predict over its dataset: no message"; }
  cmp -s squad.json squad.keep || fail "squad_predict changed its dataset"
  # Weights without the QA head (an encoder alone): refused, not answered by a random head.
  /usr/bin/python3 - run/checkpoints/"$(ls run/checkpoints | grep 'safetensors$' | grep -v optim | tail -1)" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, body = json.loads(raw[8:8 + n]), raw[8 + n:]
out, blobs, at = {}, [], 0
for name, e in header.items():
    if not name.startswith("model.") or name.startswith("model.qa_outputs"):
        continue
    b, e2 = e["data_offsets"]
    out[name[len("model."):]] = dict(e, data_offsets=[at, at + e2 - b])
    blobs.append(body[b:e2])
    at += e2 - b
text = json.dumps(out).encode()
open("encoder.safetensors", "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
PY
  "$(dirname "$trainer")/squad_predict" --config squad.yaml --weights encoder.safetensors --dataset squad.json \
    --out headless.json > headless.txt 2>&1 && fail "squad_predict answered with a random QA head"
  grep -q "encoder.safetensors lacks qa_outputs.weight, qa_outputs.bias of this Bert, which would stay random" headless.txt ||
    { cat headless.txt; fail "squad_predict without the QA head: no message"; }
  echo '{"version": "1.1", "data": []}' > empty.json
  "$(dirname "$trainer")/squad_eval" empty.json predictions.json > empty.txt 2>&1 && fail "squad_eval scored a dataset without questions"
  grep -q "empty.json: no question to score" empty.txt || { cat empty.txt; fail "squad_eval: no message for a dataset without questions"; }
  # The two files swapped: the predictions named as such.
  "$(dirname "$trainer")/squad_eval" predictions.json squad.json > swapped.txt 2>&1 && fail "squad_eval took predictions for a dataset"
  grep -q "predictions.json: a predictions file (question id -> answer text), not a SQuAD dataset" swapped.txt ||
    { cat swapped.txt; fail "squad_eval with its files swapped: no message"; }
  echo '{"not-a-question": "x"}' > other.json
  "$(dirname "$trainer")/squad_eval" squad.json other.json > other.txt 2>&1 || { cat other.txt; fail "squad_eval of another dataset's answers"; }
  grep -q "1 of the 1 answers in other.json are for questions squad.json does not have" other.txt || { cat other.txt; fail "squad_eval: answers for unknown questions not said"; }
  /usr/bin/python3 - eval.txt <<'PY' || { cat predict.txt; fail "the model did not learn its training questions"; }
import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"squad: exact match {s['exact_match']:.1f}, F1 {s['f1']:.1f} on the 24 training questions")
sys.exit(0 if s["exact_match"] >= 80 else 1)
PY
  ;;
tensorboard)
  protoc --proto_path="$src/apps/trainer" --python_out=. "$src/apps/trainer/tensorboard.proto" || fail "protoc"
  tb=(--set train.tensorboard=tb --set reducer.name=adasum --set train.log_every=2)
  mpi 2 "$trainer" --config tiny.yaml "${tb[@]}" --set output.dir=run > run.txt 2>&1 || { cat run.txt; fail "the run"; }
  /usr/bin/python3 "$src/tests/tools/tensorboard_reader.py" . tb/run run || fail "the events of the run"
  # Resumed from step 10 after the run reached 20: the curves go on from 10 without duplicates.
  rm run/checkpoints/ckpt-00000020.*
  mpi 2 "$trainer" --config tiny.yaml "${tb[@]}" --set output.dir=run --resume auto > resumed.txt 2>&1 ||
    { cat resumed.txt; fail "the resumed run"; }
  grep -q "resumed from .*step 10" resumed.txt || { cat resumed.txt; fail "did not resume at step 10"; }
  /usr/bin/python3 "$src/tests/tools/tensorboard_reader.py" . tb/run run || fail "the events after the resume"
  # A run resumed at its end evaluates again: one evaluation event and line of its last step.
  mpi 2 "$trainer" --config tiny.yaml "${tb[@]}" --set output.dir=run --resume auto > again.txt 2>&1 ||
    { cat again.txt; fail "the finished run resumed"; }
  /usr/bin/python3 "$src/tests/tools/tensorboard_reader.py" . tb/run run || fail "the events after resuming the finished run"
  # Another output folder of the same last name (b/run) writes beside it, to tb/b_run.
  mpi 2 "$trainer" --config tiny.yaml "${tb[@]}" --set output.dir=b/run > b.txt 2>&1 || { cat b.txt; fail "b/run"; }
  grep -q "tb/run holds another run's curves; this run's go to tb/b_run" b.txt || { cat b.txt; fail "b/run's folder not named"; }
  /usr/bin/python3 "$src/tests/tools/tensorboard_reader.py" . tb/b_run b/run || fail "b/run's events"
  /usr/bin/python3 "$src/tests/tools/tensorboard_reader.py" . tb/run run || fail "run's events after b/run's beside them"
  # A damaged event file does not stop a resume: the curves before the damage are kept, with a warning.
  f=$(ls tb/b_run/events.out.tfevents.*)
  printf '\x7f' | dd of="$f" bs=1 seek=$(( $(stat -c %s "$f") / 2 )) conv=notrunc 2>/dev/null
  rm b/run/checkpoints/ckpt-00000020.*
  mpi 2 "$trainer" --config tiny.yaml "${tb[@]}" --set output.dir=b/run --resume auto > b2.txt 2>&1 ||
    { cat b2.txt; fail "a damaged event file stopped the resume"; }
  grep -q "fails its CRC-32C; the curves up to there are kept" b2.txt || { cat b2.txt; fail "no warning about the damaged event file"; }
  ;;
reducers)
  # sum, average, adasum; then average and adasum with their buckets on a 16-bit wire (reducer.precision).
  for run in sum average adasum average:fp16 adasum:bf16; do
    red=${run%%:*} wire=fp32
    [ "$run" = "$red" ] || wire=${run#*:}
    lr=0.02  # average: x2 (linear scaling); sum: no scaling, but it hands SGD twice the mean gradient
    mpi 2 "$trainer" --config tiny.yaml --set reducer.name=$red --set reducer.precision=$wire --set train.steps=60 \
      --set optimizer.lr=$lr --set output.dir=run_$red$wire > log_$red.txt 2>&1 || { cat log_$red.txt; fail "$run run failed"; }
    red=$red$wire
    python3 - run_$red/metrics.jsonl "$red" <<'PY' || fail "$red: loss did not fall"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first = sum(r["loss"] for r in rows[:5]) / 5
last = sum(r["loss"] for r in rows[-5:]) / 5
print(f"{sys.argv[2]}: loss {first:.4f} -> {last:.4f}")
sys.exit(0 if last < 0.8 * first else 1)
PY
  done
  # Local SGD's last line (written after the loop, at its final average) gives the LR its last
  # step ran at, as a line written inside a step does (it gave the next step's: 0 at the end of
  # a linear decay).
  mpi 2 "$trainer" --config tiny.yaml --set schedule.name=linear --set train.steps=6 --set sync.name=local_sgd \
    --set sync.period=4 --set output.dir=run_local_lr > log_local_lr.txt 2>&1 || { cat log_local_lr.txt; fail "local SGD run"; }
  mpi 2 "$trainer" --config tiny.yaml --set schedule.name=linear --set train.steps=6 \
    --set output.dir=run_sync_lr > log_sync_lr.txt 2>&1 || { cat log_sync_lr.txt; fail "gradient-sync run"; }
  python3 - run_local_lr/metrics.jsonl run_sync_lr/metrics.jsonl <<'PY' || fail "local SGD's last line gives another step's LR"
import json, sys
last = lambda p: [json.loads(l) for l in open(p) if '"loss"' in l][-1]
a, b = last(sys.argv[1]), last(sys.argv[2])
print(f"reducers: the step-{a['step']} line's LR, local SGD {a['lr']}, gradient sync {b['lr']}")
sys.exit(0 if a["step"] == b["step"] == 6 and a["lr"] == b["lr"] > 0 else 1)
PY
  ;;
resume)
  # average: gradient mode; adasum: model-delta mode, where each rank's optimizer state is its own.
  for red in average adasum; do
    set_red=($(red_args $red))
    mpi 2 "$trainer" --config tiny.yaml "${set_red[@]}" --set output.dir=full_$red > full.txt 2>&1 || { cat full.txt; fail "$red full run"; }
    mpi 2 "$trainer" --config tiny.yaml "${set_red[@]}" --set train.steps=10 --set output.dir=part_$red > part1.txt 2>&1 || { cat part1.txt; fail "$red part 1"; }
    mpi 2 "$trainer" --config tiny.yaml "${set_red[@]}" --set output.dir=part_$red --resume auto > part2.txt 2>&1 || { cat part2.txt; fail "$red part 2"; }
    grep -q "resumed from .*ckpt-00000010.json" part2.txt || { cat part2.txt; fail "did not say which checkpoint it resumed"; }
    a=$(losses full_$red/metrics.jsonl); b=$(losses part_$red/metrics.jsonl)
    [ "$a" = "$b" ] || fail "$red: resumed losses differ:\n unbroken: $a\n resumed:  $b"
    echo "resume ($red): 20 losses identical"
  done
  # Each rank draws its own dropout masks: the ranks' generator seeds (kept in the checkpoint, one
  # a rank) differ; with one seed for all, every rank would drop the same units of its examples.
  /usr/bin/python3 - full_average/checkpoints/ckpt-00000020.json <<'PY' || fail "the ranks share one dropout seed"
import json, sys
seeds = json.load(open(sys.argv[1]))["rng_seed"]
assert len(seeds) == 2 and len(set(seeds)) == 2, seeds
print("resume: each rank's dropout generator has its own seed", seeds)
PY
  ;;
loss_scale)
  # Power-of-two loss scales change no bit: dynamic scaling from 2^10 doubling every 3 steps (and
  # a static 512) gives the unscaled run's losses exactly; the scaler's state survives a resume.
  for red in average adasum; do
    set_red=($(red_args $red))
    dyn=(--set train.loss_scale=dynamic --set train.loss_scale_init=1024 --set train.loss_scale_growth_interval=3)
    mpi 2 "$trainer" --config tiny.yaml "${set_red[@]}" --set output.dir=plain_$red > plain.txt 2>&1 || { cat plain.txt; fail "$red unscaled run"; }
    mpi 2 "$trainer" --config tiny.yaml "${set_red[@]}" "${dyn[@]}" --set output.dir=dyn_$red > dyn.txt 2>&1 || { cat dyn.txt; fail "$red dynamic run"; }
    grep -q "loss scale dynamic from 1024" dyn.txt || { cat dyn.txt; fail "the run does not say it scales the loss"; }
    mpi 2 "$trainer" --config tiny.yaml "${set_red[@]}" --set train.loss_scale=512 --set output.dir=static_$red > static.txt 2>&1 || { cat static.txt; fail "$red static run"; }
    mpi 2 "$trainer" --config tiny.yaml "${set_red[@]}" "${dyn[@]}" --set train.steps=10 --set output.dir=part_$red > part1.txt 2>&1 || { cat part1.txt; fail "$red part 1"; }
    mpi 2 "$trainer" --config tiny.yaml "${set_red[@]}" "${dyn[@]}" --set output.dir=part_$red --resume auto > part2.txt 2>&1 || { cat part2.txt; fail "$red part 2"; }
    a=$(losses plain_$red/metrics.jsonl)
    for run in dyn static part; do
      b=$(losses ${run}_$red/metrics.jsonl)
      [ "$a" = "$b" ] || fail "$red: losses with loss scaling ($run) differ:\n unscaled: $a\n $run: $b"
    done
    python3 - dyn_$red/summary.json part_$red/summary.json <<'PY' || fail "$red: final loss scale"
import json, sys
for path in sys.argv[1:]:
    s = json.load(open(path))
    # 20 steps, no overflow: 1024 doubled after steps 3, 6, ..., 18
    assert s["loss_scale"] == 1024 * 2 ** 6 and s["loss_scale_overflows"] == 0, (path, s)
PY
    # A scale of 3 is not exact: the losses must move by rounding only — proof that backward
    # really starts from the scale and the gradients really are divided by it.
    mpi 2 "$trainer" --config tiny.yaml "${set_red[@]}" --set train.loss_scale=3 --set output.dir=three_$red > three.txt 2>&1 || { cat three.txt; fail "$red scale-3 run"; }
    python3 - plain_$red/metrics.jsonl three_$red/metrics.jsonl <<'PY' || fail "$red: a loss scale of 3"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:])
assert len(a) == len(b) == 20
assert a != b, "identical to the last bit: the scale is not applied (or applied and never undone)"
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert worst < 1e-3, f"losses differ by {worst:.2e} relative: the gradients are not unscaled"
PY
    echo "loss_scale ($red): 20 losses identical to the unscaled run (dynamic, static, resumed); scale 3 within rounding"
  done
  ;;
overrides)
  mpi 1 "$trainer" --config tiny.yaml --set train.steps=3 --set optimizer.lr=0.01 --set output.dir=o > o.txt 2>&1 || { cat o.txt; fail "override run"; }
  grep -q "lr: 0.01" o/config.yaml || fail "resolved config does not hold the override"
  [ "$(grep -c '"loss"' o/metrics.jsonl)" = 3 ] || fail "--set train.steps=3 not applied"
  echo "overrides: applied"
  # --describe reads the model only: a config whose data is absent here and whose linear
  # schedule needs the data's length still describes.
  mpi 1 "$trainer" --config "$src/configs/bert_tiny_spam.yaml" --set data.path=nowhere.jsonl --describe > d.txt 2>&1 ||
    { cat d.txt; fail "--describe of bert_tiny_spam.yaml"; }
  grep -q "^classifier  Linear  params 258$" d.txt && grep -q "^total parameters: 4386178$" d.txt ||
    { cat d.txt; fail "--describe printed no model"; }
  echo "overrides: --describe prints the model alone"
  # A config mistake every rank finds is printed once (by rank 0), not once a rank; one that a
  # single rank finds (here rank 2's --set, given to ranks 2 and 3 only: printed by rank 2) is
  # printed by the lowest rank that found it, and the job still ends.
  mpi 4 "$trainer" --config tiny.yaml --set train.stpes=3 > once.txt 2>&1 && { cat once.txt; fail "a misspelt key was accepted"; }
  [ "$(grep -c "error: trainer: .*key that nothing reads" once.txt)" = 1 ] && grep -q "^\[rank 0/4\].*error: trainer: " once.txt ||
    { cat once.txt; fail "the config error was not printed exactly once, by rank 0"; }
  mpi 2 "$trainer" --config tiny.yaml : -np 2 "$trainer" --config tiny.yaml --set train.stpes=3 > alone.txt 2>&1 &&
    { cat alone.txt; fail "ranks 2 and 3's misspelt key was accepted"; }
  [ "$(grep -c "error: trainer: .*key that nothing reads" alone.txt)" = 1 ] && grep -q "^\[rank 2/4\].*error: trainer: " alone.txt ||
    { cat alone.txt; fail "ranks 2 and 3's config error was not printed exactly once, by rank 2"; }
  echo "overrides: a config error is printed once, by the lowest rank that found it"
  ;;
bad)
  printf 'model: {name: lenet5\n' > broken.yaml
  sed 's/reducer: {name: average}/reducer: {name: adasumm}/' tiny.yaml > typo_reducer.yaml
  sed 's/batch_per_rank: 8/batch_per_rnak: 8/' tiny.yaml > typo_key.yaml
  sed 's/lr: 0.05/lr: fast/' tiny.yaml > bad_type.yaml
  sed 's/lr: 0.05/lr: -1/' tiny.yaml > bad_value.yaml
  sed 's/steps: 20/steps: 20, epochs: 2/' tiny.yaml > both.yaml
  sed 's/name: synthetic, size: 64/name: mnist, path: nowhere/' tiny.yaml > no_data.yaml
  # Impossible values for the model, and evaluation keys without an evaluation set.
  sed 's/model: {name: lenet5}/model: {name: lenet5, num_classes: 0}/' tiny.yaml > zero_classes.yaml
  sed 's/batch_per_rank: 8/batch_per_rank: -4/' tiny.yaml > negative_batch.yaml
  sed 's/log_every: 1,/log_every: 0,/' tiny.yaml > zero_log.yaml
  sed 's/eval_size: 16/eval_size: 0/' tiny.yaml > no_eval.yaml
  # MNIST-format files whose training labels hold a 77 (at index 5): it must fail at open.
  python3 - <<'PY'
import os, struct
os.makedirs("mn", exist_ok=True)
def idx(path, dims, data):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data))
for split, n in (("train", 64), ("t10k", 16)):
    idx(f"mn/{split}-images-idx3-ubyte", [n, 28, 28], [i % 251 for i in range(n * 784)])
    labels = [i % 10 for i in range(n)]
    if split == "train": labels[5] = 77
    idx(f"mn/{split}-labels-idx1-ubyte", [n], labels)
PY
  sed 's/name: synthetic, size: 64/name: mnist, path: mn/' tiny.yaml > label77.yaml
  # Image folders (checked at open, before any image is decoded, so empty .jpg files do): the
  # evaluation folder lacks class 'b'; a model of 10 classes for 3 class folders.
  for c in a b c; do mkdir -p if_train/$c if_val/$c && touch if_train/$c/x.jpg if_val/$c/x.jpg; done
  rm -r if_val/b && mkdir -p if_val3 && cp -r if_train/. if_val3/
  sed 's/model: {name: lenet5}/model: {name: resnet20_mnist, num_classes: 3}/; s/name: synthetic, size: 64, eval_size: 16/name: image_folder, path: if_train, eval_path: if_val, crop_size: 8, resize_size: 8/' tiny.yaml > folders.yaml
  sed 's/num_classes: 3/num_classes: 10/; s/eval_path: if_val,/eval_path: if_val3,/' folders.yaml > folders10.yaml
  # MLM shards made with the 177-token test vocabulary, for a model of 30522 tokens.
  printf 'The quick brown fox.\nHello world!\n\nA second document, unaffable.\n' > text.txt
  "$(dirname "$trainer")/prepare_mlm" --vocab "$src/tests/data/bert/tiny_vocab.txt" --out shards text.txt >/dev/null \
    || fail "prepare_mlm for the bad MLM cases"
  cat > mlm.yaml <<'YAML'
model: {name: bert, preset: tiny}
data: {name: mlm, path: shards, seq_len: 16, workers: 0}
optimizer: {name: adamw, lr: 0.001}
reducer: {name: average}
train: {steps: 2, batch_per_rank: 1, log_every: 1, eval_every: 1}
YAML
  status=0
  check() {  # expected-substring, then the trainer arguments
    local want=$1; shift
    out=$(mpi 1 "$trainer" "$@" 2>&1); rc=$?
    if [ $rc -eq 0 ] || ! grep -qF -- "$want" <<<"$out"; then
      echo "FAIL: trainer $* (exit $rc) should say: $want"; echo "$out" | tail -5; status=1
    else echo "ok: $want"; fi
  }
  check "command line: --config is required; usage: trainer --config FILE" --set a=1
  check "argument was not expected: --bogus" --config tiny.yaml --bogus
  check "cannot open" --config missing.yaml
  check "broken.yaml" --config broken.yaml
  check "unknown reducer 'adasumm'; known: adasum, average, sum" --config typo_reducer.yaml
  check "did you mean 'batch_per_rank'" --config typo_key.yaml
  check "optimizer.lr (line" --config bad_type.yaml
  check "optimizer.lr" --config bad_value.yaml
  check "set exactly one of train.epochs or train.steps" --config both.yaml
  check "nowhere" --config no_data.yaml
  check "--set: 1 required TEXT missing" --config tiny.yaml --set
  check "did you mean 'lr'" --config tiny.yaml --set optimizer.lrr=0.1
  check "model.num_classes (line 1, column 36): a classifier needs at least 2 classes, got 0" --config zero_classes.yaml
  check "train.batch_per_rank (line 6, column 36): must be > 0, got -4" --config negative_batch.yaml
  check "train.log_every (line 6, column 50): must be >= 1, got 0; steps per metrics line" --config zero_log.yaml
  check "train.micro_batches (set by --set train.micro_batches=0): must be > 0, got 0" --config tiny.yaml --set train.micro_batches=0
  check "train.eval_every (set by --set train.eval_every=-5): must be >= 0, got -5; 0 evaluates at each epoch's end" --config tiny.yaml --set train.eval_every=-5
  check "train.max_eval_batches (set by --set train.max_eval_batches=-1): must be >= 0, got -1; 0 evaluates the whole set" --config tiny.yaml --set train.max_eval_batches=-1
  check "train.eval_every (line 6, column 84): set, but there is no evaluation set" --config no_eval.yaml
  check "data.eval_size (line 2, column 46) is 0" --config no_eval.yaml
  check "train.max_eval_batches (set by --set train.max_eval_batches=2): set, but there is no evaluation set" \
    --config no_eval.yaml --set train.eval_every=null --set train.max_eval_batches=2
  check "train.precision (set by --set train.precision=fp16): fp16 is not supported on the CPU" --config tiny.yaml --set train.precision=fp16
  check "train.precision (set by --set train.precision=fp8): unknown precision 'fp8'; known: fp32, bf16, fp16" --config tiny.yaml --set train.precision=fp8
  check "train.loss_scale (set by --set train.loss_scale=-3): must be none, dynamic or a positive number" --config tiny.yaml --set train.loss_scale=-3
  check "train.loss_scale (set by --set train.loss_scale=lots): must be none, dynamic or a positive number" --config tiny.yaml --set train.loss_scale=lots
  check "train.loss_scale_init (set by --set train.loss_scale_init=0.5): must be in [1, 18446744073709551616], got 0.5" \
    --config tiny.yaml --set train.loss_scale=dynamic --set train.loss_scale_init=0.5
  check "train.loss_scale_growth_interval (set by --set train.loss_scale_growth_interval=5): tunes dynamic loss scaling, but train.loss_scale is 'none'" \
    --config tiny.yaml --set train.loss_scale_growth_interval=5
  check "mn/train-labels-idx1-ubyte': label 77 at index 5 is outside [0, 10)" --config label77.yaml
  check "set model.num_classes to at least 78" --config label77.yaml
  check "class 1 is 'b' in 'if_train' but 'if_val' has no folder 'b'" --config folders.yaml
  check "image folder 'if_train' has 3 class folders but the model has 10 classes; set model.num_classes to 3" --config folders10.yaml
  check "the shards index a vocabulary of 177 tokens but the model's has 30522" --config mlm.yaml
  check "set model.vocab_size: 177" --config mlm.yaml
  check "train.eval_every (line 5, column 64): set, but there is no evaluation set (data.eval_path is not set" \
    --config mlm.yaml --set model.vocab_size=177
  check "data.seq_len (set by --set data.seq_len=600): 600 tokens per sequence, but the model has 512 positions" \
    --config mlm.yaml --set model.vocab_size=177 --set data.seq_len=600
  check "train.freeze (set by --set train.freeze=[conv9]): 'conv9' names no parameter of the model; its parameters lie under conv1, conv2, fc1, fc2, fc3" \
    --config tiny.yaml --set 'train.freeze=[conv9]'
  check "train.freeze (set by --set train.freeze=[conv1, conv2, fc]): 'fc' names no parameter" \
    --config tiny.yaml --set 'train.freeze=[conv1, conv2, fc]'
  check "train.freeze (set by --set train.freeze=[conv1, conv2, fc1, fc2, fc3]): freezes every parameter of the model, so nothing would train" \
    --config tiny.yaml --set 'train.freeze=[conv1, conv2, fc1, fc2, fc3]'
  check "train.freeze (set by --set train.freeze=conv1): expected a list of strings such as [a, b], got 'conv1'" \
    --config tiny.yaml --set train.freeze=conv1
  # Output that cannot be written stops the run, naming the file or key (a folder where
  # metrics.jsonl goes; a checkpoint.dir under a file, before the first step).
  mkdir -p mdir/metrics.jsonl && touch plainfile
  check "cannot write mdir/metrics.jsonl (Is a directory)" --config tiny.yaml --set output.dir=mdir
  mkdir -p rdir
  check "--resume rdir: a folder; --resume takes a checkpoint's .json file, or auto" --config tiny.yaml --set output.dir=rr --resume rdir
  mkdir -p full && ln -sf /dev/full full/metrics.jsonl  # every write: no space left
  check "cannot write full/metrics.jsonl (No space left on device); the run stops here" --config tiny.yaml --set output.dir=full
  check "checkpoint.dir (set by --set checkpoint.dir=plainfile/ck): cannot create the folder plainfile/ck (Not a directory)" \
    --config tiny.yaml --set output.dir=ckdir --set checkpoint.dir=plainfile/ck
  [ ! -e ckdir/metrics.jsonl ] || { echo "FAIL: a run with an unusable checkpoint.dir started training"; status=1; }
  exit $status
  ;;
smoke)
  status=0
  for cfg in "$src"/configs/*.yaml; do
    name=$(basename "$cfg" .yaml)
    extra=(--set data.name=synthetic --set data.size=8 --set data.eval_size=4 --set train.epochs=0
           --set train.steps=2 --set train.batch_per_rank=2 --set train.examples_per_step=0 --set train.micro_batches=1
           --set train.eval_every=2 --set train.max_eval_batches=1 --set output.dir=smoke_$name --set data.workers=0)
    case $name in  # the ResNet-50 schedules are in epochs: 2 steps an epoch here (8 examples, 2 x 2)
      resnet50_*) extra+=(--set data.image_shape=[3,64,64] --set schedule.warmup_epochs=0.5) ;;
      bert_*) extra+=(--set data.seq_len=16 --set model.preset=tiny --set schedule.warmup_steps=1) ;;
      *) extra+=(--set schedule.warmup_steps=1) ;;
    esac
    case $name in *phase2|*squad) extra+=(--set train.init_from=null) ;; esac
    case $name in *wagma*) extra+=(--set sync.group_size=2) ;; esac
    if out=$(mpi 2 "$trainer" --config "$cfg" "${extra[@]}" 2>&1) &&
       { [[ $name != resnet50_* ]] || echo "$out" | grep -q "schedule: warm-up 0.5 epochs = 1 step; milestones at epochs 30, 60, 80 = steps 60, 120, 160 (2 steps per epoch)"; }
    then echo "ok: $name"
    else echo "FAIL: $name"; echo "$out" | tail -5; status=1; fi
  done
  # model.channels_last through the trainer (NHWC ResNet-20): it trains, and on the CPU it says
  # that it only costs time there.
  if out=$(mpi 2 "$trainer" --config "$src/configs/fmnist_resnet20_adasum.yaml" --set data.name=synthetic \
             --set data.size=8 --set data.eval_size=4 --set train.epochs=0 --set train.steps=2 \
             --set train.batch_per_rank=2 --set train.eval_every=2 --set data.workers=0 \
             --set schedule.warmup_steps=1 --set model.channels_last=true --set output.dir=smoke_channels_last 2>&1) &&
     echo "$out" | grep -q "model.channels_last.*only slows the step"; then echo "ok: channels_last"
  else echo "FAIL: channels_last"; echo "$out" | tail -5; status=1; fi
  # A BERT-Large LAMB config keeps its train.examples_per_step (here 8 for the small shapes): 2
  # ranks x 2 examples take it in 2 micro-batches, and the log says so.
  if out=$(mpi 2 "$trainer" --config "$src/configs/bert_large_lamb_adasum.yaml" --set data.name=synthetic \
             --set data.size=16 --set data.eval_size=4 --set train.steps=2 --set train.batch_per_rank=2 \
             --set train.examples_per_step=8 --set data.seq_len=16 --set model.preset=tiny \
             --set data.workers=0 --set schedule.warmup_steps=1 --set output.dir=smoke_examples 2>&1) &&
     echo "$out" | grep -q "2 steps of 2 x 2 examples per rank (8 a step: train.examples_per_step)"; then
    echo "ok: examples_per_step"
  else echo "FAIL: examples_per_step"; echo "$out" | tail -5; status=1; fi
  exit $status
  ;;
timeline)
  for red in average adasum; do  # adasum: the overlapped delta path
    set_red=($(red_args $red))
    mpi 2 "$trainer" --config tiny.yaml --set model.name=resnet20_mnist "${set_red[@]}" \
      --set reducer.bucket_mb=0.02 --set reducer.first_bucket_mb=0.005 --set train.steps=4 \
      --set train.eval_every=4 --set output.dir=tl_$red --set train.timeline=tl_$red/trace.json > tl.txt 2>&1 \
      || { cat tl.txt; fail "$red timeline run"; }
    python3 - tl_$red/trace.json $red <<'PY' || fail "$red: timeline check"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in ev if e.get("ph") == "X"]
assert {e["pid"] for e in spans} == {0, 1}, "both ranks in one trace"
for want in ("forward", "backward", "evaluation", "checkpoint", "data wait"):
    assert any(e["name"] == want for e in spans), f"no '{want}' span"
overlapped = 0
for pid in (0, 1):
    back = [e for e in spans if e["pid"] == pid and e["name"] == "backward"]
    runs = [e for e in spans if e["pid"] == pid and e["cat"] == "comm" and e["name"].startswith("bucket") and not e["name"].endswith("queued")]
    assert runs, "no bucket reductions"
    assert {e["tid"] for e in runs}.isdisjoint({e["tid"] for e in back}), "reductions run on their own thread"
    overlapped += sum(1 for r in runs for b in back if b["ts"] <= r["ts"] < b["ts"] + b["dur"])
assert overlapped > 0, "no bucket reduction started while backward ran"
print(f"{sys.argv[2]}: {len(spans)} spans, {overlapped} bucket reductions started during backward")
PY
  done
  ;;
mlm_eval)
  vocab=$src/data/bert/vocab.txt
  [ -f "$vocab" ] || fail "$vocab is missing: run tools/fetch_data.sh bert-vocab (tools/test.sh does)"
  mkdir -p corpus
  for d in 0 1 2 3 4 5; do
    for i in 1 2 3 4 5 6; do echo "Document $d says sentence $i about the quick brown fox and the lazy dog."; done > corpus/doc$d.txt
  done
  # The paths and options of tools/train.sh; the configs name data/mlm and data/mlm-eval.
  "$(dirname "$trainer")/prepare_mlm" --vocab "$vocab" --out data/mlm --eval-out data/mlm-eval \
    --eval-fraction 0.34 corpus > prep.txt 2>&1 || { cat prep.txt; fail "prepare_mlm"; }
  status=0
  for cfg in "$src"/configs/bert_tiny_mlm_*.yaml; do
    name=$(basename "$cfg" .yaml)
    if out=$(mpi 2 "$trainer" --config "$cfg" --set train.steps=2 --set train.eval_every=2 --set train.max_eval_batches=1 \
        --set train.batch_per_rank=2 --set data.seq_len=16 --set data.workers=0 --set schedule.warmup_steps=1 \
        --set output.dir=run_$name 2>&1) && grep -q '"eval_mlm_loss"' run_$name/metrics.jsonl; then echo "ok: $name evaluates"
    else echo "FAIL: $name did not evaluate"; echo "$out" | tail -5; status=1; fi
  done
  # A validation split of the training shards: whole documents held out, evaluated as val_*.
  cfg=$src/configs/bert_tiny_mlm_lamb.yaml
  if out=$(mpi 2 "$trainer" --config "$cfg" --set train.steps=2 --set train.eval_every=2 --set train.max_eval_batches=1 \
      --set train.batch_per_rank=2 --set data.seq_len=16 --set data.workers=0 --set schedule.warmup_steps=1 \
      --set data.validation_size=2 --set output.dir=run_val 2>&1) && grep -q '"val_mlm_loss"' run_val/metrics.jsonl &&
      grep -q '"eval_mlm_loss"' run_val/metrics.jsonl; then echo "ok: bert_tiny_mlm_lamb with data.validation_size evaluates both"
  else echo "FAIL: bert_tiny_mlm_lamb with data.validation_size"; echo "$out" | tail -5; status=1; fi
  # The ranks share the shards' verification (shard i read whole by rank i mod ranks): a corrupt
  # second shard, rank 1's, stops both ranks before step 1, said once, by rank 1.
  "$(dirname "$trainer")/prepare_mlm" --vocab "$vocab" --out split --shard-tokens 200 corpus > prep2.txt 2>&1 ||
    { cat prep2.txt; fail "prepare_mlm --shard-tokens 200"; }
  [ -f split/shard-00001.mlm ] || { ls split; fail "prepare_mlm made one shard"; }
  /usr/bin/python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-1] ^= 1; open(p, "wb").write(b)' split/shard-00001.mlm
  mpi 2 "$trainer" --config "$cfg" --set data.path=split --set data.eval_path=null --set train.eval_every=null \
    --set train.max_eval_batches=null --set train.steps=2 --set data.seq_len=16 --set output.dir=run_corrupt > corrupt.txt 2>&1 &&
    { cat corrupt.txt; fail "a corrupt shard was accepted"; }
  if [ "$(grep -c "error: trainer: MLM shard split/shard-00001.mlm: payload checksum mismatch" corrupt.txt)" = 1 ] &&
      grep -q "^\[rank 1/2\].*payload checksum mismatch" corrupt.txt && ! grep -q '"loss"' run_corrupt/metrics.jsonl 2>/dev/null; then
    echo "ok: a corrupt shard, verified by rank 1 alone, stopped both ranks before step 1 (said once)"
  else echo "FAIL: the corrupt shard"; cat corrupt.txt; status=1; fi
  exit $status
  ;;
validation)
  # 64 examples, the last 16 held out: trains on 48 (3 steps an epoch at 2 ranks x 8).
  mpi 2 "$trainer" --config tiny.yaml --set data.validation_size=16 --set output.dir=v > v.txt 2>&1 || { cat v.txt; fail "a run with a validation split"; }
  grep -q "validation set (val_\* figures): validation: 16 examples (48-63) of" v.txt || { cat v.txt; fail "the log does not name the held-out examples"; }
  grep -q "data: training: 48 examples (0-47) of" v.txt || { cat v.txt; fail "the log does not name the training part"; }
  grep -q "validation at step 10: loss" v.txt || { cat v.txt; fail "no validation log line"; }
  /usr/bin/python3 - v <<'PY' || fail "val_* figures missing"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
evals = [l for l in lines if any(k.startswith(("eval_", "val_")) for k in l)]
assert [l["step"] for l in evals] == [10, 20], evals
for l in evals:
    for k in ("val_loss", "val_top1", "eval_loss", "eval_top1"):
        assert isinstance(l.get(k), float), (k, l)
s = json.load(open(sys.argv[1] + "/summary.json"))
for k in ("val_loss", "val_top1", "eval_loss", "eval_top1"):
    assert isinstance(s.get(k), float), (k, s)
assert s["val_top1"] == evals[-1]["val_top1"] and s["eval_top1"] == evals[-1]["eval_top1"]
assert s.get("build_march", "").startswith(("x86-64", "native")), s.get("build_march")
print("validation: val_* beside eval_* at steps", [l["step"] for l in evals], "and in summary.json")
PY
  # An evaluation set the ranks cannot split evenly (13 examples at 1, 2 and 3 ranks): the padded
  # tail of a rank's share is left out, so every rank count evaluates the same 13 examples of one
  # model (an LR of 1e-30 leaves it as initialised): n = 13 and the same figures.
  for np in 1 2 3; do
    mpi $np "$trainer" --config tiny.yaml --set data.eval_size=13 --set optimizer.lr=1e-30 --set train.steps=2 \
      --set train.eval_every=2 --set output.dir=uneven$np > uneven$np.txt 2>&1 || { cat uneven$np.txt; fail "13 evaluation examples at $np ranks"; }
    grep -q "eval at step 2: loss [0-9.]*, top1 [0-9.]* (n = 13)" uneven$np.txt ||
      { cat uneven$np.txt; fail "13 evaluation examples at $np ranks: not n = 13"; }
  done
  /usr/bin/python3 - <<'PY' || fail "13 evaluation examples: the figures depend on the rank count"
import json
s = [json.load(open(f"uneven{np}/summary.json")) for np in (1, 2, 3)]
assert all(x["eval_top1"] == s[0]["eval_top1"] for x in s), [x["eval_top1"] for x in s]
assert all(abs(x["eval_loss"] - s[0]["eval_loss"]) <= 1e-6 * abs(s[0]["eval_loss"]) for x in s), [x["eval_loss"] for x in s]
print("validation: 13 evaluation examples give n = 13 and the same figures at 1, 2 and 3 ranks")
PY
  # A validation set alone (no test set) is enough for train.eval_every.
  mpi 1 "$trainer" --config tiny.yaml --set data.eval_size=0 --set data.validation_size=16 --set train.steps=10 --set output.dir=vo > vo.txt 2>&1 ||
    { cat vo.txt; fail "train.eval_every with a validation set and no test set"; }
  grep -q '"val_top1"' vo/summary.json && ! grep -q '"eval_top1"' vo/summary.json || fail "validation only: summary.json"
  # Bad values stop the run naming the key as written.
  out=$(mpi 1 "$trainer" --config tiny.yaml --set data.validation_size=64 --set output.dir=bad 2>&1) && fail "validation_size 64 of 64 was accepted"
  echo "$out" | grep -q "data.validation_size (set by --set data.validation_size=64): must be in \[0, 64), got 64" ||
    { echo "$out"; fail "validation_size 64: message"; }
  sed 's/eval_size: 16,/eval_size: 16, validation_size: -3,/' tiny.yaml > neg.yaml
  out=$(mpi 1 "$trainer" --config neg.yaml --set output.dir=bad 2>&1) && fail "validation_size -3 was accepted"
  echo "$out" | grep -q "data.validation_size (line 2, column [0-9]*): must be in \[0, 64), got -3" ||
    { echo "$out"; fail "validation_size -3: message"; }
  echo "validation: bad values refused naming the key"
  # train.stop_at: the run ends at the first evaluation meeting the bound (step 10 of 20), with
  # its final evaluation, checkpoint and summary; a bound never met runs the whole budget.
  mpi 2 "$trainer" --config tiny.yaml --set data.validation_size=16 --set 'train.stop_at={metric: val_loss, below: 1.0e9}' \
    --set output.dir=stop > stop.txt 2>&1 || { cat stop.txt; fail "a run with train.stop_at"; }
  grep -q "train.stop_at: val_loss is [0-9.e+-]* at step 10 (val_loss <= 1e+09): the run ends here" stop.txt || { cat stop.txt; fail "train.stop_at: no log line"; }
  mpi 2 "$trainer" --config tiny.yaml --set data.validation_size=16 --set 'train.stop_at={metric: eval_top1, above: 2}' \
    --set output.dir=nostop > nostop.txt 2>&1 || { cat nostop.txt; fail "a run with a train.stop_at never met"; }
  /usr/bin/python3 - stop nostop <<'PY' || fail "train.stop_at: summary"
import json, os, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["steps"] == 10 and s["stopped_at_step"] == 10 and s["stop_at"] == "val_loss <= 1e+09", s
assert os.path.exists(sys.argv[1] + "/checkpoints/ckpt-00000010.json")
evals = [json.loads(l)["step"] for l in open(sys.argv[1] + "/metrics.jsonl") if '"val_loss"' in l]
assert evals == [10], evals
n = json.load(open(sys.argv[2] + "/summary.json"))
assert n["steps"] == 20 and "stopped_at_step" not in n, n
print("stop_at: stopped at step 10 of 20; a bound never met ran all 20")
PY
  # train.stop_at.give_up_after: at LR 1e-30 (no weight moves) the validation figure never betters its first value, so
  # with evaluations every 2 steps a run giving up after 3 ends at step 8 without the bound. Killed
  # before step 6 and resumed from step 4's checkpoint, it gives up at step 8 too: the counters
  # travel in the checkpoint (counting afresh from the resume would end at step 12).
  giveup=(--config tiny.yaml --set data.validation_size=16 --set optimizer.lr=1e-30 --set train.eval_every=2
          --set checkpoint.every=2 --set 'train.stop_at={metric: val_top1, above: 2, give_up_after: 3}')
  mpi 2 "$trainer" "${giveup[@]}" --set output.dir=giveup > giveup.txt 2>&1 || { cat giveup.txt; fail "a run with give_up_after"; }
  grep -q "train.stop_at: val_top1 has not bettered its best, [0-9.e+-]* at step 2, in 3 evaluations (give_up_after): the run ends at step 8 without reaching val_top1 >= 2" giveup.txt ||
    { cat giveup.txt; fail "give_up_after: no log line"; }
  ADA_FAULT=step@0#6:kill mpi 2 "$trainer" "${giveup[@]}" --set output.dir=giveup_resumed > gr1.txt 2>&1 && { cat gr1.txt; fail "the killed run did not fail"; }
  mpi 2 "$trainer" "${giveup[@]}" --set output.dir=giveup_resumed --resume auto > gr2.txt 2>&1 || { cat gr2.txt; fail "resuming a run with give_up_after"; }
  grep -q "resumed from .*ckpt-00000004" gr2.txt || { cat gr1.txt gr2.txt; fail "give_up_after: not resumed from step 4"; }
  /usr/bin/python3 - giveup giveup_resumed <<'PY' || fail "give_up_after: summary"
import json, sys
for d in sys.argv[1:]:
    s = json.load(open(d + "/summary.json"))
    assert s["steps"] == 8 and s["gave_up_at_step"] == 8 and s["stop_at_best_step"] == 2, (d, s)
    assert "stopped_at_step" not in s and s["stop_at"] == "val_top1 >= 2", (d, s)
print("give_up_after: a run with no better figure in 3 evaluations ends at step 8, also across a resume")
PY
  # train.stop_at.give_up_at_step: a deadline; the run ends at the first evaluation at or after it
  # (step 6 for a deadline of 5 with evaluations every 2) without the bound.
  mpi 2 "$trainer" --config tiny.yaml --set data.validation_size=16 --set train.eval_every=2 --set output.dir=deadline \
    --set 'train.stop_at={metric: val_top1, above: 2, give_up_at_step: 5}' > deadline.txt 2>&1 || { cat deadline.txt; fail "a run with give_up_at_step"; }
  grep -q "train.stop_at: val_top1 has not reached val_top1 >= 2 by step 5 (give_up_at_step; its best [0-9.e+-]* at step [0-9]*): the run ends at step 6" deadline.txt ||
    { cat deadline.txt; fail "give_up_at_step: no log line"; }
  /usr/bin/python3 - deadline <<'PY' || fail "give_up_at_step: summary"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["steps"] == 6 and s["gave_up_at_step"] == 6 and "stopped_at_step" not in s, s
print("give_up_at_step: a deadline of step 5 ends the run at its next evaluation, step 6")
PY
  for bad in "{metric: loss, below: 1}|train.stop_at.metric (set by --set train.stop_at={metric: loss, below: 1}): 'loss' is not an evaluation figure" \
             "{metric: val_loss, below: 1, above: 0}|train.stop_at (set by --set train.stop_at={metric: val_loss, below: 1, above: 0}): give exactly one bound" \
             "{metric: val_loss, below: 1}|train.stop_at (set by --set train.stop_at={metric: val_loss, below: 1}): val_loss needs a validation set; set data.validation_size" \
             "{metric: val_loss, below: 1, give_up_after: -2}|train.stop_at.give_up_after (set by --set train.stop_at={metric: val_loss, below: 1, give_up_after: -2}): must be" \
             "{metric: val_loss, below: 1, give_up_at_step: -1}|train.stop_at.give_up_at_step (set by --set train.stop_at={metric: val_loss, below: 1, give_up_at_step: -1}): must be" \
             "{metric: eval_mlm_loss, below: 1}|the evaluations give no figure 'eval_mlm_loss'; they give eval_loss, eval_top1"; do
    out=$(mpi 1 "$trainer" --config tiny.yaml --set "train.stop_at=${bad%%|*}" --set output.dir=bad 2>&1) && fail "train.stop_at=${bad%%|*} was accepted"
    echo "$out" | grep -qF "${bad#*|}" || { echo "$out" | tail -5; fail "train.stop_at=${bad%%|*}: message"; }
  done
  # A figure no evaluation gives is refused before the first step (it ran the whole budget, or
  # until the first evaluation, before).
  out=$(mpi 1 "$trainer" --config tiny.yaml --set 'train.stop_at={metric: eval_acc, above: 0.5}' --set output.dir=early 2>&1) &&
    fail "train.stop_at.metric eval_acc was accepted"
  echo "$out" | grep -qF "the evaluations give no figure 'eval_acc'; they give eval_loss, eval_top1" || { echo "$out" | tail -5; fail "eval_acc: message"; }
  ! grep -qs '"loss"' early/metrics.jsonl || fail "train.stop_at.metric eval_acc: refused only after training steps"
  echo "stop_at: bad values refused naming the key"
  ;;
*) fail "unknown case $case" ;;
esac
