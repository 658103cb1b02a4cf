#!/usr/bin/env python3
"""Our BERT's Hugging Face twin against transformers itself (run by tools/gpu_test.sh interop on a
machine that has transformers; Debian has none): BertForPreTraining on tests/golden/bert_hf gives
the twin's MLM and NSP losses, and BertForSequenceClassification (3 labels) and
BertForQuestionAnswering on tests/golden/bert_hf_heads give the twin's logits — the twin's
numbers tests/nn/test_bert_hf.cc holds our BERT to. Prints one line a model; exits 1 when any
differs, 0 (and says so) without transformers.

    python3 tools/hf_compare.py        (from the repository root)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import read_safetensors  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "golden")


def load(stem):
    """The golden file's tensors, its HF state dict in float64, and the model's inputs."""
    t = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(os.path.join(GOLDEN, stem + ".safetensors"))[0].items()}
    state = {k: v.double() if v.dtype == torch.float32 else v for k, v in t.items() if "/" not in k}
    args = dict(input_ids=t["batch/input_ids"], token_type_ids=t["batch/segment_ids"],
                attention_mask=t["batch/attention_mask"])
    return t, state, args


def main():
    try:
        from transformers import (BertConfig, BertForPreTraining, BertForQuestionAnswering,
                                  BertForSequenceClassification)
    except ImportError as e:
        print(f"hf: transformers not installed here ({e})")
        return 0
    different = 0
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=16, type_vocab_size=2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12,
                     hidden_act="gelu", num_labels=3)

    t, state, args = load("bert_hf")
    m = BertForPreTraining(cfg).double().eval()
    missing, unexpected = m.load_state_dict(state, strict=False)
    o = m(**args)
    ce = torch.nn.functional.cross_entropy
    mlm = float(ce(o.prediction_logits.view(-1, 50), t["batch/labels"].view(-1), ignore_index=-100))
    nsp = float(ce(o.seq_relationship_logits, t["batch/nsp_label"]))
    twin = (float(t["twin/mlm_loss"]), float(t["twin/nsp_loss"]))
    ok = abs(mlm - twin[0]) < 1e-5 * twin[0] and abs(nsp - twin[1]) < 1e-5 * twin[1]
    different += not ok
    print(f"hf: BertForPreTraining mlm {mlm:.7f} nsp {nsp:.7f}, twin {twin[0]:.7f} {twin[1]:.7f}: "
          f"{'equal' if ok else 'DIFFERENT'} (missing {missing}, unexpected {unexpected})")

    t, state, args = load("bert_hf_heads")
    for cls, outs in ((BertForSequenceClassification, {"logits": "twin/classification_logits"}),
                      (BertForQuestionAnswering, {"start_logits": "twin/start_logits",
                                                  "end_logits": "twin/end_logits"})):
        m = cls(cfg).double().eval()
        missing, unexpected = m.load_state_dict(state, strict=False)
        o = m(**args)
        worst = max(float((getattr(o, k) - t[v].double()).abs().max()) for k, v in outs.items())
        different += not worst < 1e-5
        print(f"hf: {cls.__name__} logits within {worst:.2e} of the twin's: "
              f"{'equal' if worst < 1e-5 else 'DIFFERENT'} (missing {missing}, "
              f"unexpected {len(unexpected)} tensors of the other head)")
    if different:
        print(f"hf: {different} of 3 models differ from the twin")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
