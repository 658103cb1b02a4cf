#!/usr/bin/python3
"""PyTorch twin of build/bin/bench_step: one model's training step (forward + backward +
optimizer) on a fixed synthetic batch; prints JSON (samples/s, peak RSS). Debian's python3-torch
and python3-torchvision (tools/setup.sh --bench). LAMB does not exist in PyTorch: the twins of
bert_mini and bert_tiny (LAMB in bench_step) use AdamW, as the issue specifies.

  bench_step_torch.py --model NAME --batch B [--threads T] [--steps N] [--seq L]
                      [--device cpu|cuda] [--tf32] [--tuned] [--precision fp32|bf16|fp16]
                      [--variant NAME]

--device cpu (default): one warm-up step, then the median of --steps timed steps; peak_rss_mb is
this process's maximum resident set, so one case per process. The JSON's "runtime" says what the
process ran with (tools/torch_runtime.py): the BLAS library PyTorch's GEMMs call (found through
libtorch_cpu and in /proc/self/maps) and its threading, whether tcmalloc is loaded, the memory
format of model and batch, and with --tuned the "shortfalls" of the tuned runtime.
--tuned (cpu only): PyTorch's best CPU runtime as bench_step runs it. The script itself only puts
the CNNs' parameters and batch in channels-last (torch.channels_last; convolutions go through
oneDNN, which prefers it; BERT has no 4-d tensors and keeps its layout); bench_step starts it
with tcmalloc preloaded (LD_PRELOAD=.../libtcmalloc_minimal.so.4) and the OpenMP OpenBLAS first
on the library path (LD_LIBRARY_PATH=.../openblas-openmp), on that command only.

--precision bf16|fp16 (bench_step --precision ...): forward and loss under
torch.autocast(device, dtype=torch.bfloat16 or torch.float16), PyTorch's mixed precision (bf16
matmuls and convolutions through oneDNN on the CPU, bf16/fp16 through cuBLAS/cuDNN on a GPU; fp32
parameters, gradients and optimizer), the peer of our train.precision: bf16/fp16. No GradScaler:
bench_step does not scale the loss either.

--device cuda (run by bench_step --device cuda, under its --python): model, optimizer state and
batch on cuda:0, fp32 with TF32 off for cuBLAS and cuDNN unless --tf32 (bench_step passes it
when ADA_CUDA_TF32=1); three warm-up steps, each timed step between torch.cuda.synchronize()
calls; adds peak_allocated_mb / peak_reserved_mb (torch.cuda.max_memory_allocated /
max_memory_reserved over the whole run), device_name and tf32 to the JSON.

--variant (cuda; bench_step runs each in its own process and takes its ratios against the
fastest): PyTorch at its best is not one configuration, so the twin is several.
  eager           as installed: NCHW, the TransformerEncoder BERT, default optimizers (foreach)
  channels_last   CNNs: model and batch in torch.channels_last (cuDNN's NHWC kernels), fused SGD
  compile         CNNs: channels_last under torch.compile (TorchInductor's fused kernels)
  sdpa            BERT: a twin whose attention is F.scaled_dot_product_attention (flash /
                  memory-efficient kernels, dropout inside), fused AdamW
  sdpa_compile    BERT: sdpa under torch.compile
  hf_sdpa         BERT: Hugging Face transformers' BertForPreTraining with attn_implementation
                  "sdpa" (encoder + MLM head at the masked positions, as ours), fused AdamW
Each runs under torch.autocast with --precision bf16|fp16. A variant this torch cannot run (no
torch.compile, no F.scaled_dot_product_attention, no transformers) exits 3 with one line
"unavailable: <why>" on stderr; bench_step prints it and goes on."""
import argparse
import json
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_runtime  # tools/torch_runtime.py, beside this script

CNN_VARIANTS = ("eager", "channels_last", "compile")
BERT_VARIANTS = ("eager", "sdpa", "sdpa_compile", "hf_sdpa")


def unavailable(why):
    """A variant this installation cannot run: one line for bench_step, exit status 3."""
    import sys
    print("unavailable: " + why, file=sys.stderr)
    raise SystemExit(3)


class BasicBlock(nn.Module):
    def __init__(self, cin, c, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.down = None
        if stride != 1 or cin != c:
            self.down = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.down(x) if self.down is not None else x))


