#!/usr/bin/python3
"""PyTorch twin of build/bin/bench_ops: times the same GEMM and convolution shapes (forward +
backward-data + backward-filter; bench_ops passes its set, e.g. ResNet-50's, with --convs) and
prints JSON on stdout. Run by bench_ops; needs Debian's python3-torch (tools/setup.sh --bench).

  bench_ops_torch.py --convs CIN,COUT,SIZE,KERNEL,STRIDE,COUNT;... [--threads 1] [--batch 32]
                     [--repeats 3] [--gemm 2048[,4096...]] [--device cpu|cuda] [--tf32]
                     [--inner 1] [--tuned] [--bf16]

--device cpu (default): GEMM of the first --gemm size (torch.mm, i.e. the BLAS library) and each
convolution's forward + both backwards through autograd; the JSON's "runtime" says what the
process ran with (tools/torch_runtime.py): the BLAS library PyTorch's GEMMs call (found through
libtorch_cpu and in /proc/self/maps) and its threading, whether tcmalloc is loaded, the
convolutions' memory format, and with --tuned the "shortfalls" of the tuned runtime.
--tuned (cpu only): PyTorch's best CPU runtime as bench_ops runs it. The script itself only puts
the convolutions' input, weight and output gradient in channels-last (torch.channels_last; they
go through oneDNN, which prefers it); bench_ops starts it with tcmalloc preloaded
(LD_PRELOAD=.../libtcmalloc_minimal.so.4) and the OpenMP OpenBLAS first on the library path
(LD_LIBRARY_PATH=.../openblas-openmp), on that command only.

--bf16 (cpu only; bench_ops --precision bf16): the GEMM and the convolutions under
torch.autocast("cpu", torch.bfloat16), fp32 tensors in, as our bf16 mode takes them.
--device cuda (run by bench_ops --device cuda, under its --python): tensors on cuda:0, fp32 with
TF32 off for cuBLAS and cuDNN unless --tf32; each timed sample is --inner calls between two
torch.cuda.synchronize() calls, and the three convolution passes are also timed one by one
(conv_fwd_seconds, conv_bwd_data_seconds, conv_bwd_filter_seconds, through
torch.ops.aten.convolution_backward with one output mask each).
--bn (cuda only): also the batch-norm + ReLU after each convolution (bn_seconds)."""
import argparse
import contextlib
import json
import time

import torch
import torch.nn.functional as F

import torch_runtime  # tools/torch_runtime.py, beside this script

def parse_convs(spec):
    """bench_ops's --convs: "cin,cout,size,kernel,stride,count;..." (it passes its shape set)."""
    try:
        convs = [tuple(int(v) for v in item.split(",")) for item in spec.split(";") if item]
    except ValueError:
        convs = []
    if not convs or any(len(c) != 6 for c in convs):
        raise SystemExit(f"bench_ops_torch.py: --convs {spec!r}: expected cin,cout,size,kernel,stride,count;...")
    return convs


