#!/usr/bin/python3
"""data/squad_features.h against a Python twin of Google's run_squad.py (BERT): its
read_squad_examples (is_whitespace with U+202F, char_to_word_offset, the answer's words, training
examples whose answer is not found skipped), convert_examples_to_features (sub-tokens,
_improve_answer_span, doc spans by the stride, _check_is_max_context, [CLS] q [SEP] span [SEP],
padding, labels or 0/0), write_predictions (_get_best_indexes, the n-best filters, the stable sort
by start + end logit, the de-tokenised text, nonce "empty") and get_final_text, restated here
statement by statement. The tokenizer is tools/make_tokenizer_golden.py's Reference (HF's
BertTokenizer, which our tokenizer equals). Where data/squad_features.h documents a difference
(inputs on which run_squad.py raises IndexError or indexes from a list's end), the twin does what
the header says, marked "differs".

Random and crafted SQuAD-format files (Unicode words, CJK, accents, punctuation, spaces of many
kinds, zero-width characters, long contexts needing many windows), at random and at the default
options; the C++ driver (tests/tools/squad_features_driver.cc) must give the same features, the
same warnings (question ids), the same predictions.json from random logits with ties, and the same
get_final_text, exactly.

    squad_features_twin.py DRIVER WORK_DIR TINY_VOCAB FULL_VOCAB
"""
import collections
import json
import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from make_tokenizer_golden import Reference  # noqa: E402


def read_vocab(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]


class Tokenizer:
    """tokenization.FullTokenizer's surface over the Reference."""

    def __init__(self, vocab_path):
        self.ref = Reference(read_vocab(vocab_path))
        self.vocab = self.ref.vocab

    def tokenize(self, text):
        return self.ref.tokenize(text)

    def basic_tokenize(self, text):
        return self.ref.basic_tokens(text)

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab[t] for t in tokens]


def whitespace_tokenize(text):
    text = text.strip()
    if not text:
        return []
    return text.split()


# ---- read_squad_examples -------------------------------------------------------------------------
def is_whitespace(c):
    if c == " " or c == "\t" or c == "\r" or c == "\n" or ord(c) == 0x202F:
        return True
    return False


def doc_tokens_of(paragraph_text):
    doc_tokens = []
    char_to_word_offset = []
    prev_is_whitespace = True
    for c in paragraph_text:
        if is_whitespace(c):
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                doc_tokens.append(c)
            else:
                doc_tokens[-1] += c
            prev_is_whitespace = False
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


Example = collections.namedtuple(
    "Example", ["index", "qas_id", "question_text", "doc_tokens", "orig_answer_text",
                "start_position", "end_position"])


def read_squad_examples(input_data, is_training):
    """Returns (examples, skipped question ids)."""
    examples, skipped = [], []
    index = 0
    for entry in input_data["data"]:
        for paragraph in entry["paragraphs"]:
            doc_tokens, char_to_word_offset = doc_tokens_of(paragraph["context"])
            for qa in paragraph["qas"]:
                qas_id = qa["id"]
                start_position = end_position = orig_answer_text = None
                if is_training:
                    if len(qa["answers"]) != 1:
                        raise ValueError("For training, each question should have exactly 1 answer.")
                    answer = qa["answers"][0]
                    orig_answer_text = answer["text"]
                    answer_offset = answer["answer_start"]
                    answer_length = len(orig_answer_text)
                    # differs: run_squad.py raises IndexError past the end and takes the last
                    # character (so the last word) for an empty answer or the last word for a
                    # start in leading whitespace; data/squad_features.h skips these with a warning.
                    if (answer_length == 0 or answer_offset < 0
                            or answer_offset + answer_length > len(char_to_word_offset)
                            or char_to_word_offset[answer_offset] < 0):
                        skipped.append(qas_id)
                        index += 1
                        continue
                    start_position = char_to_word_offset[answer_offset]
                    end_position = char_to_word_offset[answer_offset + answer_length - 1]
                    actual_text = " ".join(doc_tokens[start_position:(end_position + 1)])
                    cleaned_answer_text = " ".join(whitespace_tokenize(orig_answer_text))
                    if actual_text.find(cleaned_answer_text) == -1:
                        skipped.append(qas_id)
                        index += 1
                        continue
                examples.append(Example(index, qas_id, qa["question"], doc_tokens, orig_answer_text,
                                        start_position, end_position))
                index += 1
    return examples, skipped


