#!/usr/bin/python3
"""Writes the op-level golden files of tests/golden/ from PyTorch (Debian's python3-torch).

Run from anywhere with the system interpreter (the python3 first on PATH may lack torch):

    /usr/bin/python3 tools/make_golden.py            # writes tests/golden/*.safetensors
    /usr/bin/python3 tools/make_golden.py --out DIR  # writes them elsewhere (e.g. to diff)

Every case draws its inputs from its own seeded torch.Generator, rounds them to f32, computes the
reference in float64 from those rounded values (so the only error left is the rounding of the
stored result to f32), and stores inputs, parameters, the upstream gradient dy, outputs and
gradients as f32 (class targets as i64). Files are written by hand in the safetensors layout
(no safetensors package): 8-byte little-endian header length, JSON header padded with spaces to a
multiple of 8, raw little-endian data. Output is byte-for-byte deterministic for one torch build.

Bump FORMAT_VERSION whenever a file's names, shapes or meaning change; tests/core/test_golden.cc
checks it and must be updated in the same change.
"""
import argparse
import os
import sys
import zlib

import torch
import torch.nn.functional as F

from golden_io import write_verified

FORMAT_VERSION = "1"
GENERATOR = "tools/make_golden.py"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F64 = torch.float64


# ---- helpers ------------------------------------------------------------------------------------
def gen_for(case):
    """A generator seeded from the case name, so adding a case does not change the others."""
    g = torch.Generator()
    g.manual_seed(zlib.crc32(case.encode("utf-8")))
    return g


def randn(g, *shape, scale=1.0, shift=0.0):
    """f32-representable float64 values: drawn in f64, rounded to f32, widened back."""
    return (torch.randn(*shape, generator=g, dtype=F64) * scale + shift).float().double()


def f32(t):
    return t.detach().float()


def leaf(t):
    return t.clone().requires_grad_(True)


def check_close(name, a, b, tol=1e-10):
    """Self-check of the reference against an independent formula (both float64)."""
    err = (a - b).abs().max().item()
    if not err <= tol * (1.0 + b.abs().max().item()):
        raise AssertionError(f"self-check {name}: max |diff| {err:g}")


# ---- cases --------------------------------------------------------------------------------------
CONV_CASES = [
    # name, N, Cin, Cout, H, W, (kh, kw), (sh, sw), (ph, pw), (dh, dw)
    ("conv2d_3x3_s1_p1", 2, 3, 4, 9, 7, (3, 3), (1, 1), (1, 1), (1, 1)),
    ("conv2d_3x3_s2_p1", 2, 3, 4, 9, 7, (3, 3), (2, 2), (1, 1), (1, 1)),
    ("conv2d_1x1_s1", 2, 5, 3, 9, 7, (1, 1), (1, 1), (0, 0), (1, 1)),
    ("conv2d_1x1_s2", 2, 5, 3, 9, 7, (1, 1), (2, 2), (0, 0), (1, 1)),
    ("conv2d_7x7_s2_p3", 2, 3, 4, 9, 7, (7, 7), (2, 2), (3, 3), (1, 1)),
    ("conv2d_k3x2_s2x1_p1x0_d2", 2, 3, 5, 9, 7, (3, 2), (2, 1), (1, 0), (2, 2)),
]


def conv_case(name, n, cin, cout, h, w, k, s, p, d):
    g = gen_for(name)
    x = randn(g, n, cin, h, w)
    wt = randn(g, cout, cin, k[0], k[1], scale=(cin * k[0] * k[1]) ** -0.5)
    xl, wl = leaf(x), leaf(wt)
    y = F.conv2d(xl, wl, None, stride=s, padding=p, dilation=d)
    dy = randn(g, *y.shape)
    dx, dw = torch.autograd.grad(y, (xl, wl), dy)
    # Independent check: backward-data/filter as the torch.nn.grad helpers compute them.
    check_close(name + " dx", dx, torch.nn.grad.conv2d_input(x.shape, wt, dy, s, p, d))
    check_close(name + " dw", dw, torch.nn.grad.conv2d_weight(x, wt.shape, dy, s, p, d))
    meta = {"op": "conv2d", "stride_h": s[0], "stride_w": s[1], "pad_h": p[0], "pad_w": p[1],
            "dil_h": d[0], "dil_w": d[1]}
    return [("x", f32(x)), ("w", f32(wt)), ("dy", f32(dy)), ("y", f32(y)), ("dx", f32(dx)),
            ("dw", f32(dw))], meta


