#!/usr/bin/python3
"""The PyTorch twins of bench_step --device cuda compute what the eager twin computes: the SDPA
BERT layer (tools/bench_step_torch.py SdpaLayer) equals nn.TransformerEncoderLayer with the same
weights (forward and the input's gradient, dropout off), and SdpaBert has the eager Bert's
parameters; every model bench_step accepts has a twin of its size. Debian's torch 1.13 has no
F.scaled_dot_product_attention: the test gives the module the textbook softmax(QK^T / sqrt(d)) V
in its place (a newer torch's own is used where present), so the layer's reshapes, projections
and residual order are what is checked. Runs on the CPU."""
import json
import math
import os
import re
import subprocess
import sys
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if not hasattr(F, "scaled_dot_product_attention"):
    def reference_sdpa(q, k, v, dropout_p=0.0):
        assert dropout_p == 0.0
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v
    F.scaled_dot_product_attention = reference_sdpa

import bench_ops_torch  # noqa: E402
import bench_step_torch as twin  # noqa: E402


class SdpaTwin(unittest.TestCase):
    def test_layer_equals_transformer_encoder_layer(self):
        torch.manual_seed(0)
        hidden, heads, ffn = 64, 4, 128
        ref = nn.TransformerEncoderLayer(hidden, heads, ffn, 0.1, activation="gelu", batch_first=True,
                                         norm_first=False, layer_norm_eps=1e-12).double()
        ours = twin.SdpaLayer(hidden, heads, ffn).double()
        with torch.no_grad():
            ours.qkv.weight.copy_(ref.self_attn.in_proj_weight)
            ours.qkv.bias.copy_(ref.self_attn.in_proj_bias)
            ours.out.load_state_dict(ref.self_attn.out_proj.state_dict())
            ours.ffn1.load_state_dict(ref.linear1.state_dict())
            ours.ffn2.load_state_dict(ref.linear2.state_dict())
            ours.ln1.load_state_dict(ref.norm1.state_dict())
            ours.ln2.load_state_dict(ref.norm2.state_dict())
        ref.eval()
        ours.eval()
        x = torch.randn(3, 10, hidden, dtype=torch.double, requires_grad=True)
        y_ref = ref(x)
        (g_ref,) = torch.autograd.grad(y_ref.square().sum(), x)
        y = ours(x)
        (g,) = torch.autograd.grad(y.square().sum(), x)
        # Double precision, same operations in another grouping: agreement to rounding.
        self.assertLess((y - y_ref).abs().max().item(), 1e-12)
        self.assertLess((g - g_ref).abs().max().item(), 1e-10)

    def test_bert_twins_have_the_same_parameters(self):
        eager, sdpa = twin.Bert(2, 64, 4, 128), twin.SdpaBert(2, 64, 4, 128)
        self.assertEqual(sorted(p.numel() for p in eager.parameters()),
                         sorted(p.numel() for p in sdpa.parameters()))
        ids = torch.arange(2 * 16).reshape(2, 16) % 300 + 1
        labels = torch.where(ids % 7 == 3, ids, torch.full_like(ids, -100))
        sdpa.eval()
        self.assertTrue(torch.isfinite(sdpa(ids, labels)))


class ModelsOfBenchStep(unittest.TestCase):
    """bench_step's --model list against the twin's: a model the twin lacks makes bench_step print
    "the twin failed" instead of a ratio. The binaries are named by ADA_BENCH_STEP and
    ADA_DESCRIBE_MODEL (CTest sets both)."""

    @staticmethod
    def binary(var):
        exe = os.environ.get(var)
        if not exe:
            raise AssertionError(f"{var} is not set: name the binary in build/bin (CTest sets it)")
        return exe

    def test_the_twin_knows_every_model_of_bench_step(self):
        out = subprocess.run([self.binary("ADA_BENCH_STEP"), "--model", "no-such-model"], capture_output=True,
                             text=True)
        m = re.search(r"known: ([a-z0-9_, ]+)", out.stdout + out.stderr)
        self.assertIsNotNone(m, f"bench_step did not list its models: {out.stdout}{out.stderr}")
        ours = {name.strip() for name in m.group(1).split(",")}
        self.assertEqual(ours, set(twin.CNN_MODELS) | set(twin.BERT_PRESETS))

    def test_bert_twins_have_our_presets_parameter_counts(self):
        describe = self.binary("ADA_DESCRIBE_MODEL")
        for model in ("bert_tiny", "bert_mini"):
            out = subprocess.run([describe, "bert", "preset=" + model[len("bert_"):]], capture_output=True,
                                 text=True, check=True).stdout
            ours = int(re.search(r"total parameters: (\d+)", out).group(1))
            self.assertEqual(sum(p.numel() for p in twin.Bert(*twin.BERT_PRESETS[model]).parameters()), ours,
                             model)

    def test_the_small_models_twins_train_a_step(self):
        script = os.path.join(os.path.dirname(os.path.abspath(twin.__file__)), "bench_step_torch.py")
        for model in ("lenet5", "resnet20_mnist", "bert_tiny"):
            out = subprocess.run([sys.executable, script, "--model", model, "--batch", "2", "--steps", "1",
                                  "--seq", "8"], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, f"{model}: {out.stderr}")
            self.assertGreater(json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"], 0, model)


class BatchNormTwin(unittest.TestCase):
    def test_bn_cases_time_every_convolutions_batch_norm_under_the_keys_bench_ops_reads(self):
        # bench_ops --device cuda --bn reads bn_seconds[<nchw|nhwc>_<f32|bf16>_<fwd|bwd>], one
        # figure per convolution of its set (else it prints n/a); here on the CPU, a small set.
        convs = [(3, 8, 16, 3, 2, 1), (8, 16, 8, 1, 1, 2)]
        args = types.SimpleNamespace(batch=2, convs=convs, repeats=1)
        got = bench_ops_torch.bn_seconds(args, torch.device("cpu"),
                                         lambda f: bench_ops_torch.median_seconds(1, f))
        keys = {f"{fmt}_{dt}_{p}" for fmt in ("nchw", "nhwc") for dt in ("f32", "bf16") for p in ("fwd", "bwd")}
        self.assertEqual(set(got), keys)
        for k, v in got.items():
            self.assertEqual(len(v), len(convs), k)
            self.assertTrue(all(t > 0 for t in v), k)


if __name__ == "__main__":
    unittest.main()
