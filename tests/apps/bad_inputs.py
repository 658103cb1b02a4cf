#!/usr/bin/env python3
"""The bad-input table: configs, command lines, data files and checkpoints that must be refused.

Every case runs build/bin/trainer under mpiexec at 2 ranks (unless it says otherwise) and must
  - exit non-zero, within 60 s (no hang), on every rank;
  - not crash (no segfault, abort, uncaught exception, sanitizer report);
  - print every expected piece: the offending file, key or value and the way out.
usage: bad_inputs.py TRAINER SOURCE_DIR WORK_DIR [--shard I/N] [--list] [--only NAME]
"""
import copy
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

CRASH = re.compile(r"Segmentation fault|core dumped|terminate called|Assertion .* failed|SIGSEGV|SIGABRT|"
                   r"double free|AddressSanitizer|UndefinedBehaviorSanitizer|std::bad_alloc|Floating point exception")

BASE = {
    "model": {"name": "lenet5"},
    "data": {"name": "synthetic", "size": 64, "eval_size": 16, "workers": 1},
    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "schedule": {"name": "constant"},
    "reducer": {"name": "average"},
    "train": {"steps": 4, "batch_per_rank": 8, "log_every": 1},
}
DROP = object()


def merged(base, over):
    out = copy.deepcopy(base)
    for k, v in over.items():
        if v is DROP:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merged(out[k], v)
        else:
            out[k] = v
    return out


class Case:
    def __init__(self, name, expect, cfg=None, raw=None, args=(), setup=None, ranks=2, config_arg=True, env=None):
        self.name, self.expect, self.cfg, self.raw = name, list(expect), cfg or {}, raw
        self.args, self.setup, self.ranks, self.config_arg = list(args), setup, ranks, config_arg
        self.env = env or {}


# ---- helpers that write data files ------------------------------------------------------------
def idx(path, dims, data, magic_type=0x08, gz=False, magic=None):
    head = struct.pack(">I", magic if magic is not None else (magic_type << 8) | len(dims))
    head += b"".join(struct.pack(">I", d) for d in dims)
    blob = head + bytes(data)
    (gzip.open if gz else open)(path, "wb").write(blob)


def mnist_dir(d, n=64, labels=None, images_n=None, gz=False, truncate=0, magic=None, name="mnist", side=28):
    os.makedirs(d, exist_ok=True)
    labels = labels if labels is not None else [i % 10 for i in range(n)]
    sfx = ".gz" if gz else ""
    for split, count in (("train", n), ("t10k", 16)):
        imgs = bytes((i * 7) % 256 for i in range((images_n or count) * side * side))
        if truncate and split == "train":
            imgs = imgs[:-truncate]
        idx(f"{d}/{split}-images-idx3-ubyte{sfx}", [images_n or count, side, side], imgs, gz=gz,
            magic=magic if split == "train" else None)
        lab = labels if split == "train" else [i % 10 for i in range(count)]
        idx(f"{d}/{split}-labels-idx1-ubyte{sfx}", [len(lab)], lab, gz=gz)


def safetensors(path, sizes):
    """A safetensors file of f32 vectors of the given sizes (zeros), by name."""
    header, offset = {}, 0
    for name, n in sizes.items():
        header[name] = {"dtype": "F32", "shape": [n], "data_offsets": [offset, offset + 4 * n]}
        offset += 4 * n
    text = json.dumps(header).encode()
    write(path, struct.pack("<Q", len(text)) + text + bytes(offset), "wb")


def write(path, text, mode="w"):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, mode) as f:
        f.write(text)


