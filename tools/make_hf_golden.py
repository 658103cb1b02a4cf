#!/usr/bin/python3
"""Writes tests/golden/bert_hf.safetensors: a small BERT with pre-training heads under Hugging
Face's names (BertForPreTraining's state dict: bert.embeddings.*, bert.encoder.layer.N.attention.
self.query, ..., bert.pooler.dense, cls.predictions.*, cls.seq_relationship; the int64
bert.embeddings.position_ids buffer and the tied cls.predictions.decoder.weight included, as HF
checkpoints have them), random f32 weights, a fixed batch, and the twin's float64 losses and
logits. The forward pass is written here against HF's module structure (BertSelfAttention,
BertSelfOutput, BertIntermediate, BertOutput, BertPooler, BertPreTrainingHeads), independently
of our nn/models/bert.cc and of its name mapping (nn/models/bert_hf.cc), so a wrong mapping shows
as a wrong loss in tests/nn/test_bert_hf.cc. No transformers package in Debian: on a lent GPU
machine with transformers, tools/gpu_test.sh compares with BertForPreTraining itself.

    /usr/bin/python3 tools/make_hf_golden.py [--out DIR]
"""
import argparse
import math
import os

import torch
import torch.nn.functional as F

from golden_io import write_verified

FORMAT_VERSION = "1"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C = dict(vocab=50, hidden=32, layers=2, heads=2, ffn=64, positions=16, types=2)
MODEL_CONFIG = ("name: bert\npreset: tiny\nvocab_size: 50\nhidden: 32\nlayers: 2\nheads: 2\n"
                "ffn: 64\nmax_positions: 16\ndropout: 0.0\nattention_dropout: 0.0\nnsp: true\n")


def weights(seed=7):
    g = torch.Generator().manual_seed(seed)
    h, f = C["hidden"], C["ffn"]
    sd = {}

    def rnd(*shape, std=0.2, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g)).float()

    def dense(name, fin, fout):
        sd[name + ".weight"] = rnd(fout, fin, std=1 / math.sqrt(fin))
        sd[name + ".bias"] = rnd(fout, std=0.05)

    def norm(name):
        sd[name + ".weight"] = rnd(h, std=0.1, mean=1.0)
        sd[name + ".bias"] = rnd(h, std=0.05)

    sd["bert.embeddings.word_embeddings.weight"] = rnd(C["vocab"], h, std=0.5)
    sd["bert.embeddings.position_embeddings.weight"] = rnd(C["positions"], h, std=0.5)
    sd["bert.embeddings.token_type_embeddings.weight"] = rnd(C["types"], h, std=0.5)
    norm("bert.embeddings.LayerNorm")
    sd["bert.embeddings.position_ids"] = torch.arange(C["positions"], dtype=torch.int64).view(1, -1)
    for i in range(C["layers"]):
        p = f"bert.encoder.layer.{i}"
        for part in ("query", "key", "value"):
            dense(f"{p}.attention.self.{part}", h, h)
        dense(f"{p}.attention.output.dense", h, h)
        norm(f"{p}.attention.output.LayerNorm")
        dense(f"{p}.intermediate.dense", h, f)
        dense(f"{p}.output.dense", f, h)
        norm(f"{p}.output.LayerNorm")
    dense("bert.pooler.dense", h, h)
    dense("cls.predictions.transform.dense", h, h)
    norm("cls.predictions.transform.LayerNorm")
    sd["cls.predictions.bias"] = rnd(C["vocab"], std=0.1)
    sd["cls.predictions.decoder.weight"] = sd["bert.embeddings.word_embeddings.weight"]  # tied
    dense("cls.seq_relationship", h, 2)
    return sd