def batch_norm_train_case(name):
    g = gen_for(name)
    n, c, h, w = 3, 4, 5, 3  # 45 values per channel: unbiased/biased variance differ by 2.3%
    eps, momentum = 1e-5, 0.1
    x = randn(g, n, c, h, w, scale=2.0, shift=3.0)
    gamma = randn(g, c, scale=0.5, shift=1.0)
    beta = randn(g, c, scale=0.5)
    rm0 = randn(g, c, scale=0.3)
    rv0 = (torch.rand(c, generator=g, dtype=F64) + 0.5).float().double()
    rm, rv = rm0.clone(), rv0.clone()
    xl, gl, bl = leaf(x), leaf(gamma), leaf(beta)
    y = F.batch_norm(xl, rm, rv, gl, bl, training=True, momentum=momentum, eps=eps)
    dy = randn(g, *y.shape)
    dx, dgamma, dbeta = torch.autograd.grad(y, (xl, gl, bl), dy)
    mean = x.mean(dim=(0, 2, 3))
    var_b = x.var(dim=(0, 2, 3), unbiased=False)
    invstd = 1.0 / torch.sqrt(var_b + eps)
    m = n * h * w
    check_close(name + " running_mean", rm, (1 - momentum) * rm0 + momentum * mean)
    check_close(name + " running_var", rv, (1 - momentum) * rv0 + momentum * var_b * m / (m - 1))
    xhat = (x - mean.view(1, c, 1, 1)) * invstd.view(1, c, 1, 1)
    check_close(name + " y", y, xhat * gamma.view(1, c, 1, 1) + beta.view(1, c, 1, 1))
    meta = {"op": "batch_norm_train", "eps": repr(eps), "momentum": repr(momentum)}
    return [("x", f32(x)), ("gamma", f32(gamma)), ("beta", f32(beta)),
            ("running_mean_in", f32(rm0)), ("running_var_in", f32(rv0)), ("dy", f32(dy)),
            ("y", f32(y)), ("save_mean", f32(mean)), ("save_invstd", f32(invstd)),
            ("running_mean_out", f32(rm)), ("running_var_out", f32(rv)), ("dx", f32(dx)),
            ("dgamma", f32(dgamma)), ("dbeta", f32(dbeta))], meta


def batch_norm_eval_case(name):
    g = gen_for(name)
    n, c, h, w = 3, 4, 5, 3
    eps = 1e-5
    x = randn(g, n, c, h, w, scale=2.0, shift=1.0)
    gamma = randn(g, c, scale=0.5, shift=1.0)
    beta = randn(g, c, scale=0.5)
    rm = randn(g, c, scale=0.5, shift=1.0)
    rv = (torch.rand(c, generator=g, dtype=F64) * 3.0 + 0.5).float().double()
    rm_before, rv_before = rm.clone(), rv.clone()
    xl, gl, bl = leaf(x), leaf(gamma), leaf(beta)
    y = F.batch_norm(xl, rm, rv, gl, bl, training=False, momentum=0.1, eps=eps)
    assert torch.equal(rm, rm_before) and torch.equal(rv, rv_before)
    dy = randn(g, *y.shape)
    dx, dgamma, dbeta = torch.autograd.grad(y, (xl, gl, bl), dy)
    inv = (1.0 / torch.sqrt(rv + eps)).view(1, c, 1, 1)
    check_close(name + " dx", dx, dy * gamma.view(1, c, 1, 1) * inv)
    meta = {"op": "batch_norm_eval", "eps": repr(eps)}
    return [("x", f32(x)), ("gamma", f32(gamma)), ("beta", f32(beta)),
            ("running_mean", f32(rm)), ("running_var", f32(rv)), ("dy", f32(dy)),
            ("y", f32(y)), ("dx", f32(dx)), ("dgamma", f32(dgamma)), ("dbeta", f32(dbeta))], meta


