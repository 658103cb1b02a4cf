#!/usr/bin/python3
"""squad_eval against a Python twin of SQuAD v1.1's official evaluation (written from its
definition: normalise by lower(), dropping string.punctuation, re.sub(r'\\b(a|an|the)\\b', ' ')
and ' '.join(split()); exact match; token-overlap F1 with Counter intersection; the best over the
gold answers; means x 100). Random datasets from a pool of words with articles, ASCII and
Unicode punctuation, Unicode letters and spaces; the two scores must be equal to the last bit.

    squad_eval_twin.py SQUAD_EVAL WORK_DIR
"""
import collections
import json
import os
import random
import re
import string
import subprocess
import sys


def normalize(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1(pred, gold):
    p, g = normalize(pred).split(), normalize(gold).split()
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    if same == 0:
        return 0
    precision, recall = 1.0 * same / len(p), 1.0 * same / len(g)
    return (2 * precision * recall) / (precision + recall)


def evaluate(dataset, predictions):
    em = f = total = 0
    for article in dataset["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                golds = [a["text"] for a in qa["answers"]]
                em += max(normalize(predictions[qa["id"]]) == normalize(g) for g in golds)
                f += max(f1(predictions[qa["id"]], g) for g in golds)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f / total}


WORDS = ["the", "The", "a", "A", "an", "An", "THE", "cat", "Cat", "dog", "1066", "A.D.", "theatre",
         "an-", "a_b", "Straße", "ÜBER", "naïve", "İstanbul", "«the»", "l'an", "don't", "¿qué?",
         "東京", "x", "Paris,", "(Paris)", "Eiffel", "tower.", "—", "the_end", "ǅemal", "Ⅻ", "٣"]
SPACES = [" ", "  ", "\t", "\u00a0", "\u2003", "\n", " , "]


def phrase(rng):
    n = rng.randint(0, 6)
    return "".join(rng.choice(WORDS) + rng.choice(SPACES) for _ in range(n)).strip(" ") if n else rng.choice(["", " ", "."])


def main():
    squad_eval, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    for trial in range(20):
        rng = random.Random(trial)
        qas, preds = [], {}
        for q in range(60):
            golds = [{"text": phrase(rng), "answer_start": 0} for _ in range(rng.randint(1, 3))]
            qas.append({"id": f"q{q}", "question": "?", "answers": golds})
            if rng.random() < 0.9:
                preds[f"q{q}"] = rng.choice([phrase(rng), golds[0]["text"], golds[-1]["text"].upper()])
        dataset = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]}
        dpath, ppath = os.path.join(work, "dataset.json"), os.path.join(work, "predictions.json")
        json.dump(dataset, open(dpath, "w"), ensure_ascii=False)
        json.dump(preds, open(ppath, "w"), ensure_ascii=False)
        out = subprocess.run([squad_eval, dpath, ppath], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout.strip().splitlines()[-1])
        want = evaluate(dataset, preds)
        assert got == want, f"trial {trial}: squad_eval {got}, the official logic {want}"
        missing = sum(f"q{q}" not in preds for q in range(60))
        assert out.stderr.count("Unanswered question") == missing, out.stderr
    # A malformed input: exit status 1, the file and the field named on the last line.
    bad = os.path.join(work, "bad.json")
    json.dump({"version": "1.1", "data": [{"paragraphs": [{"context": "c", "qas": [{"id": "x"}]}]}]}, open(bad, "w"))
    out = subprocess.run([squad_eval, bad, ppath], capture_output=True, text=True)
    assert out.returncode == 1 and f"{bad}: data[0].paragraphs[0].qas[0].question is missing" in out.stderr, out
    print(f"squad_eval equals the official logic on 20 random datasets of 60 questions (last: {got}); "
          "a malformed file is refused naming it and the field")


if __name__ == "__main__":
    main()