def batch():
    ids = torch.tensor([[2, 17, 33, 5, 48, 3, 9, 21], [2, 40, 11, 3, 27, 6, 0, 0]])
    seg = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 0, 0]])
    mask = torch.tensor([[1] * 8, [1, 1, 1, 1, 1, 1, 0, 0]])
    labels = torch.full((2, 8), -100, dtype=torch.int64)
    labels[0, 2], labels[0, 5], labels[1, 1], labels[1, 4] = 12, 3, 40, 7
    nsp = torch.tensor([1, 0])
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": mask, "labels": labels,
            "nsp_label": nsp}


def forward(sd, b):
    """BertForPreTraining in float64, module by module as HF writes it (post-LN, exact GELU,
    LayerNorm eps 1e-12, additive mask of the dtype's minimum... here -10000 as the original)."""
    W = {k: v.double() for k, v in sd.items() if v.dtype == torch.float32}
    h, nh = C["hidden"], C["heads"]
    hd = h // nh
    ids, seg, mask = b["input_ids"], b["segment_ids"], b["attention_mask"]
    B, S = ids.shape

    def lin(name, x):
        return x @ W[name + ".weight"].t() + W[name + ".bias"]

    def ln(name, x):
        return F.layer_norm(x, (h,), W[name + ".weight"], W[name + ".bias"], eps=1e-12)

    pos = sd["bert.embeddings.position_ids"][:, :S]
    x = (W["bert.embeddings.word_embeddings.weight"][ids] +
         W["bert.embeddings.position_embeddings.weight"][pos] +
         W["bert.embeddings.token_type_embeddings.weight"][seg])
    x = ln("bert.embeddings.LayerNorm", x)
    ext = (1.0 - mask[:, None, None, :].double()) * -10000.0
    for i in range(C["layers"]):
        p = f"bert.encoder.layer.{i}"

        def heads(t):
            return t.view(B, S, nh, hd).permute(0, 2, 1, 3)
        q, k, v = (heads(lin(f"{p}.attention.self.{n}", x)) for n in ("query", "key", "value"))
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + ext, dim=-1)
        ctx = (probs @ v).permute(0, 2, 1, 3).reshape(B, S, h)
        attn = ln(f"{p}.attention.output.LayerNorm", lin(f"{p}.attention.output.dense", ctx) + x)
        inter = F.gelu(lin(f"{p}.intermediate.dense", attn))
        x = ln(f"{p}.output.LayerNorm", lin(f"{p}.output.dense", inter) + attn)
    pooled = torch.tanh(lin("bert.pooler.dense", x[:, 0]))
    t = ln("cls.predictions.transform.LayerNorm", F.gelu(lin("cls.predictions.transform.dense", x)))
    prediction = t @ W["cls.predictions.decoder.weight"].t() + W["cls.predictions.bias"]
    relationship = lin("cls.seq_relationship", pooled)
    mlm = F.cross_entropy(prediction.view(-1, C["vocab"]), b["labels"].view(-1), ignore_index=-100)
    nsp = F.cross_entropy(relationship, b["nsp_label"])
    return prediction, relationship, mlm, nsp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden"))
    args = ap.parse_args()
    sd = weights()
    b = batch()
    prediction, relationship, mlm, nsp = forward(sd, b)
    tensors = [(k, v) for k, v in sd.items()]
    tensors += [("batch/" + k, v) for k, v in b.items()]
    tensors += [("twin/prediction_logits", prediction.float()), ("twin/seq_relationship_logits", relationship.float()),
                ("twin/mlm_loss", mlm.float().reshape(())), ("twin/nsp_loss", nsp.float().reshape(()))]
    meta = {"format_version": FORMAT_VERSION, "generator": "tools/make_hf_golden.py",
            "torch_version": torch.__version__, "model_config": MODEL_CONFIG,
            "twin_loss_f64": repr(float(mlm + nsp))}
    path = os.path.join(args.out, "bert_hf.safetensors")
    write_verified(path, tensors, meta)
    print(f"wrote {path}: loss {float(mlm + nsp):.6f} (mlm {float(mlm):.6f}, nsp {float(nsp):.6f})")


if __name__ == "__main__":
    main()