def layer_norm_case(name, eps):
    g = gen_for("layer_norm")  # both eps files share inputs: they differ only through eps
    lead, d = (2, 3), 37  # D not a multiple of a SIMD width
    # Per-row scale and shift: the 0.01-scale row has variance 1e-4, so eps=1e-5 changes its
    # output by ~5% (the two eps files differ there) while eps=1e-12 leaves it unchanged.
    scale = torch.tensor([1.0, 0.01, 5.0, 0.3, 2.0, 1.0], dtype=F64).view(2, 3, 1)
    shift = torch.tensor([0.0, 0.5, -2.0, 1.0, 0.0, -0.3], dtype=F64).view(2, 3, 1)
    x = (torch.randn(*lead, d, generator=g, dtype=F64) * scale + shift).float().double()
    gamma = randn(g, d, scale=0.5, shift=1.0)
    beta = randn(g, d, scale=0.5)
    xl, gl, bl = leaf(x), leaf(gamma), leaf(beta)
    y = F.layer_norm(xl, (d,), gl, bl, eps=eps)
    dy = randn(g, *y.shape)
    dx, dgamma, dbeta = torch.autograd.grad(y, (xl, gl, bl), dy)
    mean = x.mean(dim=-1)
    rstd = 1.0 / torch.sqrt(x.var(dim=-1, unbiased=False) + eps)
    check_close(name + " y", y, (x - mean[..., None]) * rstd[..., None] * gamma + beta)
    meta = {"op": "layer_norm", "eps": repr(eps)}
    return [("x", f32(x)), ("gamma", f32(gamma)), ("beta", f32(beta)), ("dy", f32(dy)),
            ("y", f32(y)), ("save_mean", f32(mean)), ("save_rstd", f32(rstd)), ("dx", f32(dx)),
            ("dgamma", f32(dgamma)), ("dbeta", f32(dbeta))], meta


def cross_entropy_case(name, label_smoothing):
    g = gen_for("cross_entropy")  # both smoothing files share inputs
    n, c = 8, 10
    ignore_index = -100
    logits = randn(g, n, c, scale=3.0)
    logits[3] += 100.0  # large logits: a kernel without max-subtraction overflows
    logits = logits.float().double()
    targets = torch.randint(0, c, (n,), generator=g, dtype=torch.int64)
    targets[2] = ignore_index
    targets[5] = ignore_index
    dloss = 0.75  # upstream gradient of the scalar loss
    ll = leaf(logits)
    loss = F.cross_entropy(ll, targets, ignore_index=ignore_index, reduction="mean",
                           label_smoothing=label_smoothing)
    (dlogits,) = torch.autograd.grad(loss, ll, torch.tensor(dloss, dtype=F64))
    # Independent check of the documented semantics (core/ops.h).
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe_t = torch.where(keep, targets, torch.zeros_like(targets))
    nll = -logp.gather(1, safe_t[:, None])[:, 0]
    per_row = (1 - label_smoothing) * nll + label_smoothing * (-logp).mean(dim=-1)
    check_close(name + " loss", loss, per_row[keep].sum() / keep.sum())
    meta = {"op": "cross_entropy", "label_smoothing": repr(label_smoothing),
            "ignore_index": ignore_index, "reduction": "mean"}
    return [("logits", f32(logits)), ("targets", targets), ("dloss", f32(torch.tensor(dloss))),
            ("loss", f32(loss)), ("logp", f32(logp)), ("dlogits", f32(dlogits))], meta


