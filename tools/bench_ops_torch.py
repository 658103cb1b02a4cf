#!/usr/bin/python3
"""PyTorch twin of build/bin/bench_ops: times the same GEMM and ResNet-50 convolution shapes
(forward + backward-data + backward-filter) and prints JSON on stdout. Run by bench_ops; needs
Debian's python3-torch (tools/setup.sh --bench)."""
import argparse
import json
import time

import torch
import torch.nn.functional as F

# Must match resnet50_convs() in apps/bench_ops.cc: (cin, cout, size, kernel, stride, count).
CONVS = [
    (3, 64, 224, 7, 2, 1),
    (64, 64, 56, 1, 1, 1), (64, 64, 56, 3, 1, 3), (64, 256, 56, 1, 1, 4), (256, 64, 56, 1, 1, 2),
    (256, 128, 56, 1, 1, 1), (128, 128, 56, 3, 2, 1), (128, 512, 28, 1, 1, 4),
    (256, 512, 56, 1, 2, 1), (512, 128, 28, 1, 1, 3), (128, 128, 28, 3, 1, 3),
    (512, 256, 28, 1, 1, 1), (256, 256, 28, 3, 2, 1), (256, 1024, 14, 1, 1, 6),
    (512, 1024, 28, 1, 2, 1), (1024, 256, 14, 1, 1, 5), (256, 256, 14, 3, 1, 5),
    (1024, 512, 14, 1, 1, 1), (512, 512, 14, 3, 2, 1), (512, 2048, 7, 1, 1, 3),
    (1024, 2048, 14, 1, 2, 1), (2048, 512, 7, 1, 1, 2), (512, 512, 7, 3, 1, 2),
]


def median_seconds(repeats, f):
    f()
    ts = []
    for _ in range(repeats):
        a = time.perf_counter()
        f()
        ts.append(time.perf_counter() - a)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gemm", type=int, default=2048)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    n = args.gemm
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    s = median_seconds(args.repeats, lambda: torch.mm(a, b, out=c))
    out = {"torch_version": torch.__version__, "threads": args.threads,
           "gemm_gflops": 2.0 * n ** 3 / s / 1e9, "conv_seconds": []}
    for cin, cout, size, k, stride, _ in CONVS:
        x = torch.randn(args.batch, cin, size, size, requires_grad=True)
        w = (torch.randn(cout, cin, k, k) * 0.05).requires_grad_()
        o = (size + 2 * (k // 2) - k) // stride + 1
        dy = torch.randn(args.batch, cout, o, o)

        def step():
            y = F.conv2d(x, w, stride=stride, padding=k // 2)
            gx, gw = torch.autograd.grad(y, (x, w), dy)
            return gx, gw
        out["conv_seconds"].append(median_seconds(args.repeats, step))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