# ---- convert_examples_to_features ----------------------------------------------------------------
def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
    tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
    for new_start in range(input_start, input_end + 1):
        for new_end in range(input_end, new_start - 1, -1):
            text_span = " ".join(doc_tokens[new_start:(new_end + 1)])
            if text_span == tok_answer_text:
                return (new_start, new_end)
    return (input_start, input_end)


def _check_is_max_context(doc_spans, cur_span_index, position):
    best_score = None
    best_span_index = None
    for (span_index, doc_span) in enumerate(doc_spans):
        end = doc_span.start + doc_span.length - 1
        if position < doc_span.start:
            continue
        if position > end:
            continue
        num_left_context = position - doc_span.start
        num_right_context = end - position
        score = min(num_left_context, num_right_context) + 0.01 * doc_span.length
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return cur_span_index == best_span_index


DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride, max_query_length,
                                 is_training):
    features = []
    for example in examples:
        query_tokens = tokenizer.tokenize(example.question_text)
        if len(query_tokens) > max_query_length:
            query_tokens = query_tokens[0:max_query_length]

        tok_to_orig_index = []
        orig_to_tok_index = []
        all_doc_tokens = []
        for (i, token) in enumerate(example.doc_tokens):
            orig_to_tok_index.append(len(all_doc_tokens))
            sub_tokens = tokenizer.tokenize(token)
            for sub_token in sub_tokens:
                tok_to_orig_index.append(i)
                all_doc_tokens.append(sub_token)

        tok_start_position = None
        tok_end_position = None
        if is_training:
            tok_start_position = orig_to_tok_index[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
            else:
                tok_end_position = len(all_doc_tokens) - 1
            (tok_start_position, tok_end_position) = _improve_answer_span(
                all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
                example.orig_answer_text)

        max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
        doc_spans = []
        start_offset = 0
        while start_offset < len(all_doc_tokens):
            length = len(all_doc_tokens) - start_offset
            if length > max_tokens_for_doc:
                length = max_tokens_for_doc
            doc_spans.append(DocSpan(start=start_offset, length=length))
            if start_offset + length == len(all_doc_tokens):
                break
            start_offset += min(length, doc_stride)

        for (doc_span_index, doc_span) in enumerate(doc_spans):
            tokens = []
            token_to_orig_map = {}
            token_is_max_context = {}
            segment_ids = []
            tokens.append("[CLS]")
            segment_ids.append(0)
            for token in query_tokens:
                tokens.append(token)
                segment_ids.append(0)
            tokens.append("[SEP]")
            segment_ids.append(0)
            for i in range(doc_span.length):
                split_token_index = doc_span.start + i
                token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
                is_max_context = _check_is_max_context(doc_spans, doc_span_index, split_token_index)
                token_is_max_context[len(tokens)] = is_max_context
                tokens.append(all_doc_tokens[split_token_index])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)

            input_ids = tokenizer.convert_tokens_to_ids(tokens)
            input_mask = [1] * len(input_ids)
            while len(input_ids) < max_seq_length:
                input_ids.append(0)
                input_mask.append(0)
                segment_ids.append(0)
            assert len(input_ids) == max_seq_length

            start_position = None
            end_position = None
            if is_training:
                doc_start = doc_span.start
                doc_end = doc_span.start + doc_span.length - 1
                out_of_span = False
                if not (tok_start_position >= doc_start and tok_end_position <= doc_end):
                    out_of_span = True
                if out_of_span:
                    start_position = 0
                    end_position = 0
                else:
                    doc_offset = len(query_tokens) + 2
                    start_position = tok_start_position - doc_start + doc_offset
                    end_position = tok_end_position - doc_start + doc_offset

            features.append({
                "example": example.index, "span": doc_span_index, "doc_start": doc_span.start,
                "tokens": tokens, "input_ids": input_ids, "segment_ids": segment_ids,
                "attention_mask": input_mask,
                "start_position": -1 if start_position is None else start_position,
                "end_position": -1 if end_position is None else end_position,
                "token_to_orig_map": token_to_orig_map, "token_is_max_context": token_is_max_context})
    return features