def softmax_input(g):
    x = randn(g, 2, 3, 13)
    x[0, 0] += 100.0  # exp overflows in f32 without max-subtraction
    x[0, 1] -= 100.0  # every exp underflows in f32 without max-subtraction
    x[1, 0] *= 20.0   # a wide row: some probabilities are tiny, log-probabilities near -100
    return x.float().double()


def softmax_case(name, log):
    g = gen_for(name)
    x = softmax_input(g)
    xl = leaf(x)
    y = torch.log_softmax(xl, dim=-1) if log else torch.softmax(xl, dim=-1)
    dy = randn(g, *y.shape)
    (dx,) = torch.autograd.grad(y, xl, dy)
    if log:
        check_close(name + " dx", dx, dy - torch.exp(y) * dy.sum(-1, keepdim=True))
    else:
        check_close(name + " dx", dx, y * (dy - (dy * y).sum(-1, keepdim=True)))
    meta = {"op": "log_softmax" if log else "softmax", "dim": -1}
    return [("x", f32(x)), ("dy", f32(dy)), ("y", f32(y)), ("dx", f32(dx))], meta


def gelu_case(name):
    g = gen_for(name)
    # A grid over [-8, 8] (covers x ~ -2.7 and ~2.0 where the tanh approximation is furthest
    # from the erf form) plus random points; 201 values in all.
    grid = torch.linspace(-8.0, 8.0, 161, dtype=F64)
    x = torch.cat([grid, torch.randn(40, generator=g, dtype=F64) * 2.0]).view(3, 67)
    x = x.float().double()
    xl = leaf(x)
    y = F.gelu(xl)  # approximate='none': x * Phi(x)
    dy = randn(g, *y.shape)
    (dx,) = torch.autograd.grad(y, xl, dy)
    phi = torch.exp(-0.5 * x * x) / (2.0 * torch.pi) ** 0.5
    cdf = 0.5 * torch.erfc(-x / 2.0 ** 0.5)
    check_close(name + " y", y, x * cdf)
    check_close(name + " dx", dx, dy * (cdf + x * phi))
    meta = {"op": "gelu", "approximate": "none"}
    return [("x", f32(x)), ("dy", f32(dy)), ("y", f32(y)), ("dx", f32(dx))], meta


def all_cases():
    for c in CONV_CASES:
        yield c[0], lambda c=c: conv_case(*c)
    yield "batch_norm_train", lambda: batch_norm_train_case("batch_norm_train")
    yield "batch_norm_eval", lambda: batch_norm_eval_case("batch_norm_eval")
    yield "layer_norm_eps1e-5", lambda: layer_norm_case("layer_norm_eps1e-5", 1e-5)
    yield "layer_norm_eps1e-12", lambda: layer_norm_case("layer_norm_eps1e-12", 1e-12)
    yield "cross_entropy_ls0.1", lambda: cross_entropy_case("cross_entropy_ls0.1", 0.1)
    yield "cross_entropy_ls0.0", lambda: cross_entropy_case("cross_entropy_ls0.0", 0.0)
    yield "softmax", lambda: softmax_case("softmax", log=False)
    yield "log_softmax", lambda: softmax_case("log_softmax", log=True)
    yield "gelu", lambda: gelu_case("gelu")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden"),
                    help="output folder (default: tests/golden of this checkout)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    total = 0
    for name, make in all_cases():
        tensors, meta = make()
        for tname, t in tensors:
            if t.dtype == torch.float32 and not torch.isfinite(t).all():
                raise AssertionError(f"{name}: {tname} is not finite")
        full_meta = {"format_version": FORMAT_VERSION, "generator": GENERATOR,
                     "torch_version": torch.__version__, "case": name}
        full_meta.update(meta)
        path = os.path.join(args.out, name + ".safetensors")
        size = write_verified(path, tensors, full_meta)
        total += size
        print(f"{path}: {len(tensors)} tensors, {size} bytes")
    print(f"torch {torch.__version__}; {total} bytes in all", file=sys.stderr)


if __name__ == "__main__":
    main()
