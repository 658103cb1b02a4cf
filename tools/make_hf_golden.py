#!/usr/bin/python3
"""Writes tests/golden/bert_hf.safetensors and bert_hf_heads.safetensors. The first: a small BERT with pre-training heads under Hugging
Face's names (BertForPreTraining's state dict: bert.embeddings.*, bert.encoder.layer.N.attention.
self.query, ..., bert.pooler.dense, cls.predictions.*, cls.seq_relationship; the int64
bert.embeddings.position_ids buffer and the tied cls.predictions.decoder.weight included, as HF
checkpoints have them), random f32 weights, a fixed batch, and the twin's float64 losses and
logits. The forward pass is written here against HF's module structure (BertSelfAttention,
BertSelfOutput, BertIntermediate, BertOutput, BertPooler, BertPreTrainingHeads), independently
of our nn/models/bert.cc and of its name mapping (nn/models/bert_hf.cc), so a wrong mapping shows
as a wrong loss in tests/nn/test_bert_hf.cc. No transformers package in Debian: on a lent GPU
machine with transformers, tools/gpu_test.sh compares with BertForPreTraining itself.
The second: the same encoder with BertForSequenceClassification's head (classifier.*, 3 classes)
and BertForQuestionAnswering's (qa_outputs.*), the classifier on mean pooling (model.pooling:
mean, ours alone), a batch with label / start_position /
end_position, each head's float64 logits and loss, and the gradients of each loss for a few
weights (the heads', the pooler's, layers' deep in the encoder, the word embeddings).

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


def encoder(W, sd, b):
    """BertModel in float64: the sequence output [B, S, H] and the pooled [CLS] [B, H]."""
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
    return x, torch.tanh(lin("bert.pooler.dense", x[:, 0]))


GRAD_OF = {"classification": ["classifier.weight", "classifier.bias", "bert.pooler.dense.weight",
                              "bert.encoder.layer.1.output.dense.weight",
                              "bert.encoder.layer.0.attention.self.query.weight",
                              "bert.embeddings.word_embeddings.weight"],
           # model.pooling: mean (ours alone; no HF model): the classifier on the mean of the
           # encoder's outputs over the attended tokens, no pooler.
           "classification_mean": ["classifier.weight", "classifier.bias",
                                   "bert.encoder.layer.1.output.dense.weight",
                                   "bert.encoder.layer.0.attention.self.key.weight",
                                   "bert.embeddings.word_embeddings.weight"],
           "question_answering": ["qa_outputs.weight", "qa_outputs.bias",
                                  "bert.encoder.layer.1.output.dense.weight",
                                  "bert.encoder.layer.0.attention.self.value.weight",
                                  "bert.embeddings.position_embeddings.weight"]}


def head_twins(sd, b):
    """Each head's logits, loss and gradients (BertForSequenceClassification with dropout off:
    classifier(pooled); the same classifier on the masked mean of the encoder's outputs;
    BertForQuestionAnswering: qa_outputs on every token, split into start
    and end logits [B, S], loss (CE(start) + CE(end)) / 2)."""
    out = []
    for head, names in GRAD_OF.items():
        W = {k: v.double().requires_grad_(k in names) for k, v in sd.items() if v.dtype == torch.float32}
        x, pooled = encoder(W, sd, b)
        if head.startswith("classification"):
            if head == "classification_mean":
                m = b["attention_mask"].double()[:, :, None]  # [B, S, 1]
                pooled = (x * m).sum(1) / m.sum(1)
            logits = pooled @ W["classifier.weight"].t() + W["classifier.bias"]
            loss = F.cross_entropy(logits, b["label"])
            out += [(f"twin/{head}_logits", logits.detach().float())]
        else:
            both = x @ W["qa_outputs.weight"].t() + W["qa_outputs.bias"]  # [B, S, 2]
            start, end = both[..., 0], both[..., 1]
            loss = (F.cross_entropy(start, b["start_position"]) + F.cross_entropy(end, b["end_position"])) / 2
            out += [("twin/start_logits", start.detach().float()), ("twin/end_logits", end.detach().float())]
        loss.backward()
        out += [(f"twin/{head}_loss", loss.detach().float().reshape(()))]
        out += [(f"twin/{head}_grad/{n}", W[n].grad.float()) for n in names]
    return out


def forward(sd, b):
    """BertForPreTraining in float64, module by module as HF writes it (post-LN, exact GELU,
    LayerNorm eps 1e-12, additive mask of the dtype's minimum... here -10000 as the original)."""
    W = {k: v.double() for k, v in sd.items() if v.dtype == torch.float32}
    h = C["hidden"]

    def lin(name, x):
        return x @ W[name + ".weight"].t() + W[name + ".bias"]

    def ln(name, x):
        return F.layer_norm(x, (h,), W[name + ".weight"], W[name + ".bias"], eps=1e-12)

    x, pooled = encoder(W, sd, b)
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

    # The task heads on the same encoder (no pre-training heads: a fine-tuning state dict).
    g = torch.Generator().manual_seed(11)
    hsd = {k: v for k, v in sd.items() if not k.startswith("cls.")}
    hsd["classifier.weight"] = (0.3 * torch.randn(3, C["hidden"], generator=g)).float()
    hsd["classifier.bias"] = (0.05 * torch.randn(3, generator=g)).float()
    hsd["qa_outputs.weight"] = (0.3 * torch.randn(2, C["hidden"], generator=g)).float()
    hsd["qa_outputs.bias"] = (0.05 * torch.randn(2, generator=g)).float()
    hb = {k: b[k] for k in ("input_ids", "segment_ids", "attention_mask")}
    hb["label"] = torch.tensor([2, 0])
    hb["start_position"] = torch.tensor([3, 0])  # the second: not in the window, at [CLS]
    hb["end_position"] = torch.tensor([5, 0])
    twins = head_twins(hsd, hb)
    path = os.path.join(args.out, "bert_hf_heads.safetensors")
    write_verified(path, list(hsd.items()) + [("batch/" + k, v) for k, v in hb.items()] + twins,
                   {"format_version": FORMAT_VERSION, "generator": "tools/make_hf_golden.py",
                    "torch_version": torch.__version__,
                    "model_config": MODEL_CONFIG.replace("nsp: true\n", "")})
    print(f"wrote {path}: " + ", ".join(f"{n} {float(v):.6f}" for n, v in twins if n.endswith("_loss")))


if __name__ == "__main__":
    main()