def median_seconds(repeats, f):
    f()
    ts = []
    for _ in range(repeats):
        a = time.perf_counter()
        f()
        ts.append(time.perf_counter() - a)
    ts.sort()
    return ts[len(ts) // 2]


def median_seconds_cuda(repeats, inner, f):
    f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        a = time.perf_counter()
        for _ in range(inner):
            f()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - a) / inner)
    ts.sort()
    return ts[len(ts) // 2]


def main_cuda(args, sizes):
    if not torch.cuda.is_available():
        raise SystemExit("bench_ops_torch.py: --device cuda, but torch.cuda.is_available() is False "
                         f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    dev = torch.device("cuda", 0)

    def timed(f):
        return median_seconds_cuda(args.repeats, args.inner, f)

    gemm = []
    for n in sizes:
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        c = torch.empty(n, n, device=dev)
        s = timed(lambda a=a, b=b, c=c: torch.mm(a, b, out=c))  # bound now: the del below frees them
        gemm.append(2.0 * n ** 3 / s / 1e9)
        del a, b, c
    out = {"torch_version": torch.__version__, "cuda_version": torch.version.cuda, "device": "cuda",
           "device_name": torch.cuda.get_device_name(0), "tf32": args.tf32, "threads": args.threads,
           "inner": args.inner, "gemm_gflops": gemm[0], "gemm_gflops_all": gemm, "conv_seconds": [],
           "conv_fwd_seconds": [], "conv_bwd_data_seconds": [], "conv_bwd_filter_seconds": []}
    with torch.no_grad():
        for cin, cout, size, k, stride, _ in args.convs:
            x = torch.randn(args.batch, cin, size, size, device=dev)
            w = torch.randn(cout, cin, k, k, device=dev) * 0.05
            o = (size + 2 * (k // 2) - k) // stride + 1
            dy = torch.randn(args.batch, cout, o, o, device=dev)
            st, pad = [stride, stride], [k // 2, k // 2]

            def bwd(mask):
                return torch.ops.aten.convolution_backward(dy, x, w, None, st, pad, [1, 1], False, [0, 0], 1, mask)

            fwd_s = timed(lambda: F.conv2d(x, w, stride=stride, padding=k // 2))
            data_s = timed(lambda: bwd([True, False, False]))
            filt_s = timed(lambda: bwd([False, True, False]))
            out["conv_fwd_seconds"].append(fwd_s)
            out["conv_bwd_data_seconds"].append(data_s)
            out["conv_bwd_filter_seconds"].append(filt_s)
            out["conv_seconds"].append(fwd_s + data_s + filt_s)
    if args.bn:
        out["bn_seconds"] = bn_seconds(args, dev, timed)
    print(json.dumps(out))


def bn_seconds(args, dev, timed):
    """--bn: bench_ops's batch-norm cases. After each convolution, relu(F.batch_norm(x)) in training
    mode over its output (channels cout at its output size), as torchvision's ResNet runs it in
    eager mode: forward, and backward through autograd (the ReLU's and the batch-norm's), in NCHW
    and channels-last, float32 and bfloat16 activations with float32 weights and statistics.
    Returns {"nchw_f32_fwd": [seconds per convolution], ..., "nhwc_bf16_bwd": [...]}."""
    out = {}
    for fmt, memory_format in (("nchw", torch.contiguous_format), ("nhwc", torch.channels_last)):
        for dname, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            fwd, bwd = [], []
            for _, cout, size, k, stride, _ in args.convs:
                o = (size + 2 * (k // 2) - k) // stride + 1
                shape = (args.batch, cout, o, o)
                x = torch.randn(shape, device=dev).to(dtype).contiguous(memory_format=memory_format)
                dy = (torch.randn(shape, device=dev) * 0.1).to(dtype).contiguous(memory_format=memory_format)
                w = torch.ones(cout, device=dev, requires_grad=True)
                b = torch.zeros(cout, device=dev, requires_grad=True)
                rm, rv = torch.zeros(cout, device=dev), torch.ones(cout, device=dev)

                def forward(x=x, w=w, b=b, rm=rm, rv=rv):  # bound now: the del below frees them
                    return F.relu(F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5), inplace=True)
                with torch.no_grad():
                    fwd.append(timed(forward))
                x.requires_grad_(True)
                y = forward()
                bwd.append(timed(lambda x=x, w=w, b=b, y=y, dy=dy:
                                 torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)))
                del x, dy, y, forward
            out[f"{fmt}_{dname}_fwd"], out[f"{fmt}_{dname}_bwd"] = fwd, bwd
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gemm", default="2048", help="size, or comma-separated sizes (cuda; cpu uses the first)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in cuBLAS and cuDNN (cuda only)")
    ap.add_argument("--inner", type=int, default=1, help="calls per timed sample (cuda only)")
    ap.add_argument("--convs", type=parse_convs, required=True,
                    help="the convolutions, as bench_ops passes them: cin,cout,size,kernel,stride,count;...")
    ap.add_argument("--tuned", action="store_true",
                    help="channels-last convolutions; report the runtime's shortfalls (cpu only)")
    ap.add_argument("--bf16", action="store_true", help="under torch.autocast to bfloat16 (cpu only)")
    ap.add_argument("--bn", action="store_true",
                    help="also the batch-norm + ReLU after each convolution, forward and backward (cuda only)")
    args = ap.parse_args()
    if (args.tuned or args.bf16) and args.device != "cpu":
        raise SystemExit("bench_ops_torch.py: --tuned and --bf16 are for --device cpu")
    if args.bn and args.device != "cuda":
        raise SystemExit("bench_ops_torch.py: --bn is for --device cuda")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sizes = [int(v) for v in args.gemm.split(",")]
    if args.device == "cuda":
        main_cuda(args, sizes)
        return

    n = sizes[0]
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    bf16 = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.bf16 else contextlib.nullcontext

    def gemm():
        if not args.bf16:
            return torch.mm(a, b, out=c)
        with bf16():
            return torch.mm(a, b)
    s = median_seconds(args.repeats, gemm)
    out = {"torch_version": torch.__version__, "threads": args.threads, "bf16": args.bf16,
           "gemm_gflops": 2.0 * n ** 3 / s / 1e9, "conv_seconds": []}
    fmt = torch.channels_last if args.tuned else torch.contiguous_format
    for cin, cout, size, k, stride, _ in args.convs:
        x = torch.randn(args.batch, cin, size, size).contiguous(memory_format=fmt).requires_grad_()
        w = (torch.randn(cout, cin, k, k) * 0.05).contiguous(memory_format=fmt).requires_grad_()
        o = (size + 2 * (k // 2) - k) // stride + 1
        dy = torch.randn(args.batch, cout, o, o).contiguous(memory_format=fmt)

        def step():
            with bf16():
                y = F.conv2d(x, w, stride=stride, padding=k // 2)
            gx, gw = torch.autograd.grad(y, (x, w), dy.to(y.dtype))
            return gx, gw
        out["conv_seconds"].append(median_seconds(args.repeats, step))
    out["runtime"] = torch_runtime.runtime(args.tuned, "channels_last" if args.tuned else "contiguous (NCHW)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