# ---- write_predictions and get_final_text ------------------------------------------------------
def get_final_text(pred_text, orig_text, tokenizer):
    def _strip_spaces(text):
        ns_chars = []
        ns_to_s_map = collections.OrderedDict()
        for (i, c) in enumerate(text):
            if c == " ":
                continue
            ns_to_s_map[len(ns_chars)] = i
            ns_chars.append(c)
        ns_text = "".join(ns_chars)
        return (ns_text, ns_to_s_map)

    tok_text = " ".join(tokenizer.basic_tokenize(orig_text))
    start_position = tok_text.find(pred_text)
    if start_position == -1:
        return orig_text
    end_position = start_position + len(pred_text) - 1

    (orig_ns_text, orig_ns_to_s_map) = _strip_spaces(orig_text)
    (tok_ns_text, tok_ns_to_s_map) = _strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        return orig_text

    tok_s_to_ns_map = {}
    for (i, tok_index) in tok_ns_to_s_map.items():
        tok_s_to_ns_map[tok_index] = i

    orig_start_position = None
    if start_position in tok_s_to_ns_map:
        ns_start_position = tok_s_to_ns_map[start_position]
        if ns_start_position in orig_ns_to_s_map:
            orig_start_position = orig_ns_to_s_map[ns_start_position]
    if orig_start_position is None:
        return orig_text

    orig_end_position = None
    if end_position in tok_s_to_ns_map:
        ns_end_position = tok_s_to_ns_map[end_position]
        if ns_end_position in orig_ns_to_s_map:
            orig_end_position = orig_ns_to_s_map[ns_end_position]
    if orig_end_position is None:
        return orig_text

    output_text = orig_text[orig_start_position:(orig_end_position + 1)]
    return output_text


def _get_best_indexes(logits, n_best_size):
    index_and_score = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
    best_indexes = []
    for i in range(len(index_and_score)):
        if i >= n_best_size:
            break
        best_indexes.append(index_and_score[i][0])
    return best_indexes


PrelimPrediction = collections.namedtuple(
    "PrelimPrediction", ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])
NbestPrediction = collections.namedtuple("NbestPrediction", ["text", "start_logit", "end_logit"])


def write_predictions(all_examples, all_features, all_results, n_best_size, max_answer_length,
                      tokenizer):
    example_index_to_features = collections.defaultdict(list)
    for (i, feature) in enumerate(all_features):
        example_index_to_features[feature["example"]].append((feature, all_results[i]))

    all_predictions = collections.OrderedDict()
    for example in all_examples:
        features = example_index_to_features[example.index]
        prelim_predictions = []
        for (feature_index, (feature, result)) in enumerate(features):
            start_indexes = _get_best_indexes(result[0], n_best_size)
            end_indexes = _get_best_indexes(result[1], n_best_size)
            for start_index in start_indexes:
                for end_index in end_indexes:
                    if start_index >= len(feature["tokens"]):
                        continue
                    if end_index >= len(feature["tokens"]):
                        continue
                    if start_index not in feature["token_to_orig_map"]:
                        continue
                    if end_index not in feature["token_to_orig_map"]:
                        continue
                    if not feature["token_is_max_context"].get(start_index, False):
                        continue
                    if end_index < start_index:
                        continue
                    length = end_index - start_index + 1
                    if length > max_answer_length:
                        continue
                    prelim_predictions.append(PrelimPrediction(
                        feature_index=feature_index, start_index=start_index, end_index=end_index,
                        start_logit=result[0][start_index], end_logit=result[1][end_index]))

        prelim_predictions = sorted(prelim_predictions, key=lambda x: (x.start_logit + x.end_logit),
                                    reverse=True)
        seen_predictions = {}
        nbest = []
        for pred in prelim_predictions:
            if len(nbest) >= n_best_size:
                break
            feature = features[pred.feature_index][0]
            if pred.start_index > 0:
                tok_tokens = feature["tokens"][pred.start_index:(pred.end_index + 1)]
                orig_doc_start = feature["token_to_orig_map"][pred.start_index]
                orig_doc_end = feature["token_to_orig_map"][pred.end_index]
                orig_tokens = example.doc_tokens[orig_doc_start:(orig_doc_end + 1)]
                tok_text = " ".join(tok_tokens)
                tok_text = tok_text.replace(" ##", "")
                tok_text = tok_text.replace("##", "")
                tok_text = tok_text.strip()
                tok_text = " ".join(tok_text.split())
                orig_text = " ".join(orig_tokens)
                final_text = get_final_text(tok_text, orig_text, tokenizer)
                if final_text in seen_predictions:
                    continue
                seen_predictions[final_text] = True
            else:
                final_text = ""
                seen_predictions[final_text] = True
            nbest.append(NbestPrediction(text=final_text, start_logit=pred.start_logit,
                                         end_logit=pred.end_logit))
        if not nbest:
            nbest.append(NbestPrediction(text="empty", start_logit=0.0, end_logit=0.0))
        all_predictions[example.qas_id] = nbest[0].text
    return all_predictions


