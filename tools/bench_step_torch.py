#!/usr/bin/python3
"""PyTorch twin of build/bin/bench_step: one model's training step (forward + backward +
optimizer) on a fixed synthetic batch; prints JSON (samples/s, peak RSS). Debian's python3-torch
and python3-torchvision (tools/setup.sh --bench). LAMB does not exist in PyTorch: bert_mini's
twin uses AdamW, as the issue specifies."""
import argparse
import json
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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
        pos = torch.arange(s).unsqueeze(0).expand(b, s)
        x = self.drop(self.ln(self.word(ids) + self.pos(pos) + self.token_type(torch.zeros_like(ids))))
        x = self.encoder(x)
        sel = labels.flatten() != -100
        h = self.tln(F.gelu(self.transform(x.reshape(b * s, -1)[sel])))
        logits = h @ self.word.weight.t() + self.bias
        return F.cross_entropy(logits, labels.flatten()[sel])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seq", type=int, default=128)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.model in ("resnet50", "resnet20_mnist", "lenet5"):
        if a.model == "resnet50":
            import torchvision
            net, size, ch, classes = torchvision.models.resnet50(), 224, 3, 1000
        else:
            net, size, ch, classes = (ResNet20Mnist() if a.model == "resnet20_mnist" else LeNet5()), 28, 1, 10
        x = torch.randn(a.batch, ch, size, size)
        y = torch.arange(a.batch) * 7919 % classes
        loss_fn = lambda: F.cross_entropy(net(x), y)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        opt_name = "SGD momentum"
    else:
        cfg = {"bert_base": (12, 768, 12, 3072), "bert_mini": (4, 256, 4, 1024)}[a.model]
        net = Bert(*cfg)
        i = torch.arange(a.batch * a.seq)
        ids = (1000 + i * 7919 % 29000).reshape(a.batch, a.seq)
        labels = torch.where(i % 7 == 3, ids.flatten(), torch.full_like(i, -100)).reshape(a.batch, a.seq)
        loss_fn = lambda: net(ids, labels)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=0.01)
        opt_name = "AdamW"
    net.train()

    def step():
        opt.zero_grad(set_to_none=False)
        loss_fn().backward()
        opt.step()

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
                      "torch_version": torch.__version__}))


if __name__ == "__main__":
    main()
