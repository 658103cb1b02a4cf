#!/usr/bin/python3
"""Writes the optimizer golden files tests/golden/optim_*.safetensors from PyTorch's optimizers.

Run from anywhere with the system interpreter (the python3 first on PATH may lack torch):

    /usr/bin/python3 tools/make_optim_golden.py            # writes tests/golden/optim_*.safetensors
    /usr/bin/python3 tools/make_optim_golden.py --out DIR  # writes them elsewhere (e.g. to diff)

Each case runs torch.optim.SGD / Adam / AdamW for STEPS steps on three parameters:
`fc.weight` [3,5] and `emb.weight` [4,3] (decayed) and `fc.bias` [5] (a param group with
weight_decay 0, as Adatrain's Param::weight_decay == false). `emb.weight` gets no gradient
(grad None) at step 2, so the files also pin down that such a parameter is untouched and that its
per-parameter step count (Adam's bias correction) does not advance. The LR changes every step, as
a schedule would set it. Inputs (initial values, gradients, LRs) are drawn in float64 from a
generator seeded by the case name and rounded to f32; torch runs in float64 from those rounded
values (so the only error left is the rounding of each stored result to f32), and the script
checks torch's result against its own float64 formula of the update.

Files are written by hand in the safetensors layout (as tools/make_golden.py: no safetensors
package). Tensors (f32): `lr` [STEPS]; `init.<param>`; `grad.<k>.<param>` (absent where the
parameter has no gradient at step k); `after.<k>.<param>` (the value after step k). Metadata:
format_version, generator, torch_version, case, optimizer (registry name), `config` (the YAML
optimizer section the C++ test builds the optimizer from), params (comma-separated, in order),
no_decay (comma-separated), steps. Read by tests/optim/test_optim_golden.cc, which checks
FORMAT_VERSION: bump both together when names, shapes or meaning change.
"""
import argparse
import os
import sys
import zlib

import numpy as np
import torch

from golden_io import write_verified

FORMAT_VERSION = "1"
GENERATOR = "tools/make_optim_golden.py"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F64 = torch.float64
STEPS = 6
NO_GRAD_STEP = 2          # emb.weight has no gradient at this step
PARAMS = [("fc.weight", (3, 5), True), ("fc.bias", (5,), False), ("emb.weight", (4, 3), True)]
GRAD_SCALES = [1.0, 0.1, 3.0, 1.0, 0.01, 2.0]  # gradients of very different sizes across steps

# name, optimizer, hyper-parameters (registry spelling), per-step LRs
CASES = [
    ("optim_sgd_momentum", "sgd", {"momentum": 0.9, "weight_decay": 0.0, "nesterov": False},
     [0.1, 0.05, 0.2, 0.1, 0.025, 0.1]),
    ("optim_sgd_momentum_wd", "sgd", {"momentum": 0.9, "weight_decay": 0.05, "nesterov": False},
     [0.1, 0.05, 0.2, 0.1, 0.025, 0.1]),
    ("optim_sgd_nesterov_wd", "sgd", {"momentum": 0.8, "weight_decay": 0.05, "nesterov": True},
     [0.1, 0.05, 0.2, 0.1, 0.025, 0.1]),
    ("optim_sgd_plain_wd", "sgd", {"momentum": 0.0, "weight_decay": 0.05, "nesterov": False},
     [0.1, 0.05, 0.2, 0.1, 0.025, 0.1]),
    ("optim_adam", "adam", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0},
     [0.01, 0.005, 0.02, 0.01, 0.0025, 0.01]),
    ("optim_adam_l2", "adam", {"beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.1},
     [0.01, 0.005, 0.02, 0.01, 0.0025, 0.01]),
    ("optim_adamw", "adamw", {"beta1": 0.8, "beta2": 0.95, "eps": 1e-6, "weight_decay": 0.1},
     [0.01, 0.005, 0.02, 0.01, 0.0025, 0.01]),
]


# ---- helpers ------------------------------------------------------------------------------------
def gen_for(case):
    g = torch.Generator()
    g.manual_seed(zlib.crc32(case.encode("utf-8")))
    return g


def randn(g, *shape, scale=1.0):
    """f32-representable float64 values."""
    return (torch.randn(*shape, generator=g, dtype=F64) * scale).float().double()


def f32_value(x):
    return float(np.float32(x))


def yaml_config(opt, hp, lr):
    lines = [f"name: {opt}", f"lr: {lr!r}"]
    for k, v in hp.items():
        lines.append(f"{k}: {str(v).lower() if isinstance(v, bool) else repr(v)}")
    return "\n".join(lines) + "\n"