# ---- random and crafted data ---------------------------------------------------------------------
WORDS = ["the", "The", "quick", "brown", "fox", "Steve", "Smith's", "1990s", "U.S.", "co-operate",
         "$100.00", "50%", "don't", "(Paris)", "Paris,", "«quoted»", "—", "…", "¿Qué?", "Café",
         "naïve", "résumé", "Straße", "İstanbul", "ΟΔΟΣ", "東京は日本の首都", "北京", "中文", "e\u0301",
         "x²", "\ufb01ne", "😀", "hello😀world", "\u200b", "\ufffd", "[MASK]", "a[SEP]b", "nlp",
         "unaffable", "lazy", "dog.", "year", "ago,", "Ångström", "안녕하세요", "a\u00a0b", "x" * 120,
         "quiz", "model", "bert", "\"smart\"", "it's", "over"]
SPACES = [" ", " ", " ", " ", "  ", "\t", "\n", "\u202f", "\r\n", "\u3000", " \u00a0 "]


def context(rng, n_words):
    out = rng.choice(["", "", " ", "\n"])
    for i in range(n_words):
        out += rng.choice(WORDS) + (rng.choice(SPACES) if i + 1 < n_words else "")
    return out + rng.choice(["", "", " ", "\t"])


def question(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 14))) + "?"


def answer(rng, ctx, training, qid, bad):
    """A span of the context (random characters, so sometimes inside words); when training, one
    in eight broken (a changed text, a shifted start, empty, past the end, in leading spaces)."""
    if not ctx:
        return {"text": "x", "answer_start": 0}
    start = rng.randrange(len(ctx))
    length = rng.randint(1, min(40, len(ctx) - start))
    a = {"text": ctx[start:start + length], "answer_start": start}
    if training and rng.random() < 0.125:
        kind = rng.randrange(5)
        if kind == 0:
            a["text"] = a["text"] + "zz"
        elif kind == 1:
            a["answer_start"] = (start + rng.randint(1, 9)) % len(ctx)
        elif kind == 2:
            a["text"] = ""
        elif kind == 3:
            a["answer_start"] = len(ctx) - len(a["text"]) + rng.randint(1, 3)
        else:
            a["answer_start"] = 0
        bad.add(qid)
    return a


def dataset(rng, training, n_paragraphs, words):
    data, bad, qid = [], set(), 0
    for _ in range(rng.randint(1, 2)):
        paragraphs = []
        for _ in range(n_paragraphs):
            ctx = context(rng, rng.randint(*words))
            qas = []
            for _ in range(rng.randint(1, 4)):
                n_answers = 1 if training else rng.randint(1, 3)
                qas.append({"id": f"q{qid}", "question": question(rng),
                            "answers": [answer(rng, ctx, training, f"q{qid}", bad)
                                        for _ in range(n_answers)]})
                qid += 1
            paragraphs.append({"context": ctx, "qas": qas})
        data.append({"title": "t", "paragraphs": paragraphs})
    return {"version": "1.1", "data": data}, bad


