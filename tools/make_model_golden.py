#!/usr/bin/python3
"""Writes the whole-model golden files tests/golden/model_*.safetensors from PyTorch twins.

Run from anywhere with the system interpreter (the python3 first on PATH may lack torch):

    /usr/bin/python3 tools/make_model_golden.py            # writes tests/golden/model_*.safetensors
    /usr/bin/python3 tools/make_model_golden.py --out DIR  # writes them elsewhere (e.g. to diff)

For each of our models lenet5, resnet20_mnist and bert (preset tiny, vocab 97, NSP) a functional
PyTorch twin that replicates nn/models/*.cc layer for layer, with parameters keyed by OUR names,
computes on a fixed batch: the logits, the loss, every parameter's gradient, the running
statistics after one training-mode forward, and the losses and final parameters of 5 optimizer
steps on that batch (SGD momentum 0.9, weight decay 1e-4, lr 0.05 for the CNNs in train mode;
AdamW lr 1e-3, weight decay 0.01 on decayed parameters only, for BERT).

Precision: parameters and inputs are f32-representable; the reference is computed in float64
from them (like tools/make_golden.py), so the reference error is only the rounding of the stored
result to f32, and what tests/nn/test_model_golden.cc sees is our f32 kernels' own error. The
script also runs the same twin in float32 and records torch's own f32-vs-f64 differences in the
metadata (f32_err_*), which is what the C++ tolerances are judged against.

Size (tests/golden must stay well under 1 MB; the three models have 61,706 + 272,186 (+ 1,568
BN statistics) + 447,203 parameters, 3.1 MB per f32 copy; the three files take ~300 KB):
- The initial state is not stored: every parameter and buffer is defined by a counter-based
  formula that the C++ test evaluates bit for bit (init_values here, init_tensor there): element
  i of tensor NAME is  offset + bound * (2m - 2^24) / 2^24  formed in double and rounded to f32,
  with m = mix(fnv1a64("init:" + NAME) + (i+1)*G) >> 40 (mix: splitmix64's finaliser, G the
  64-bit golden ratio, all mod 2^64) and bound a power of two. Metadata "init/NAME" holds
  "offset bound"; "init_checksum/NAME" (sum and sum of squares in f64) pins the formula.
- A gradient ("grad") or final parameter ("final") of at most FULL_MAX elements is stored whole
  as "grad/NAME" (the parameter's shape). A larger one is stored as SAMPLE elements at hashed
  indices, "grad_sample/NAME" (index j = mix(fnv1a64("sample:" + NAME) + (j+1)*G) mod numel),
  plus "grad_stats/NAME" = [sum, L2 norm, r1.g, r2.g, max |g|] computed in f64 over all elements,
  with r1, r2 random signs (-1 where bit 63 of mix(fnv1a64("proj1:"/"proj2:" + NAME) + (i+1)*G)
  is set), so that every element still counts.

Files are written by hand in the safetensors layout (no safetensors package), as in
tools/make_golden.py. Output is byte-for-byte deterministic for one torch build. Bump
FORMAT_VERSION whenever names, shapes or meanings change; the C++ test checks it.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

import torch.nn.functional as F

from golden_io import write_verified

FORMAT_VERSION = "1"
GENERATOR = "tools/make_model_golden.py"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F64 = torch.float64

FULL_MAX = 2048  # tensors up to this many elements are stored whole
SAMPLE = 384     # elements sampled from larger tensors
STEPS = 5

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ---- the counter-based formulas shared with the C++ test ---------------------------------------
def fnv1a64(s):
    h = 0xCBF29CE484222325
    for c in s.encode("utf-8"):
        h ^= c
        h = (h * 0x100000001B3) & MASK64
    return h


def mix_array(key, n):
    """splitmix64 finaliser of key + (i+1)*GOLDEN for i in [0, n), as uint64 (wrapping)."""
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(GOLDEN))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z


def init_values(name, shape, offset, bound):
    """f32-exact values of the formula above, as a float64 tensor."""
    n = int(np.prod(shape)) if len(shape) else 1
    m = (mix_array(fnv1a64("init:" + name), n) >> np.uint64(40)).astype(np.float64)
    x = (2.0 * m - 16777216.0) / 16777216.0  # exact: [-1, 1)
    v = (offset + bound * x).astype(np.float32).astype(np.float64)
    return torch.from_numpy(v.reshape(shape))


def sample_indices(name, n):
    return (mix_array(fnv1a64("sample:" + name), SAMPLE) % np.uint64(n)).astype(np.int64)


def proj_signs(tag, name, n):
    bits = mix_array(fnv1a64(tag + ":" + name), n) >> np.uint64(63)
    return 1.0 - 2.0 * bits.astype(np.float64)


def pow2(x):
    return 2.0 ** round(math.log2(x))


# ---- what each file stores of a tensor ----------------------------------------------------------
def compressed(prefix, name, t):
    """Whole tensor if small, else a hashed sample + [sum, L2 norm, r1.t, r2.t, max |t|]."""
    t = t.detach().double()
    n = t.numel()
    if n <= FULL_MAX:
        return [(f"{prefix}/{name}", t.float())]
    flat = t.reshape(-1).numpy()
    idx = sample_indices(name, n)
    stats = np.array([flat.sum(), np.sqrt((flat * flat).sum()),
                      (proj_signs("proj1", name, n) * flat).sum(),
                      (proj_signs("proj2", name, n) * flat).sum(), np.abs(flat).max()])
    return [(f"{prefix}_sample/{name}", torch.from_numpy(flat[idx]).float()),
            (f"{prefix}_stats/{name}", torch.from_numpy(stats).float())]


# ---- twins --------------------------------------------------------------------------------------
# A twin is: a list of (name, shape, offset, bound, kind) with kind "param"/"buffer", in OUR
# Module::state() order (parameters, then buffers); a set of names without weight decay; and a
# function (P, batch, training) -> (loss, extras) over a dict P of tensors by name. BN running
# statistics in P are updated in place in training mode, as our BatchNorm2d does.
class Spec:
    def __init__(self):
        self.entries = []
        self.no_decay = set()

    def param(self, name, shape, offset, bound, decay=True):
        self.entries.append((name, tuple(shape), offset, bound, "param"))
        if not decay:
            self.no_decay.add(name)

    def buffer(self, name, shape, offset, bound):
        self.entries.append((name, tuple(shape), offset, bound, "buffer"))

    def ordered(self):  # parameters then buffers, as Module::state()
        return ([e for e in self.entries if e[4] == "param"] +
                [e for e in self.entries if e[4] == "buffer"])


def conv_spec(s, name, cin, cout, k, bias, relu=True):
    fan_in = cin * k * k
    gain = 6.0 if relu else 3.0  # He / LeCun uniform scale, rounded to a power of two
    s.param(name + ".weight", (cout, cin, k, k), 0.0, pow2(math.sqrt(gain / fan_in)))
    if bias:
        s.param(name + ".bias", (cout,), 0.0, pow2(1.0 / math.sqrt(fan_in)), decay=False)


def linear_spec(s, name, fin, fout, relu=False, bias=True):
    s.param(name + ".weight", (fout, fin), 0.0, pow2(math.sqrt((6.0 if relu else 3.0) / fin)))
    if bias:
        s.param(name + ".bias", (fout,), 0.0, pow2(1.0 / math.sqrt(fin)) / 2, decay=False)


def bn_spec(s, name, c):
    # Non-trivial gamma/beta and running statistics, so that every term of the BN update counts.
    s.param(name + ".weight", (c,), 1.0, 0.25, decay=False)
    s.param(name + ".bias", (c,), 0.0, 0.125, decay=False)
    s.buffer(name + ".running_mean", (c,), 0.0, 0.125)
    s.buffer(name + ".running_var", (c,), 1.0, 0.25)


def ln_spec(s, name, d):
    s.param(name + ".weight", (d,), 1.0, 0.25, decay=False)
    s.param(name + ".bias", (d,), 0.0, 0.125, decay=False)


def linear(P, name, x):
    return F.linear(x, P[name + ".weight"], P.get(name + ".bias"))


def bn(P, name, x, training):
    return F.batch_norm(x, P[name + ".running_mean"], P[name + ".running_var"], P[name + ".weight"],
                        P[name + ".bias"], training=training, momentum=0.1, eps=1e-5)


# LeNet-5 (nn/models/lenet.cc): conv5x5(6, pad 2) - ReLU - maxpool2 - conv5x5(16) - ReLU -
# maxpool2 - fc120 - ReLU - fc84 - ReLU - fc10.
def lenet_spec():
    s = Spec()
    # LeCun-scale weights (std ~ 1/sqrt(fan_in)): without BN, He scale makes the initial logits
    # large and 5 SGD steps at lr 0.05 diverge, which would make the loss curve ill-conditioned.
    conv_spec(s, "conv1", 1, 6, 5, bias=True, relu=False)
    conv_spec(s, "conv2", 6, 16, 5, bias=True, relu=False)
    linear_spec(s, "fc1", 400, 120)
    linear_spec(s, "fc2", 120, 84)
    linear_spec(s, "fc3", 84, 10)
    return s


def lenet_logits(P, x, training):
    h = F.max_pool2d(F.relu(F.conv2d(x, P["conv1.weight"], P["conv1.bias"], padding=2)), 2, 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, P["conv2.weight"], P["conv2.bias"])), 2, 2)
    h = h.reshape(h.shape[0], -1)
    h = F.relu(linear(P, "fc1", h))
    h = F.relu(linear(P, "fc2", h))
    return linear(P, "fc3", h)


# resnet20_mnist (nn/models/resnet.cc): 3x3 stem (16, stride 1, pad 1, no bias) - BN - ReLU, three
# stages of three basic blocks (16, 32, 64; stride 2 in the first block of stages 2 and 3, with a
# 1x1 stride-2 conv + BN shortcut there), global average pool, fc10. torchvision names.
RESNET20 = [(16, 3), (32, 3), (64, 3)]


def resnet_blocks():
    inp = 16
    for st, (w, nb) in enumerate(RESNET20):
        for b in range(nb):
            stride = 2 if st > 0 and b == 0 else 1
            yield f"layer{st + 1}.{b}", inp, w, stride, (stride != 1 or inp != w)
            inp = w


def resnet_spec():
    s = Spec()
    conv_spec(s, "conv1", 1, 16, 3, bias=False)
    bn_spec(s, "bn1", 16)
    for name, inp, w, stride, down in resnet_blocks():
        conv_spec(s, name + ".conv1", inp, w, 3, bias=False)
        bn_spec(s, name + ".bn1", w)
        conv_spec(s, name + ".conv2", w, w, 3, bias=False)
        bn_spec(s, name + ".bn2", w)
        if down:
            conv_spec(s, name + ".downsample.0", inp, w, 1, bias=False, relu=False)
            bn_spec(s, name + ".downsample.1", w)
    linear_spec(s, "fc", 64, 10)
    return s


def resnet_logits(P, x, training):
    h = F.relu(bn(P, "bn1", F.conv2d(x, P["conv1.weight"], padding=1), training))
    for name, inp, w, stride, down in resnet_blocks():
        y = F.relu(bn(P, name + ".bn1",
                      F.conv2d(h, P[name + ".conv1.weight"], stride=stride, padding=1), training))
        y = bn(P, name + ".bn2", F.conv2d(y, P[name + ".conv2.weight"], padding=1), training)
        sc = h
        if down:
            sc = bn(P, name + ".downsample.1",
                    F.conv2d(h, P[name + ".downsample.0.weight"], stride=stride), training)
        h = F.relu(y + sc)
    h = h.mean(dim=(2, 3))
    return linear(P, "fc", h)


def image_loss(logits_fn):
    def run(P, batch, training):
        logits = logits_fn(P, batch["image"], training)
        loss = F.cross_entropy(logits, batch["label"])
        return loss, {"logits": logits}
    return run


# BERT (nn/models/bert.cc), preset tiny (2 layers, hidden 128, 2 heads, FFN 512) with vocab 97,
# 32 positions, 2 token types, NSP, dropout 0. Post-LN, LayerNorm eps 1e-12, exact-erf GELU,
# additive -10000 mask on padded keys, MLM head at the masked positions only (transform - GELU -
# LayerNorm - decoder tied to the word embeddings + cls.decoder_bias), NSP through the pooler's
# tanh on position 0; loss = mean MLM cross-entropy + mean NSP cross-entropy.
BERT = dict(vocab=97, hidden=128, layers=2, heads=2, ffn=512, max_positions=32, type_vocab=2)
BERT_CONFIG = ("name: bert\npreset: tiny\nvocab_size: 97\nmax_positions: 32\n"
               "dropout: 0.0\nattention_dropout: 0.0\nnsp: true\n")


def bert_spec():
    c = BERT
    h = c["hidden"]
    s = Spec()
    emb = pow2(math.sqrt(3.0 / h))
    s.param("embeddings.word_embeddings.weight", (c["vocab"], h), 0.0, emb)
    s.param("embeddings.position_embeddings.weight", (c["max_positions"], h), 0.0, emb)
    s.param("embeddings.token_type_embeddings.weight", (c["type_vocab"], h), 0.0, emb)
    ln_spec(s, "embeddings.LayerNorm", h)
    for l in range(c["layers"]):
        p = f"encoder.layer{l}"
        for part in ("query", "key", "value", "output"):
            linear_spec(s, f"{p}.attention.{part}", h, h)
        ln_spec(s, f"{p}.attention_norm", h)
        linear_spec(s, f"{p}.intermediate", h, c["ffn"])
        linear_spec(s, f"{p}.output", c["ffn"], h)
        ln_spec(s, f"{p}.output_norm", h)
    linear_spec(s, "pooler", h, h)
    # cls: its own parameter first, then its children (Module::parameters() order).
    s.param("cls.decoder_bias", (c["vocab"],), 0.0, 0.125, decay=False)
    linear_spec(s, "cls.transform", h, h)
    ln_spec(s, "cls.transform_norm", h)
    linear_spec(s, "cls.nsp", h, 2)
    return s


def layer_norm(P, name, x):
    return F.layer_norm(x, (x.shape[-1],), P[name + ".weight"], P[name + ".bias"], eps=1e-12)


def bert_run(P, batch, training):
    c = BERT
    ids, seg, mask = batch["input_ids"], batch["segment_ids"], batch["attention_mask"]
    labels, nsp_label = batch["labels"], batch["nsp_label"]
    b, s = ids.shape
    hd = c["hidden"] // c["heads"]
    pos = torch.arange(s).expand(b, s)
    x = (F.embedding(ids, P["embeddings.word_embeddings.weight"]) +
         F.embedding(pos, P["embeddings.position_embeddings.weight"]) +
         F.embedding(seg, P["embeddings.token_type_embeddings.weight"]))
    x = layer_norm(P, "embeddings.LayerNorm", x)
    add_mask = torch.where(mask != 0, 0.0, -10000.0).to(x.dtype).view(b, 1, 1, s)
    for l in range(c["layers"]):
        p = f"encoder.layer{l}.attention"

        def split(t):
            return t.view(b, s, c["heads"], hd).permute(0, 2, 1, 3)
        q, k, v = (split(linear(P, f"{p}.{n}", x)) for n in ("query", "key", "value"))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)) + add_mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        ctx = ctx.permute(0, 2, 1, 3).reshape(b, s, c["hidden"])
        a = linear(P, f"{p}.output", ctx)
        hN = layer_norm(P, f"encoder.layer{l}.attention_norm", x + a)
        f = F.gelu(linear(P, f"encoder.layer{l}.intermediate", hN))
        f = linear(P, f"encoder.layer{l}.output", f)
        x = layer_norm(P, f"encoder.layer{l}.output_norm", hN + f)
    flat = x.reshape(b * s, c["hidden"])
    where = (labels.reshape(-1) != -100).nonzero().reshape(-1)  # row-major, as bert.cc
    hm = layer_norm(P, "cls.transform_norm", F.gelu(linear(P, "cls.transform", flat[where])))
    mlm_logits = hm @ P["embeddings.word_embeddings.weight"].t() + P["cls.decoder_bias"]
    mlm_loss = F.cross_entropy(mlm_logits, labels.reshape(-1)[where])
    cls = flat[torch.arange(b) * s]
    nsp_logits = linear(P, "cls.nsp", torch.tanh(linear(P, "pooler", cls)))
    nsp_loss = F.cross_entropy(nsp_logits, nsp_label)
    return mlm_loss + nsp_loss, {"mlm_logits": mlm_logits, "nsp_logits": nsp_logits,
                                 "mlm_loss": mlm_loss, "nsp_loss": nsp_loss}


# ---- fixed batches ------------------------------------------------------------------------------
def image_batch(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    # MNIST-like scale: normalised pixels of mean ~0, std ~1, some strongly positive.
    image = torch.randn(4, 1, 28, 28, generator=g, dtype=F64).float().double()
    label = torch.tensor([3, 7, 0, 9], dtype=torch.int64)
    return {"image": image, "label": label}


def bert_batch(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    b, s = 2, 12
    ids = torch.randint(5, BERT["vocab"], (b, s), generator=g, dtype=torch.int64)
    mask = torch.ones(b, s, dtype=torch.int64)
    mask[1, 9:] = 0                 # sequence 1: 9 real tokens, 3 padding
    seg = torch.zeros(b, s, dtype=torch.int64)
    seg[0, 6:] = 1
    seg[1, 5:9] = 1
    ids[1, 9:] = 0                  # [PAD]
    labels = torch.full((b, s), -100, dtype=torch.int64)
    for i, positions in enumerate(([2, 5, 9], [1, 4, 7])):
        for p in positions:
            labels[i, p] = torch.randint(5, BERT["vocab"], (1,), generator=g).item()
            ids[i, p] = 4           # [MASK]
    nsp_label = torch.tensor([0, 1], dtype=torch.int64)
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": mask, "labels": labels,
            "nsp_label": nsp_label}


# ---- one model ----------------------------------------------------------------------------------
MODELS = {
    "lenet5": dict(spec=lenet_spec, run=image_loss(lenet_logits), batch=lambda: image_batch(5),
                   config="name: lenet5\nnum_classes: 10\n", training=True,
                   optimizer=("sgd", dict(lr=0.05, momentum=0.9, weight_decay=1e-4)),
                   optimizer_config="name: sgd\nlr: 0.05\nmomentum: 0.9\nweight_decay: 0.0001\n"),
    "resnet20_mnist": dict(spec=resnet_spec, run=image_loss(resnet_logits),
                           batch=lambda: image_batch(20),
                           config="name: resnet20_mnist\nnum_classes: 10\n", training=True,
                           optimizer=("sgd", dict(lr=0.05, momentum=0.9, weight_decay=1e-4)),
                           optimizer_config=("name: sgd\nlr: 0.05\nmomentum: 0.9\n"
                                             "weight_decay: 0.0001\n")),
    "bert": dict(spec=bert_spec, run=bert_run, batch=lambda: bert_batch(97), config=BERT_CONFIG,
                 training=True,
                 optimizer=("adamw", dict(lr=1e-3, weight_decay=0.01)),
                 optimizer_config="name: adamw\nlr: 0.001\nweight_decay: 0.01\n"),
}


def make_optimizer(kind, opts, spec, P):
    decay = [P[e[0]] for e in spec.ordered() if e[4] == "param" and e[0] not in spec.no_decay]
    no_decay = [P[e[0]] for e in spec.ordered() if e[4] == "param" and e[0] in spec.no_decay]
    groups = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=opts["lr"], momentum=opts["momentum"],
                               weight_decay=opts["weight_decay"])
    return torch.optim.AdamW(groups, lr=opts["lr"], betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=opts["weight_decay"])


def simulate(model, dtype):
    """Runs the twin in `dtype`; returns everything the file needs (as float64 tensors)."""
    m = MODELS[model]
    spec = m["spec"]()
    P = {}
    for name, shape, offset, bound, kind in spec.ordered():
        t = init_values(name, shape, offset, bound).to(dtype)
        P[name] = t.requires_grad_(True) if kind == "param" else t
    batch = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in m["batch"]().items()}
    params = [e[0] for e in spec.ordered() if e[4] == "param"]
    buffers = [e[0] for e in spec.ordered() if e[4] == "buffer"]
    opt = make_optimizer(*m["optimizer"], spec, P)
    out = {"spec": spec, "batch": batch, "params": params, "buffers": buffers, "losses": []}
    for step in range(STEPS + 1):
        opt.zero_grad(set_to_none=False)
        loss, extras = m["run"](P, batch, m["training"])
        out["losses"].append(loss.item())
        if step == STEPS:
            break
        loss.backward()
        if step == 0:
            out["loss"] = loss.detach().double()
            out["extras"] = {k: v.detach().double() for k, v in extras.items()}
            out["grads"] = {n: P[n].grad.detach().double().clone() for n in params}
            out["buffers_after1"] = {n: P[n].detach().double().clone() for n in buffers}
        opt.step()
    out["final"] = {n: P[n].detach().double().clone() for n in params}
    return out


def rel_err(a, b):
    """max |a-b| / max |b| (0 when both are 0)."""
    d = (a - b).abs().max().item()
    s = b.abs().max().item()
    return d / s if s > 0 else d


def build(model):
    m = MODELS[model]
    ref = simulate(model, F64)
    f32 = simulate(model, torch.float32)
    spec = ref["spec"]
    tensors = []
    meta = {"format_version": FORMAT_VERSION, "generator": GENERATOR,
            "torch_version": torch.__version__, "case": "model_" + model, "model": model,
            "model_config": m["config"], "optimizer_config": m["optimizer_config"],
            "steps": str(STEPS), "training": "true" if m["training"] else "false",
            "full_max": str(FULL_MAX), "sample": str(SAMPLE),
            "params": ",".join(ref["params"]), "buffers": ",".join(ref["buffers"]),
            "no_decay": ",".join(e[0] for e in spec.ordered() if e[0] in spec.no_decay)}
    for name, shape, offset, bound, kind in spec.ordered():
        v = init_values(name, shape, offset, bound)
        meta["init/" + name] = f"{offset!r} {bound!r}"
        meta["init_checksum/" + name] = f"{v.sum().item()!r} {(v * v).sum().item()!r}"
    for k, v in ref["batch"].items():
        tensors.append(("batch/" + k, v.float() if v.is_floating_point() else v))
    for k, v in ref["extras"].items():
        tensors.append((k, v.float().reshape(v.shape)))
    tensors.append(("loss", ref["loss"].float()))
    for n in ref["params"]:
        tensors += compressed("grad", n, ref["grads"][n])
    for n in ref["buffers"]:
        tensors.append(("after1/" + n, ref["buffers_after1"][n].float()))
    tensors.append(("steps/loss", torch.tensor(ref["losses"], dtype=F64).float()))
    for n in ref["params"]:
        tensors += compressed("final", n, ref["final"][n])

    # Parameters whose gradient is identically zero in exact arithmetic (BERT's key biases: a
    # bias added to every key shifts each query's scores by a constant, which softmax ignores).
    # In f64 their gradient is ~1e-17, in f32 rounding noise; the test compares it against an
    # absolute floor and does not compare their AdamW trajectories (Adam normalises the noise).
    g_model = max(ref["grads"][n].abs().max().item() for n in ref["params"])
    zero = [n for n in ref["params"] if ref["grads"][n].abs().max().item() < 1e-9 * g_model]
    meta["zero_grad_params"] = ",".join(zero)
    # Logit rows whose two largest entries are close would make arg-max counts fragile.
    for k, v in ref["extras"].items():
        if k.endswith("logits"):
            top = v.topk(2, dim=-1).values
            margin = (top[:, 0] - top[:, 1]).min().item()
            if margin < 1e-3:
                raise AssertionError(f"{model}: {k} has a top-2 margin of {margin:g}; "
                                     "change the batch")

    # torch's own f32 error against the f64 reference: the scale our f32 kernels are judged by.
    live = [n for n in ref["params"] if n not in zero]
    g_err = max(rel_err(f32["grads"][n], ref["grads"][n]) for n in live)
    worst = max(live, key=lambda n: rel_err(f32["grads"][n], ref["grads"][n]))
    meta["f32_err_loss"] = repr(abs(f32["loss"].item() - ref["loss"].item()))
    meta["f32_err_grad_max_rel_to_tensor_max"] = f"{g_err!r} ({worst})"
    meta["f32_err_steps_loss"] = repr(max(abs(a - b) for a, b in zip(f32["losses"], ref["losses"])))
    worst_f = max(live, key=lambda n: rel_err(f32["final"][n], ref["final"][n]))
    meta["f32_err_final_max_rel_to_tensor_max"] = (
        f"{rel_err(f32['final'][worst_f], ref['final'][worst_f])!r} ({worst_f})")
    for k in ref["extras"]:
        meta["f32_err_" + k] = repr((f32["extras"][k] - ref["extras"][k]).abs().max().item())
    return tensors, meta, ref


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden"),
                    help="output folder (default: tests/golden of this checkout)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    total = 0
    for model in args.models.split(","):
        tensors, meta, ref = build(model)
        for tname, t in tensors:
            if t.dtype == torch.float32 and not torch.isfinite(t).all():
                raise AssertionError(f"{model}: {tname} is not finite")
        path = os.path.join(args.out, f"model_{model}.safetensors")
        size = write_verified(path, tensors, meta)
        total += size
        print(f"{path}: {len(tensors)} tensors, {size} bytes; losses "
              + " ".join(f"{x:.6f}" for x in ref["losses"]))
        for k, v in meta.items():
            if k.startswith("f32_err"):
                print(f"  {k}: {v}")
    print(f"torch {torch.__version__}; {total} bytes in all", file=sys.stderr)


if __name__ == "__main__":
    main()