class ResNet20Mnist(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for i, c in enumerate([16, 32, 64]):
            for b in range(3):
                blocks.append(BasicBlock(cin, c, 2 if (i > 0 and b == 0) else 1))
                cin = c
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        h = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(h.mean((2, 3)))


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2).flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(h)))))


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 v1.5 block (stride on the 3x3 conv)."""

    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, width * 4, 1, bias=False), nn.BatchNorm2d(width * 4)
        self.down = None
        if stride != 1 or cin != width * 4:
            self.down = nn.Sequential(nn.Conv2d(cin, width * 4, 1, stride, bias=False), nn.BatchNorm2d(width * 4))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + (self.down(x) if self.down is not None else x))


class ResNet50(nn.Module):
    """Same layers as torchvision.models.resnet50(); used only where torchvision is missing."""

    def __init__(self, classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for i, (width, n) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
            for b in range(n):
                blocks.append(Bottleneck(cin, width, 2 if (i > 0 and b == 0) else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        return self.fc(self.blocks(h).mean((2, 3)))


class Bert(nn.Module):
    """Post-LN BERT encoder with the MLM head evaluated at the masked positions (tied decoder)."""

    def __init__(self, layers, hidden, heads, ffn, vocab=30522, positions=512):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        layer = nn.TransformerEncoderLayer(hidden, heads, ffn, 0.1, activation="gelu",
                                           batch_first=True, norm_first=False, layer_norm_eps=1e-12)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.transform = nn.Linear(hidden, hidden)
        self.tln = nn.LayerNorm(hidden, eps=1e-12)
        self.bias = nn.Parameter(torch.zeros(vocab))
        self.drop = nn.Dropout(0.1)

    def forward(self, ids, labels):
        b, s = ids.shape
        pos = torch.arange(s, device=ids.device).unsqueeze(0).expand(b, s)
        x = self.drop(self.ln(self.word(ids) + self.pos(pos) + self.token_type(torch.zeros_like(ids))))
        x = self.encoder(x)
        sel = labels.flatten() != -100
        h = self.tln(F.gelu(self.transform(x.reshape(b * s, -1)[sel])))
        logits = h @ self.word.weight.t() + self.bias
        return F.cross_entropy(logits, labels.flatten()[sel])


class SdpaLayer(nn.Module):
    """One post-LN BERT layer whose attention is F.scaled_dot_product_attention (no score
    matrix in memory on kernels that fuse it; attention dropout inside the kernel)."""

    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn1, self.ffn2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        x = self.ln1(x + self.drop(self.out(a.transpose(1, 2).reshape(b, s, h))))
        return self.ln2(x + self.drop(self.ffn2(F.gelu(self.ffn1(x)))))


class SdpaBert(Bert):
    """Bert with its encoder layers replaced by SdpaLayer (same parameters' shapes and count)."""

    def __init__(self, layers, hidden, heads, ffn, vocab=30522, positions=512):
        super().__init__(1, hidden, heads, ffn, vocab, positions)
        self.encoder = nn.Sequential(*[SdpaLayer(hidden, heads, ffn) for _ in range(layers)])


class HfBert(nn.Module):
    """transformers' BertForPreTraining (SDPA attention): the encoder, then its MLM head on the
    masked positions only (as ours and the other twins; HF's own forward would score all)."""

    def __init__(self, layers, hidden, heads, ffn):
        super().__init__()
        try:
            import transformers
        except ImportError:
            unavailable("transformers is not installed")
        cfg = transformers.BertConfig(num_hidden_layers=layers, hidden_size=hidden,
                                      num_attention_heads=heads, intermediate_size=ffn,
                                      attn_implementation="sdpa")
        self.net = transformers.BertForPreTraining(cfg)

    def forward(self, ids, labels):
        x = self.net.bert(input_ids=ids, token_type_ids=torch.zeros_like(ids)).last_hidden_state
        sel = labels.flatten() != -100
        logits = self.net.cls.predictions(x.reshape(-1, x.shape[-1])[sel])
        return F.cross_entropy(logits, labels.flatten()[sel])


def optimizer(cls, params, name, fused, **kw):
    """(the optimizer, its name): with `fused`, the fused CUDA one where this torch has it (AdamW
    2.0+, SGD 2.3+), else, and without, its default (foreach)."""
    opt = None
    if fused:
        try:
            opt = cls(params, fused=True, **kw)
        except (TypeError, RuntimeError, ValueError):
            pass
    opt = opt or cls(params, **kw)
    return opt, name + (" fused" if opt.defaults.get("fused") else "")


def compiled(net):
    if not hasattr(torch, "compile"):
        unavailable(f"torch {torch.__version__} has no torch.compile")
    return torch.compile(net)


# bench_step's models (apps/bench_step.cc, case_for): the CNNs, and BERT's presets as
# (layers, hidden, heads, FFN), nn/models/bert.cc's.
CNN_MODELS = ("resnet50", "resnet20_mnist", "lenet5")
BERT_PRESETS = {"bert_large": (24, 1024, 16, 4096), "bert_base": (12, 768, 12, 3072),
                "bert_mini": (4, 256, 4, 1024), "bert_tiny": (2, 128, 2, 512)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=CNN_MODELS + tuple(BERT_PRESETS))
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in cuBLAS and cuDNN (cuda only)")
    ap.add_argument("--tuned", action="store_true",
                    help="channels-last CNNs; report the runtime's shortfalls (cpu only)")
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                    help="bf16/fp16: forward under torch.autocast(device, torch.bfloat16/float16)")
    ap.add_argument("--variant", default="eager",
                    help="cuda: " + ", ".join(CNN_VARIANTS) + " (CNNs); " + ", ".join(BERT_VARIANTS) +
                    " (BERT); see the docstring")
    a = ap.parse_args()
    if a.tuned and a.device != "cpu":
        raise SystemExit("bench_step_torch.py: --tuned is for --device cpu")
    cnn = a.model in CNN_MODELS
    known = CNN_VARIANTS if cnn else BERT_VARIANTS
    if a.variant not in known:
        raise SystemExit(f"bench_step_torch.py: --variant {a.variant} is not one of {', '.join(known)} "
                         f"for --model {a.model}")
    if a.variant != "eager" and a.device != "cuda":
        raise SystemExit("bench_step_torch.py: --variant is for --device cuda (the CPU's best is --tuned)")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            raise SystemExit("bench_step_torch.py: --device cuda, but torch.cuda.is_available() is False "
                             f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
    if cnn:
        if a.model == "resnet50":
            try:
                import torchvision
                net = torchvision.models.resnet50()
            except ImportError:  # e.g. a pip torch without torchvision on the GPU machine
                net = ResNet50()
            size, ch, classes = 224, 3, 1000
        else:
            net, size, ch, classes = (ResNet20Mnist() if a.model == "resnet20_mnist" else LeNet5()), 28, 1, 10
        x = torch.randn(a.batch, ch, size, size).to(a.device)
        y = (torch.arange(a.batch) * 7919 % classes).to(a.device)
        net.to(a.device)
        memory_format = "contiguous (NCHW)"
        if a.tuned or a.variant != "eager":  # before the optimizer, so its state follows the layout
            net.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
            memory_format = "channels_last"
        opt, opt_name = optimizer(torch.optim.SGD, net.parameters(), "SGD momentum", a.variant != "eager",
                                  lr=0.1, momentum=0.9, weight_decay=1e-4)
        run = compiled(net) if a.variant == "compile" else net
        loss_fn = lambda: F.cross_entropy(run(x), y)
    else:
        cfg = BERT_PRESETS[a.model]
        if a.variant in ("sdpa", "sdpa_compile") and not hasattr(F, "scaled_dot_product_attention"):
            unavailable(f"torch {torch.__version__} has no F.scaled_dot_product_attention")
        net = (Bert if a.variant == "eager" else HfBert if a.variant == "hf_sdpa" else SdpaBert)(*cfg)
        i = torch.arange(a.batch * a.seq)
        ids = (1000 + i * 7919 % 29000).reshape(a.batch, a.seq)
        labels = torch.where(i % 7 == 3, ids.flatten(), torch.full_like(i, -100)).reshape(a.batch, a.seq)
        ids, labels = ids.to(a.device), labels.to(a.device)
        net.to(a.device)
        memory_format = "memory format n/a (no 4-d tensors)"
        opt, opt_name = optimizer(torch.optim.AdamW, net.parameters(), "AdamW", a.variant != "eager",
                                  lr=1e-4, weight_decay=0.01)
        run = compiled(net) if a.variant == "sdpa_compile" else net
        loss_fn = lambda: run(ids, labels)
    net.train()
    if a.precision == "bf16" and a.device == "cpu":
        # torch 1.13's CPU autocast hands layer_norm a bf16 input with fp32 weights and fails
        # ("expected scalar type BFloat16 but found Float"); later releases run it in fp32, as here.
        for m in net.modules():
            if isinstance(m, nn.LayerNorm):
                m.forward = (lambda ln: lambda x: F.layer_norm(x.float(), ln.normalized_shape, ln.weight,
                                                               ln.bias, ln.eps))(m)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast(a.device, dtype=torch.float16 if a.precision == "fp16" else torch.bfloat16,
                            enabled=a.precision != "fp32"):
            loss = loss_fn()
        loss.backward()
        opt.step()

    if not cuda:
        step()
        ts = []
        for _ in range(a.steps):
            t = time.perf_counter()
            step()
            ts.append(time.perf_counter() - t)
        ts.sort()
        s = ts[len(ts) // 2]
        print(json.dumps({"samples_per_s": a.batch / s, "steps_per_s": 1 / s, "optimizer": opt_name,
                          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                          "torch_version": torch.__version__, "precision": a.precision,
                          "runtime": torch_runtime.runtime(a.tuned, memory_format)}))
        return

    for _ in range(3):  # warm-up, as bench_step --device cuda
        step()
    ts = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    ts.sort()
    s = ts[len(ts) // 2]
    mib = 1024.0 * 1024.0
    print(json.dumps({"samples_per_s": a.batch / s, "steps_per_s": 1 / s, "optimizer": opt_name,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "peak_allocated_mb": torch.cuda.max_memory_allocated() / mib,
                      "peak_reserved_mb": torch.cuda.max_memory_reserved() / mib,
                      "device": "cuda", "device_name": torch.cuda.get_device_name(0), "tf32": a.tf32,
                      "variant": a.variant, "memory_format": memory_format,
                      "torch_version": torch.__version__, "cuda_version": torch.version.cuda}))


if __name__ == "__main__":
    main()