# ---- independent float64 reference (the formulas of optim/*.h, not torch) ---------------------
def reference(opt, hp, init, grads, lrs):
    """Returns after[k][name] as float64 numpy arrays."""
    w = {n: init[n].numpy().copy() for n, _, _ in PARAMS}
    state = {n: {"t": 0} for n, _, _ in PARAMS}
    out = []
    for k in range(STEPS):
        lr = lrs[k]
        for n, _, decay in PARAMS:
            if grads[k].get(n) is None:
                continue
            g = grads[k][n].numpy()
            wd = hp["weight_decay"] if decay else 0.0
            s = state[n]
            s["t"] += 1
            if opt == "sgd":
                gp = g + wd * w[n]
                mu = hp["momentum"]
                if mu == 0:
                    w[n] = w[n] - lr * gp
                    continue
                s["v"] = gp.copy() if s["t"] == 1 else mu * s["v"] + gp
                step = gp + mu * s["v"] if hp["nesterov"] else s["v"]
                w[n] = w[n] - lr * step
            else:
                b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
                gp = g + wd * w[n] if opt == "adam" else g
                if opt == "adamw":
                    w[n] = w[n] * (1 - lr * wd)
                s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * gp
                s["v"] = b2 * s.get("v", 0.0) + (1 - b2) * gp * gp
                mhat = s["m"] / (1 - b1 ** s["t"])
                vhat = s["v"] / (1 - b2 ** s["t"])
                w[n] = w[n] - lr * mhat / (np.sqrt(vhat) + eps)
        out.append({n: w[n].copy() for n in w})
    return out


# ---- one case -----------------------------------------------------------------------------------
def run_case(name, opt, hp, lrs_in, dtype):
    g = gen_for(name)
    lrs = [f32_value(x) for x in lrs_in]
    init = {n: randn(g, *shape) for n, shape, _ in PARAMS}
    grads = []
    for k in range(STEPS):
        grads.append({n: (None if (n == "emb.weight" and k == NO_GRAD_STEP)
                          else randn(g, *shape, scale=GRAD_SCALES[k]))
                      for n, shape, _ in PARAMS})

    params = {n: init[n].clone().to(dtype).requires_grad_(True) for n, _, _ in PARAMS}
    decayed = [params[n] for n, _, d in PARAMS if d]
    plain = [params[n] for n, _, d in PARAMS if not d]
    groups = [{"params": decayed, "weight_decay": hp["weight_decay"]},
              {"params": plain, "weight_decay": 0.0}]
    if opt == "sgd":
        o = torch.optim.SGD(groups, lr=lrs[0], momentum=hp["momentum"], nesterov=hp["nesterov"])
    elif opt == "adam":
        o = torch.optim.Adam(groups, lr=lrs[0], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    else:
        o = torch.optim.AdamW(groups, lr=lrs[0], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    after = []
    for k in range(STEPS):
        for group in o.param_groups:
            group["lr"] = lrs[k]
        for n, _, _ in PARAMS:
            gk = grads[k][n]
            params[n].grad = None if gk is None else gk.clone().to(dtype)
        o.step()
        after.append({n: params[n].detach().clone() for n, _, _ in PARAMS})
    return lrs, init, grads, after


def make_case(name, opt, hp, lrs_in):
    lrs, init, grads, after = run_case(name, opt, hp, lrs_in, F64)
    # Independent check of torch's float64 result against the formulas.
    ref = reference(opt, hp, init, grads, lrs)
    for k in range(STEPS):
        for n, _, _ in PARAMS:
            err = np.abs(after[k][n].numpy() - ref[k][n]).max()
            if not err <= 1e-12:
                raise AssertionError(f"{name}: torch and the reference differ by {err:g} at "
                                     f"step {k}, {n}")
    # How far torch's own f32 run is from the float64 result (reported, for the test tolerance).
    _, _, _, after32 = run_case(name, opt, hp, lrs_in, torch.float32)
    f32_err = max((after32[k][n].double() - after[k][n]).abs().max().item()
                  for k in range(STEPS) for n, _, _ in PARAMS)

    tensors = [("lr", torch.tensor(lrs, dtype=torch.float32))]
    tensors += [(f"init.{n}", init[n].float()) for n, _, _ in PARAMS]
    for k in range(STEPS):
        for n, _, _ in PARAMS:
            if grads[k][n] is not None:
                tensors.append((f"grad.{k}.{n}", grads[k][n].float()))
    for k in range(STEPS):
        for n, _, _ in PARAMS:
            tensors.append((f"after.{k}.{n}", after[k][n].float()))
    # emb.weight must be untouched by the step where it has no gradient.
    assert torch.equal(after[NO_GRAD_STEP]["emb.weight"], after[NO_GRAD_STEP - 1]["emb.weight"])
    meta = {"optimizer": opt, "config": yaml_config(opt, hp, lrs[0]),
            "params": ",".join(n for n, _, _ in PARAMS),
            "no_decay": ",".join(n for n, _, d in PARAMS if not d), "steps": STEPS}
    return tensors, meta, f32_err


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden"),
                    help="output folder (default: tests/golden of this checkout)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    total = 0
    for name, opt, hp, lrs in CASES:
        tensors, meta, f32_err = make_case(name, opt, hp, lrs)
        for tname, t in tensors:
            if not torch.isfinite(t).all():
                raise AssertionError(f"{name}: {tname} is not finite")
        full_meta = {"format_version": FORMAT_VERSION, "generator": GENERATOR,
                     "torch_version": torch.__version__, "case": name}
        full_meta.update(meta)
        path = os.path.join(args.out, name + ".safetensors")
        size = write_verified(path, tensors, full_meta)
        total += size
        print(f"{path}: {len(tensors)} tensors, {size} bytes; torch f32 vs f64: {f32_err:.2e}")
    print(f"torch {torch.__version__}; {total} bytes in all", file=sys.stderr)


if __name__ == "__main__":
    main()