def float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def logits(rng, n):
    """Few distinct values (ties everywhere) or float32 noise."""
    if rng.random() < 0.5:
        values = [float32(rng.gauss(0, 2)) for _ in range(4)]
        return [rng.choice(values) for _ in range(n)]
    return [float32(rng.gauss(0, 3)) for _ in range(n)]


SKIPPED, BROKEN = set(), set()
TOTAL_QUESTIONS = [0]


# ---- the comparisons -----------------------------------------------------------------------------
class Driver:
    def __init__(self, binary, work):
        self.binary, self.work = binary, work

    def run(self, job):
        path = os.path.join(self.work, "job.json")
        job["out"] = os.path.join(self.work, "out.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(job, f, ensure_ascii=False)
        out = subprocess.run([self.binary, path], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        with open(job["out"], encoding="utf-8") as f:
            text = f.read()
        return text, out.stderr


def compare_features(driver, tok, vocab, data, bad, options, training, where):
    path = os.path.join(driver.work, "dataset.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    text, stderr = driver.run({"mode": "features", "vocab": vocab, "dataset": path,
                               "training": training, "options": options})
    got = json.loads(text)["features"]
    examples, skipped = read_squad_examples(data, training)
    # A broken answer is skipped unless the change kept it findable (a shifted start on a repeated
    # word); a random span can be skipped too (one starting in the leading whitespace).
    SKIPPED.update((where, q) for q in skipped)
    BROKEN.update((where, q) for q in bad)
    want = convert_examples_to_features(examples, tok, options["max_seq_length"],
                                        options["doc_stride"], options["max_query_length"], training)
    assert len(got) == len(want), f"{where}: {len(got)} features, the twin {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        w = {k: v for k, v in w.items() if k != "tokens"}
        w["token_to_orig_map"] = {str(k): v for k, v in w["token_to_orig_map"].items()}
        w["token_is_max_context"] = {str(k): v for k, v in w["token_is_max_context"].items()}
        for key in w:
            assert g[key] == w[key], f"{where}: feature {i} {key}: driver {g[key]}, twin {w[key]}"
    # One warning per skipped question, naming it.
    warned = [line for line in stderr.splitlines() if "is skipped" in line]
    assert len(warned) == len(skipped), (where, stderr)
    for qid in skipped:
        assert any(f"question '{qid}'" in line for line in warned), (where, qid, stderr)
    return examples, want


def compare_predictions(driver, rng, tok, vocab, data, options, decode, where):
    path = os.path.join(driver.work, "dataset.json")
    examples, features = compare_features(driver, tok, vocab, data, set(), options, False, where)
    results = []
    for f in features:
        start, end = logits(rng, options["max_seq_length"]), logits(rng, options["max_seq_length"])
        # Mostly a likely span on the document tokens, as a trained model gives.
        doc = sorted(f["token_to_orig_map"])
        if doc and rng.random() < 0.8:
            a = rng.choice(doc)
            b = min(doc[-1], a + rng.randint(0, 6))
            start[a] = float32(start[a] + rng.choice([4.0, 8.0]))
            end[b] = float32(end[b] + rng.choice([4.0, 8.0]))
        results.append((start, end))
    text, _ = driver.run({"mode": "predict", "vocab": vocab, "dataset": path, "options": options,
                          "decode": decode, "start_logits": [r[0] for r in results],
                          "end_logits": [r[1] for r in results]})
    want = write_predictions(examples, features, results, decode["n_best_size"],
                             decode["max_answer_length"], tok)
    got = json.loads(text)
    assert got == dict(want), f"{where}: predictions differ:\n{got}\n{dict(want)}"
    # The file itself: UTF-8, indented by 4, keys sorted.
    assert text == json.dumps(dict(sorted(want.items())), indent=4, ensure_ascii=False) + "\n", where
    TOTAL_QUESTIONS[0] += len(want)
    return sum(v != "empty" for v in want.values())


FINAL_TEXT_CASES = [("steve smith", "Steve Smith's"), ("smith", "Steve Smith's"),
                    ("cafe", "Café,"), ("東 京", "東京は"), ("1990s", "(1990s)"), ("paris", "Paris"),
                    ("new york", "New\u00a0York"), ("not there", "Steve Smith"), ("", "abc"),
                    ("e", "e\u0301"), ("istanbul", "İstanbul"), ("s", "Smith's")]


def compare_final_text(driver, rng, tok, vocab):
    pairs = list(FINAL_TEXT_CASES)
    for _ in range(400):
        orig = context(rng, rng.randint(1, 6)).strip(" ")
        orig = " ".join(doc_tokens_of(orig)[0])  # as decoding builds it: words joined by ' '
        tok_text = " ".join(tok.basic_tokenize(orig))
        if tok_text and rng.random() < 0.8:
            a = rng.randrange(len(tok_text))
            b = rng.randint(a + 1, len(tok_text))
            pred = tok_text[a:b].strip()
        else:
            pred = rng.choice(WORDS).lower()
        pairs.append((pred, orig))
    text, _ = driver.run({"mode": "final_text", "vocab": vocab, "pairs": pairs})
    got = json.loads(text)
    for (pred, orig), g in zip(pairs, got):
        w = get_final_text(pred, orig, tok)
        assert g == w, f"get_final_text({pred!r}, {orig!r}): driver {g!r}, twin {w!r}"
    return len(pairs)


def main():
    binary, work, tiny_vocab, full_vocab = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    if not os.path.exists(full_vocab):
        sys.exit(f"{full_vocab} not fetched: run tools/fetch_data.sh bert-vocab (tools/test.sh does)")
    driver = Driver(binary, work)
    n_features = n_answered = n_pairs = 0
    for vocab in [tiny_vocab, full_vocab]:
        tok = Tokenizer(vocab)
        name = os.path.basename(vocab)
        rng = random.Random(name)
        n_pairs += compare_final_text(driver, rng, tok, vocab)
        # Small windows, many of them: random options.
        for trial in range(12):
            max_query = rng.randint(0, 8)
            options = {"max_seq_length": rng.randint(max_query + 4, max_query + 30),
                       "doc_stride": rng.randint(1, 16), "max_query_length": max_query}
            for training in [True, False]:
                data, bad = dataset(rng, training, rng.randint(1, 3), (0, 40))
                _, f = compare_features(driver, tok, vocab, data, bad, options, training,
                                        f"{name} trial {trial} training {training}")
                n_features += len(f)
            decode = {"n_best_size": rng.randint(1, 20), "max_answer_length": rng.randint(1, 30)}
            data, _ = dataset(rng, False, rng.randint(1, 3), (0, 40))
            n_answered += compare_predictions(driver, rng, tok, vocab, data, options, decode,
                                              f"{name} trial {trial} predictions")
        # run_squad.py's defaults on long contexts (several 384-token windows).
        options = {"max_seq_length": 384, "doc_stride": 128, "max_query_length": 64}
        for training in [True, False]:
            data, bad = dataset(rng, training, 2, (300, 700))
            _, f = compare_features(driver, tok, vocab, data, bad, options, training,
                                    f"{name} defaults training {training}")
            n_features += len(f)
        data, _ = dataset(rng, False, 2, (300, 700))
        n_answered += compare_predictions(driver, rng, tok, vocab, data, options,
                                          {"n_best_size": 20, "max_answer_length": 30},
                                          f"{name} defaults predictions")
    assert len(SKIPPED & BROKEN) >= 10, (SKIPPED, BROKEN)
    print(f"squad_features equals the run_squad.py twin on {n_features} features (two vocabularies, "
          f"random and default options), {n_answered} answers predicted for "
          f"{TOTAL_QUESTIONS[0]} questions and {n_pairs} "
          f"get_final_text cases; {len(SKIPPED)} training questions skipped with a warning")


if __name__ == "__main__":
    main()