# ---- the table ----------------------------------------------------------------------------------
def cases(src):
    C = []
    add = C.append
    # Command lines.
    add(Case("cli_no_config", ["--config is required", "usage: trainer"], config_arg=False))
    add(Case("cli_unknown_flag", ["argument was not expected: --bogus"], args=["--bogus"]))
    # Not "--config is required" alone: the misspelt flag that caused it is named first.
    add(Case("cli_misspelt_config", ["not understood: --cnofig c.yaml; and --config is required"],
             args=["--cnofig", "c.yaml"], config_arg=False))
    add(Case("cli_set_without_value", ["--set", "required TEXT missing"], args=["--set"]))
    add(Case("cli_set_without_equals", ["--set 'train.steps'", "expected KEY=VALUE"], args=["--set", "train.steps"]))
    add(Case("cli_set_empty_part", ["has an empty part"], args=["--set", "train..steps=3"]))
    add(Case("cli_set_unknown_key", ["did you mean 'steps'"], args=["--set", "train.stpes=3"]))
    add(Case("cli_set_bad_yaml", ["is not valid YAML"], args=["--set", "train.steps=[1,"]))
    add(Case("cli_set_empty_value", ["the value is empty"], args=["--set", "train.steps="]))
    add(Case("cli_config_missing", ["cannot open", "nope.yaml"], args=["--config", "nope.yaml"], config_arg=False))
    add(Case("cli_config_is_dir", ["sub"], args=["--config", "sub"], config_arg=False,
             setup=lambda d: os.makedirs(f"{d}/sub")))
    add(Case("cli_resume_missing_value", ["--resume", "required TEXT missing"], args=["--resume"]))
    add(Case("cli_resume_missing_file", ["no/such/ckpt.json"], args=["--resume", "no/such/ckpt.json"]))
    add(Case("cli_set_type_mismatch", ["train.steps", "set by --set train.steps=many"], args=["--set", "train.steps=many"]))
    # Config syntax.
    add(Case("yaml_syntax", ["c.yaml", "line"], raw="model: {name: lenet5\n"))
    add(Case("yaml_tab", ["c.yaml"], raw="model:\n\tname: lenet5\n"))
    add(Case("yaml_duplicate_key", ["c.yaml", "key model appears twice (line 1 and line 2)"], raw="model: {name: lenet5}\nmodel: {name: lenet5}\n"))
    add(Case("yaml_top_level_list", ["c.yaml", "mapping"], raw="- a\n- b\n"))
    add(Case("yaml_empty", ["c.yaml"], raw=""))
    add(Case("yaml_unknown_section", ["optimiser", "did you mean 'optimizer'"], cfg={"optimiser": {"lr": 1}}))
    # Unknown keys in every section.
    for sec, key, near in (("model", "nmae", "name"), ("data", "worker", "workers"), ("optimizer", "momentun", "momentum"),
                           ("schedule", "warmup", "warmup_steps"), ("reducer", "bucket", "bucket_mb"),
                           ("train", "batch_per_rnak", "batch_per_rank"), ("checkpoint", "evry", "every"),
                           ("output", "dri", "dir")):
        add(Case(f"unknown_key_{sec}", [f"{sec}.{key}", f"did you mean '{near}'"], cfg={sec: {key: 1}}))
    # Wrong types and impossible values.
    T = lambda name, over, *exp: add(Case(name, list(exp), cfg=over))
    T("type_lr_string", {"optimizer": {"lr": "fast"}}, "optimizer.lr (line")
    T("value_lr_negative", {"optimizer": {"lr": -1}}, "optimizer.lr", "-1")
    T("value_lr_zero", {"optimizer": {"lr": 0}}, "optimizer.lr")
    T("type_batch_float", {"train": {"batch_per_rank": 8.5}}, "train.batch_per_rank")
    T("value_batch_negative", {"train": {"batch_per_rank": -4}}, "train.batch_per_rank", "-4")
    T("value_micro_zero", {"train": {"micro_batches": 0}}, "train.micro_batches", "must be > 0, got 0")
    T("value_examples_per_step_negative", {"train": {"examples_per_step": -8}}, "train.examples_per_step",
      "must be >= 0, got -8")
    T("examples_per_step_and_micro", {"train": {"examples_per_step": 16, "micro_batches": 2}},
      "train.examples_per_step (line", "is 16 and train.micro_batches (line", "set one of them",
      "--set train.micro_batches=null keeps examples_per_step", "--set train.examples_per_step=0 keeps micro_batches")
    T("examples_per_step_lr_scaling", {"train": {"examples_per_step": 32}, "schedule": {"lr_scaling": "linear"}},
      "schedule.lr_scaling (line", "'linear' scales the LR with the number of ranks",
      "train.examples_per_step fixes the examples of a step", "set lr_scaling: none")
    T("examples_per_step_indivisible", {"train": {"examples_per_step": 12}}, "train.examples_per_step (line",
      "is 12, which", "train.batch_per_rank 8", "cannot make in whole micro-batches")
    # A schedule in epochs and in steps at once; epochs that round to one step at 8 steps an epoch
    # (64 examples, 2 ranks x 8: 4 steps an epoch).
    T("schedule_warmup_epochs_and_steps", {"schedule": {"warmup_epochs": 1, "warmup_steps": 2}},
      "schedule.warmup_epochs (line", "and config", "schedule.warmup_steps (line", "are both set; keep one",
      "(4 steps per epoch here)", "--set schedule.warmup_steps=null uses the epochs, --set schedule.warmup_epochs=null the steps")
    T("schedule_milestone_epochs_collide", {"schedule": {"name": "step", "milestone_epochs": [1, 1.1]}},
      "schedule.milestone_epochs (line", "epochs [1, 1.1] are steps [4, 4] at 4 steps per epoch",
      "later than the one before")
    T("steps_and_epochs", {"train": {"steps": 4, "epochs": 2}}, "set exactly one of train.epochs or train.steps")
    T("neither_steps_nor_epochs", {"train": {"steps": DROP}}, "set exactly one of train.epochs or train.steps")
    T("value_steps_negative", {"train": {"steps": -3}}, "train.steps")
    T("value_log_every_zero", {"train": {"log_every": 0}}, "train.log_every", "0")
    T("value_on_nonfinite", {"train": {"on_nonfinite": "ignore"}}, "train.on_nonfinite", "'ignore'")
    # on_nonfinite: skip with a model an update broke (LR 1e30): the run ends after 50 skipped
    # steps in a row instead of skipping to the end of its budget and exiting 0.
    T("nonfinite_skipped_to_the_end", {"optimizer": {"lr": 1e30}, "train": {"on_nonfinite": "skip", "steps": 200}},
      "steps 2 to 51 were all skipped (non-finite loss or gradient): the model no longer trains")
    T("value_momentum", {"optimizer": {"momentum": 1.5}}, "optimizer.momentum", "1.5")
    T("value_weight_decay", {"optimizer": {"weight_decay": -0.1}}, "optimizer.weight_decay")
    T("value_beta2", {"optimizer": {"name": "adam", "momentum": DROP, "beta2": 1.2}}, "optimizer.beta2")
    T("value_eps", {"optimizer": {"name": "adam", "momentum": DROP, "eps": 0}}, "optimizer.eps")
    T("unknown_optimizer", {"optimizer": {"name": "adagrad"}}, "unknown optimizer 'adagrad'", "known:")
    T("momentum_for_adam", {"optimizer": {"name": "adam"}}, "optimizer.momentum")
    T("unknown_model", {"model": {"name": "resnet51"}}, "unknown model 'resnet51'", "known:")
    T("value_num_classes_zero", {"model": {"num_classes": 0}}, "model.num_classes", "0")
    T("value_num_classes_one", {"model": {"num_classes": 1}}, "model.num_classes", "1")
    T("value_label_smoothing", {"model": {"label_smoothing": 1.0}}, "model.label_smoothing")
    T("bert_unknown_preset", {"model": {"name": "bert", "preset": "huge"}, "data": {"seq_len": 16}},
      "model.preset", "'huge'")
    T("bert_heads_do_not_divide", {"model": {"name": "bert", "preset": "tiny", "heads": 3}, "data": {"seq_len": 16}},
      "heads")
    T("unknown_data", {"data": {"name": "cifar10"}}, "unknown data set 'cifar10'")
    T("value_workers", {"data": {"workers": -1}}, "data.workers", "got -1")
    T("value_prefetch", {"data": {"prefetch": -2}}, "data.prefetch", "got -2")
    T("unknown_schedule", {"schedule": {"name": "exponential"}}, "unknown schedule 'exponential'", "known:")
    T("step_without_milestones", {"schedule": {"name": "step"}}, "schedule.milestones")
    T("milestones_not_increasing", {"schedule": {"name": "step", "milestones": [3, 2]}}, "schedule.milestones")
    T("value_warmup_negative", {"schedule": {"warmup_steps": -5}}, "schedule.warmup_steps")
    # A constant schedule warming up for the whole run (4 steps) never reaches its LR.
    T("schedule_warmup_as_long_as_the_run", {"schedule": {"warmup_steps": 4}},
      "schedule.warmup_steps (line", "a warm-up of 4 steps in a run of 4 would never reach the base LR")
    T("unknown_lr_scaling", {"schedule": {"lr_scaling": "linaer"}}, "unknown lr_scaling 'linaer'")
    T("value_adasum_lr_factor", {"schedule": {"adasum_lr_factor": 0}}, "schedule.adasum_lr_factor", "must be > 0, got 0")
    T("unknown_reducer", {"reducer": {"name": "adasumm"}}, "unknown reducer 'adasumm'; known: adasum, average, sum")
    T("unknown_target", {"reducer": {"target": "weights"}}, "reducer.target", "unknown reduce target 'weights'")
    T("value_bucket_mb", {"reducer": {"bucket_mb": -25}}, "reducer.bucket_mb", "must be from 1 byte to 1 TiB", "got -25")
    T("value_keep_zero", {"checkpoint": {"keep": 0}}, "checkpoint.keep", "must be >= 1, got 0")
    T("type_overwrite", {"checkpoint": {"overwrite": "yes please"}}, "checkpoint.overwrite")
    T("value_threads_negative", {"train": {"threads": -2}}, "train.threads")
    T("value_eval_every_negative", {"train": {"eval_every": -1}}, "train.eval_every")
    T("value_clip_negative", {"train": {"clip_grad_norm": -1}}, "train.clip_grad_norm")
    T("device_unknown", {"train": {"device": "gpu"}}, "train.device", "unknown device 'gpu'", "known: cpu, cuda")
    T("device_index_bad", {"train": {"device": "cuda:x"}}, "train.device", "unknown device 'cuda:x'")
    # Without a usable GPU (no CUDA build, no device): refused, naming the key and the way out.
    T("device_cuda_unavailable", {"train": {"device": "cuda"}}, "train.device", "train.device: cpu")
    T("comm_unknown", {"train": {"comm": "gloo"}}, "train.comm", "unknown communicator 'gloo'", "known: auto")
    T("comm_nccl_on_cpu", {"train": {"comm": "nccl"}}, "train.comm", "nccl reduces CUDA device buffers", "comm: mpi")
    # Precision: unknown names, fp16 on the CPU, bf16 where the CPU kernels cannot run it (forced
    # below avx512 here, so the case holds on every CPU), a bad ADA_CPU_ISA.
    T("precision_unknown", {"train": {"precision": "fp8"}}, "train.precision", "unknown precision 'fp8'", "known: fp32, bf16")
    T("precision_fp16_cpu", {"train": {"precision": "fp16"}}, "train.precision", "fp16 is not supported on the CPU", "use bf16")
    add(Case("precision_bf16_unavailable", ["train.precision", "bf16 needs", "use precision: fp32"],
             cfg={"train": {"precision": "bf16"}}, env={"ADA_CPU_ISA": "avx2"}))
    T("activations_unknown", {"train": {"activations": "bf16"}}, "train.activations", "unknown value 'bf16'", "known: fp32, 16bit")
    T("activations_16bit_fp32", {"train": {"activations": "16bit"}}, "train.activations", "but train.precision is fp32", "set precision: bf16")
    T("cuda_graphs_cpu", {"train": {"cuda_graphs": True}}, "train.cuda_graphs", "CUDA graphs need train.device: cuda", "cuda_graphs: false")
    add(Case("cpu_isa_env_unknown", ["ADA_CPU_ISA=avx9", "use generic, avx2, avx512 or amx"], env={"ADA_CPU_ISA": "avx9"}))
    add(Case("cpu_caches_env_bad", ["ADA_CPU_CACHES=32K,1M", "expected three positive sizes", "unset it"],
             env={"ADA_CPU_CACHES": "32K,1M"}))
    # Decentralised syncs.
    T("sync_unknown", {"sync": {"name": "gossip"}}, "unknown sync 'gossip'", "known: diloco, local_sgd, none, wagma")
    T("sync_local_sgd_without_period", {"sync": {"name": "local_sgd"}}, "sync.period", "needs period")
    T("sync_period_zero", {"sync": {"name": "local_sgd", "period": 0}}, "sync.period", "must be >= 1, got 0")
    T("sync_local_sgd_with_sum", {"sync": {"name": "local_sgd", "period": 2}, "reducer": {"name": "sum"}},
      "reducer.name", "average or adasum", "'sum'")
    T("sync_with_target", {"sync": {"name": "local_sgd", "period": 2}, "reducer": {"target": "gradients"}},
      "reducer.target", "applies only with sync.name: none")
    T("sync_diloco_momentum_one", {"sync": {"name": "diloco", "period": 2, "outer_momentum": 1.0}},
      "sync.outer_momentum", "[0, 1)")
    T("sync_diloco_outer_lr", {"sync": {"name": "diloco", "period": 2, "outer_lr": 0}}, "sync.outer_lr")
    T("sync_wagma_adasum", {"sync": {"name": "wagma"}, "reducer": {"name": "adasum"}}, "sync wagma averages models",
      "reducer.name: average")
    T("sync_wagma_group_three", {"sync": {"name": "wagma", "group_size": 3}}, "sync.group_size", "must be a power of two")
    T("sync_wagma_group_too_big", {"sync": {"name": "wagma", "group_size": 4}}, "no larger than the 2 ranks")
    T("sync_wagma_tau_zero", {"sync": {"name": "wagma", "global_every": 0}}, "global_every", "got 0")
    T("sync_key_of_another", {"sync": {"name": "local_sgd", "period": 2, "group_size": 2}}, "sync.group_size",
      "nothing reads")
    add(Case("sync_wagma_three_ranks", ["WAGMA needs a power-of-two number of ranks", "got 3"],
             cfg={"sync": {"name": "wagma", "group_size": 1}}, ranks=3))
    # Stragglers and the timeline.
    T("straggler_rank_out_of_range", {"train": {"straggler": {"ranks": [5], "delay_ms": 1}}}, "train.straggler.ranks",
      "rank 5 does not exist")
    T("straggler_without_delay", {"train": {"straggler": {"ranks": [1]}}}, "train.straggler.delay_ms", "needs delay_ms")
    T("straggler_distribution", {"train": {"straggler": {"delay_ms": 1, "distribution": "pareto"}}},
      "unknown distribution 'pareto'")
    T("straggler_count", {"train": {"straggler": {"delay_ms": 1, "count": 3}}}, "train.straggler.count", "got 3")
    T("straggler_negative", {"train": {"straggler": {"delay_ms": -1}}}, "train.straggler.delay_ms", "got -1")
    T("timeline_unwritable", {"train": {"timeline": "/proc/nope/trace.json"}}, "timeline", "/proc/nope")
    T("output_unwritable", {"output": {"dir": "/proc/nope"}}, "/proc/nope")
    # Data files (MNIST-format IDX written here).
    M = lambda name, setup, *exp, **kw: add(Case(name, list(exp), cfg={"data": {"name": "mnist", "path": "m", "size": DROP,
                                                                                 "eval_size": DROP}}, setup=setup, **kw))
    # A folder that is not there: named with the key, and the working directory a relative path is from.
    M("mnist_missing_folder", None, "data.path (line", "'m' does not exist (relative paths are taken from the "
      "working directory, ", "tools/fetch_data.sh")
    M("mnist_label_out_of_range", lambda d: mnist_dir(f"{d}/m", labels=[77] + [1] * 63), "train-labels-idx1-ubyte",
      "77", "num_classes")
    M("mnist_truncated_images", lambda d: mnist_dir(f"{d}/m", truncate=100), "train-images-idx3-ubyte", "truncated")
    M("mnist_count_mismatch", lambda d: mnist_dir(f"{d}/m", labels=list(range(10)) * 5), "64", "50")
    M("mnist_bad_magic", lambda d: mnist_dir(f"{d}/m", magic=0x12345678), "train-images-idx3-ubyte", "magic")
    # A labels magic on the images file: the kind is named, not "N unexpected bytes".
    M("mnist_images_with_labels_magic", lambda d: mnist_dir(f"{d}/m", magic=0x00000801), "train-images-idx3-ubyte",
      "rank 1 in the magic, expected 3; is it a labels file")
    M("mnist_gzip_corrupt", lambda d: (mnist_dir(f"{d}/m", gz=True),
                                       write(f"{d}/m/train-images-idx3-ubyte.gz", "not gzip at all")),
      "train-images-idx3-ubyte.gz")
    M("mnist_wrong_image_size", lambda d: (mnist_dir(f"{d}/m"),
                                           idx(f"{d}/m/train-images-idx3-ubyte", [64, 32, 32], bytes(64 * 32 * 32))),
      "train-images-idx3-ubyte", "32")
    # Images the model cannot take: named with the file and the model key before step 1 (were: a
    # layer's shape error at step 1, naming neither).
    M("mnist_images_not_lenet5s", lambda d: mnist_dir(f"{d}/m", side=32), "train-images-idx3-ubyte",
      "gives images [1, 32, 32] but LeNet5 takes [1, 28, 28]", "choose a ResNet")
    add(Case("mnist_resnet_in_channels", ["train-images-idx3-ubyte", "gives images [1, 28, 28] but resnet20_mnist takes "
                                          "[3, H, W]", "config c.yaml: model.in_channels (line 4, column 18) must be the images' channels"],
             cfg={"model": {"name": "resnet20_mnist", "in_channels": 3},
                  "data": {"name": "mnist", "path": "m", "size": DROP, "eval_size": DROP}},
             setup=lambda d: mnist_dir(f"{d}/m")))
    M("mnist_empty_file", lambda d: (mnist_dir(f"{d}/m"), write(f"{d}/m/train-labels-idx1-ubyte", "")),
      "train-labels-idx1-ubyte")
    add(Case("image_folder_missing", ["imgs"], cfg={"model": {"name": "resnet18"},
                                                    "data": {"name": "image_folder", "path": "imgs", "size": DROP,
                                                             "eval_size": DROP}}))
    add(Case("image_folder_empty", ["imgs"], cfg={"model": {"name": "resnet18"},
                                                  "data": {"name": "image_folder", "path": "imgs", "size": DROP,
                                                           "eval_size": DROP}},
             setup=lambda d: os.makedirs(f"{d}/imgs")))
    add(Case("mlm_missing_shards", ["shards"], cfg={"model": {"name": "bert", "preset": "tiny"},
                                                    "data": {"name": "mlm", "path": "shards", "size": DROP,
                                                             "eval_size": DROP, "seq_len": 16}}))
    add(Case("mlm_seq_len_too_short", ["data.seq_len (line", "must be >= 8, got 4"],
             cfg={"model": {"name": "bert", "preset": "tiny"},
                  "data": {"name": "mlm", "path": "shards", "size": DROP, "eval_size": DROP, "seq_len": 4}}))
    add(Case("mlm_garbage_shard", ["s.bin"], cfg={"model": {"name": "bert", "preset": "tiny"},
                                                  "data": {"name": "mlm", "path": "s.bin", "size": DROP,
                                                           "eval_size": DROP, "seq_len": 16}},
             setup=lambda d: write(f"{d}/s.bin", "this is not a shard" * 10)))
    # The data audit of stop 83: bounds and shapes named by key.
    T("data_workers_too_many", {"data": {"workers": 5000}}, "data.workers (line", "must be in [0, 1024], got 5000")
    add(Case("image_folder_resize_below_crop", ["data.resize_size (line", "64 is less than data.crop_size 96",
                                                "set resize_size >= crop_size"],
             cfg={"model": {"name": "resnet18"}, "data": {"name": "image_folder", "path": "imgs", "size": DROP,
                                                          "eval_size": DROP, "crop_size": 96, "resize_size": 64}}))
    T("mnist_std_zero", {"data": {"name": "mnist", "size": DROP, "eval_size": DROP, "std": 0}}, "data.std (line",
      "got 0", "MNIST's 0.3081")
    T("mnist_mean_on_the_0_255_scale", {"data": {"name": "mnist", "size": DROP, "eval_size": DROP, "mean": 33.3}},
      "data.mean (line", "must be in [0, 1], got 33.3", "of the pixels / 255")
    add(Case("mlm_max_predictions_negative", ["data.max_predictions (line", "must be >= 0, got -3"],
             cfg={"model": {"name": "bert", "preset": "tiny"},
                  "data": {"name": "mlm", "path": "shards", "size": DROP, "eval_size": DROP, "seq_len": 16,
                           "max_predictions": -3}}))
    vocab = os.path.join(os.path.abspath(src), "data", "bert", "vocab.txt")
    add(Case("text_classification_path_is_a_folder", ["data.path (line", "'tc' is a folder", "JSON-lines file"],
             cfg={"model": {"name": "bert", "preset": "tiny", "head": "classification", "num_classes": 2},
                  "data": {"name": "text_classification", "path": "tc", "labels": ["ham", "spam"], "vocab": vocab,
                           "seq_len": 16, "size": DROP, "eval_size": DROP}},
             setup=lambda d: os.makedirs(f"{d}/tc")))
    add(Case("squad_eval_path_is_a_folder", ["data.eval_path (line", "'sq' is a folder", "SQuAD JSON file"],
             cfg={"model": {"name": "bert", "preset": "tiny", "head": "question_answering"},
                  "data": {"name": "squad", "path": "ok.json", "eval_path": "sq", "vocab": vocab, "max_seq_length": 32,
                           "doc_stride": 8, "max_query_length": 8, "size": DROP, "eval_size": DROP}},
             setup=lambda d: (os.makedirs(f"{d}/sq"), write(f"{d}/ok.json", json.dumps(
                 {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "the cat sat on the mat", "qas": [
                     {"id": "q1", "question": "where did the cat sit", "answers": [{"text": "the mat",
                                                                                    "answer_start": 15}]}]}]}]})))))
    # Checkpoints.
    def ckpt_run(extra):
        def setup(d):
            run_trainer(d, 2, ["--config", "base.yaml", "--set", "output.dir=good", "--set", "checkpoint.every=2"] + extra)
        return setup
    R = lambda name, setup, args, *exp, **kw: add(Case(name, list(exp), setup=setup, args=args, **kw))
    R("resume_garbage_json", lambda d: (write(f"{d}/ck/ckpt-00000002.json", "{not json"),
                                        write(f"{d}/ck/ckpt-00000002.safetensors", "x")),
      ["--resume", "ck/ckpt-00000002.json"], "ckpt-00000002.json", "not a valid checkpoint description")
    R("resume_json_missing_tensors", lambda d: (ckpt_run([])(d), os.remove(f"{d}/good/checkpoints/ckpt-00000004.safetensors")),
      ["--resume", "good/checkpoints/ckpt-00000004.json"], "ckpt-00000004.safetensors is missing")
    R("resume_truncated_tensors", lambda d: (ckpt_run([])(d), truncate(f"{d}/good/checkpoints/ckpt-00000004.safetensors")),
      ["--resume", "good/checkpoints/ckpt-00000004.json"], "ckpt-00000004.safetensors has", "truncated or replaced")
    R("resume_flipped_byte", lambda d: (ckpt_run([])(d), flip(f"{d}/good/checkpoints/ckpt-00000004.safetensors")),
      ["--resume", "good/checkpoints/ckpt-00000004.json"], "fails its CRC-32 check")
    # Another number of ranks: only with the same examples per step and base LR, gradient sync, not sum.
    ck4 = ["--resume", "good/checkpoints/ckpt-00000004.json"]
    R("resume_other_world_size", ckpt_run([]), ck4, "written by a run on 2 ranks, this run has 3",
      "it took 16 examples per step", "no setting on 3 ranks gives 16", ranks=3)
    R("resume_other_world_size_batch", ckpt_run([]), ck4, "this run takes 1 ranks x train.batch_per_rank 8 x "
      "train.micro_batches 1 = 8", "set train.micro_batches: 2 (or train.examples_per_step: 16 in place of train.micro_batches",
      "or resume on 2 ranks", ranks=1)
    R("resume_other_world_size_examples", ckpt_run([]), ck4 + ["--set", "train.examples_per_step=8"],
      "it took 16 examples per step, this run takes 1 ranks x train.batch_per_rank 8 x train.micro_batches 1 = 8",
      "set train.examples_per_step: 16, or resume on 2 ranks", ranks=1)
    R("resume_other_world_size_lr", ckpt_run([]), ck4 + ["--set", "train.micro_batches=2"],
      "it trained at base LR 0.1, this run's is 0.05", "set optimizer.lr: 0.1", "schedule.lr_scaling: none", ranks=1)
    R("resume_other_world_size_sum", ckpt_run(["--set", "reducer.name=sum"]),
      ck4 + ["--set", "train.micro_batches=2", "--set", "reducer.name=sum"], "reducer.name: sum", "resume on 2 ranks",
      ranks=1)
    R("resume_other_world_size_local", ckpt_run(["--set", "reducer.name=adasum", "--set", "reducer.target=model_delta"]),
      ck4 + ["--set", "train.micro_batches=2", "--set", "reducer.name=adasum", "--set", "reducer.target=model_delta"],
      "holds each rank's own optimizer state", "resume it on 2 ranks", ranks=1)
    R("resume_other_model", ckpt_run([]), ["--resume", "good/checkpoints/ckpt-00000004.json", "--set",
                                           "model.name=resnet20_mnist"], "ckpt-00000004", "model")
    R("resume_auto_all_damaged", lambda d: (ckpt_run([])(d), [flip(f"{d}/good/checkpoints/{f}") for f in
                                                               os.listdir(f"{d}/good/checkpoints") if f.endswith(".safetensors")]),
      ["--resume", "auto", "--set", "output.dir=good"], "no valid checkpoint in good/checkpoints", "rejected")
    R("resume_missing_rank_file", lambda d: (ckpt_run(["--set", "reducer.name=adasum", "--set", "reducer.target=model_delta"])(d),
                                             os.remove(f"{d}/good/checkpoints/ckpt-00000004.optim-rank1.safetensors")),
      ["--resume", "good/checkpoints/ckpt-00000004.json", "--set", "reducer.name=adasum", "--set", "reducer.target=model_delta"],
      "ckpt-00000004.optim-rank1.safetensors is missing")
    R("resume_local_into_shared", ckpt_run(["--set", "reducer.name=adasum", "--set", "reducer.target=model_delta"]),
      ["--resume", "good/checkpoints/ckpt-00000004.json"], "holds each rank's own optimizer state")
    R("fresh_run_into_used_folder", ckpt_run([]), ["--set", "output.dir=good"], "already holds",
      "--resume auto", "checkpoint.overwrite: true")
    R("init_from_missing", None, ["--set", "train.init_from=nowhere/ckpt.json"], "nowhere/ckpt.json")
    R("init_from_empty_folder", lambda d: os.makedirs(f"{d}/empty"), ["--set", "train.init_from=empty"],
      "train.init_from", "no valid checkpoint in empty")
    # Weights of another model (no tensor of LeNet-5's in them): an error, not a run from scratch.
    R("init_from_another_model", lambda d: safetensors(f"{d}/other.safetensors", {"encoder.w": 2, "pooler.b": 3}),
      ["--set", "train.init_from=other.safetensors"], "train.init_from (set by --set train.init_from=other.safetensors)",
      "other.safetensors holds none of this LeNet5's 10 tensors (it holds encoder.w, pooler.b)",
      "weights of another model")
    R("init_from_other_shapes", ckpt_run([]), ["--set", "model.name=resnet20_mnist", "--set", "train.init_from=good/checkpoints"],
      "train.init_from (set by --set train.init_from=good/checkpoints): ", "entry 'conv1.weight' is f32[6,1,5,5] but this",
      "is it a checkpoint of another model or configuration?")
    R("json_wrong_types", lambda d: (ckpt_run([])(d), edit_json(f"{d}/good/checkpoints/ckpt-00000004.json", "step", "four")),
      ["--resume", "good/checkpoints/ckpt-00000004.json"], "ckpt-00000004.json", "not a valid checkpoint description")
    R("json_other_run_id_is_fine_but_files_gone", lambda d: (ckpt_run([])(d), shutil.rmtree(f"{d}/good/checkpoints")),
      ["--resume", "good/checkpoints/ckpt-00000004.json"], "ckpt-00000004.json does not exist")
    # Config values (cfg-fixes)
    # Non-finite numbers are refused by the range checks, naming the key, not the schedule or a
    # NaN at step 1 (train.comm_timeout_s alone takes inf: no limit).
    add(Case("lr_inf", ["optimizer.lr (set by --set optimizer.lr=inf): must be a finite number > 0, got inf"],
             args=["--set", "optimizer.lr=inf"]))
    add(Case("weight_decay_inf", ["optimizer.weight_decay (line", "must be a finite number >= 0, got inf"],
             raw=json.dumps(merged(BASE, {"optimizer": {"weight_decay": 1}})).replace(
                 '"weight_decay": 1', '"weight_decay": .inf')))
    # Bucket sizes in MiB are checked before they become bytes (an undefined cast made inf or 1e13
    # "bucket_bytes -9223372036854775808"; 1e-9 was 0 bytes).
    for key, value in (("bucket_mb", "inf"), ("bucket_mb", "1e13"), ("first_bucket_mb", "1e-9")):
        add(Case(f"{key}_{value.replace('-', '_')}",
                 [f"reducer.{key} (set by --set reducer.{key}={value}): must be from 1 byte to 1 TiB",
                  "[9.5367431640625e-07, 1048576]"], args=["--set", f"reducer.{key}={value}"]))
    # A section only --set created is named with the assignment, like any key set by --set.
    add(Case("set_unknown_new_section", ["1 key that nothing reads", "newsection (set by --set newsection.key=5)"],
             args=["--set", "newsection.key=5"]))
    # A --resume value that is no file and within 2 edits of auto (case aside) suggests auto.
    add(Case("resume_auto_misspelt", ["checkpoint atuo.json does not exist or cannot be read; did you mean --resume auto?"],
             args=["--resume", "atuo"]))
    add(Case("resume_auto_capitalised", ["checkpoint AUTO.json does not exist", "; did you mean --resume auto?"],
             args=["--resume", "AUTO"]))
    # A path starting with ~ would be a folder named ~: refused, naming the key and the
    # absolute path ($HOME expanded) to write.
    home = os.environ.get("HOME", "")
    add(Case("output_dir_tilde", ["output.dir (set by --set output.dir=~/x): '~/x' starts with ~",
                                  f"write {home}/x"], args=["--set", "output.dir=~/x"]))
    add(Case("data_path_tilde", ["data.path (line", "'~/mnist' starts with ~", f"write {home}/mnist"],
             cfg={"data": {"name": "mnist", "path": "~/mnist", "size": DROP, "eval_size": DROP}}))
    return C


def truncate(p):
    b = open(p, "rb").read()
    open(p, "wb").write(b[: len(b) // 2])


def flip(p):
    b = bytearray(open(p, "rb").read())
    b[len(b) // 2] ^= 0xFF
    open(p, "wb").write(bytes(b))


def edit_json(p, key, value):
    j = json.load(open(p))
    j[key] = value
    json.dump(j, open(p, "w"))


# ---- running ------------------------------------------------------------------------------------
TRAINER = None


def run_trainer(cwd, ranks, args, timeout=60, extra_env=None):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    env.update(extra_env or {})
    cmd = ["mpiexec", "-np", str(ranks), "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "--bind-to", "none",
           TRAINER] + args
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")


def main():
    global TRAINER
    args = sys.argv[1:]
    TRAINER, src, work = os.path.abspath(args[0]), args[1], args[2]
    shard = (0, 1)
    only = None
    if "--shard" in args:
        i, n = args[args.index("--shard") + 1].split("/")
        shard = (int(i), int(n))
    if "--only" in args:
        only = args[args.index("--only") + 1]
    table = cases(src)
    names = [c.name for c in table]
    assert len(names) == len(set(names)), "case names must be unique"
    if "--list" in args:
        print("\n".join(names))
        print(f"{len(table)} cases")
        return 0
    mine = [c for k, c in enumerate(table) if k % shard[1] == shard[0] and (only is None or c.name == only)]
    failed = 0
    for c in mine:
        d = os.path.join(work, c.name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        write(f"{d}/base.yaml", json.dumps(BASE, indent=1))
        write(f"{d}/c.yaml", c.raw if c.raw is not None else json.dumps(merged(BASE, c.cfg), indent=1))
        if c.setup:
            c.setup(d)
        t0 = time.time()
        rc, out = run_trainer(d, c.ranks, (["--config", "c.yaml"] if c.config_arg else []) + c.args, extra_env=c.env)
        secs = time.time() - t0
        problems = []
        if rc == 0:
            problems.append("exit status 0 (the input was accepted)")
        if rc == 124:
            problems.append("no exit within 60 s (hang)")
        if CRASH.search(out):
            problems.append("crash: " + CRASH.search(out).group(0))
        missing = [e for e in c.expect if e not in out]
        if missing:
            problems.append("message lacks: " + " | ".join(repr(m) for m in missing))
        if problems:
            failed += 1
            print(f"FAIL {c.name} ({secs:.1f} s): " + "; ".join(problems))
            print("  " + "\n  ".join(l for l in out.strip().splitlines() if "error" in l or "Error" in l)[-2000:])
        else:
            print(f"ok   {c.name} ({secs:.1f} s)")
    print(f"bad inputs: {len(mine) - failed} of {len(mine)} refused as expected (shard {shard[0]}/{shard[1]})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
