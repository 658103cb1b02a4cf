#!/usr/bin/python3
"""Expected token ids for the tokenizer tests (tests/data/bert/), from an independent Python
reference of HuggingFace's BertTokenizer (bert-base-uncased, do_lower_case=True).

Debian's python3 has no `transformers`, and PyPI cannot be reached, so `Reference` below is a
plain re-statement of what BertTokenizer.tokenize() does, written from its documented behaviour
with `unicodedata` (Python 3.11: Unicode 14.0.0):
  1. the special tokens [PAD] [UNK] [CLS] [SEP] [MASK] (exact case) are cut out and kept whole;
  2. the rest is lower-cased one code point at a time (PreTrainedTokenizer.tokenize lower-cases
     with re.sub(..., "(.+?)") before the basic tokenizer; so no final-sigma rule: Σ -> σ);
  3. cleaning: drop NUL, U+FFFD and every category C* character except \\t \\n \\r; \\t \\n \\r and
     Zs become ' '; spaces around CJK ideographs (BERT's _is_chinese_char blocks);
  4. str.split(); per word: NFD, drop Mn; split off each punctuation character (ASCII 33-47,
     58-64, 91-96, 123-126 or P*);
  5. WordPiece: greedy longest match first, "##" continuations, [UNK] for a word longer than
     100 code points or with a piece that matches nothing.

Usage (with /usr/bin/python3; VOCAB is the real vocab.txt, tools/fetch_data.sh bert-vocab):
  make_tokenizer_golden.py [--vocab VOCAB]     # writes tests/data/bert/{tiny_vocab.txt,
                                               #   tokenizer_tiny.tsv, tokenizer_bert_base_uncased.tsv}
  make_tokenizer_golden.py --vocab VOCAB --compare BIN [--fuzz N] [--exhaustive]
      runs build/bin/tokenize on the golden cases, on N random strings (ids, real vocab) and,
      with --exhaustive, on every code point (basic tokens), and diffs against the reference.
  make_tokenizer_golden.py --vocab VOCAB --js-check DIR
      also compares with tokenizers.js (npm @huggingface/tokenizers, unpacked in DIR/package) set
      up as bert-base-uncased's tokenizer.json; prints the cases where the two references differ.

Golden files (.tsv): one case per line, `hex(UTF-8 text) <TAB> ids <TAB> name`; '#' lines are
comments. Bump nothing: the C++ tests read whatever cases are there.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(REPO, "tests", "data", "bert")
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


# ---- the reference ------------------------------------------------------------------------------
def is_control(ch):
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def is_whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class Reference:
    def __init__(self, tokens, max_chars=100):
        self.tokens = tokens
        self.vocab = {}
        for i, t in enumerate(tokens):
            assert t not in self.vocab, t
            self.vocab[t] = i
        self.max_chars = max_chars
        self.specials = [s for s in SPECIAL if s in self.vocab]

    def split_special(self, text):
        out, start, i = [], 0, 0
        while i < len(text):
            hit = next((s for s in self.specials if text.startswith(s, i)), None)
            if hit:
                if i > start:
                    out.append((text[start:i], False))
                out.append((hit, True))
                i += len(hit)
                start = i
            else:
                i += 1
        if start < len(text):
            out.append((text[start:], False))
        return out

    def basic(self, text):
        text = "".join(c.lower() for c in text)
        cleaned = []
        for c in text:
            if ord(c) == 0 or ord(c) == 0xFFFD or is_control(c):
                continue
            if is_whitespace(c):
                cleaned.append(" ")
            elif is_cjk(ord(c)):
                cleaned.append(" " + c + " ")
            else:
                cleaned.append(c)
        words = []
        for w in "".join(cleaned).split():
            w = "".join(c for c in unicodedata.normalize("NFD", w) if unicodedata.category(c) != "Mn")
            cur = ""
            for c in w:
                if is_punctuation(c):
                    if cur:
                        words.append(cur)
                    words.append(c)
                    cur = ""
                else:
                    cur += c
            if cur:
                words.append(cur)
        return words

    def wordpiece(self, word):
        if len(word) > self.max_chars:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = ("##" if start else "") + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            if end == start:
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces

    def basic_tokens(self, text):
        out = []
        for seg, special in self.split_special(text):
            out.extend([seg] if special else self.basic(seg))
        return out

    def tokenize(self, text):
        out = []
        for seg, special in self.split_special(text):
            if special:
                out.append(seg)
            else:
                for w in self.basic(seg):
                    out.extend(self.wordpiece(w))
        return out

    def encode(self, text):
        return [self.vocab[t] for t in self.tokenize(text)]


# ---- the cases ----------------------------------------------------------------------------------
CASES = [
    ("ascii", "Hello, world! How are you?"),
    ("empty", ""),
    ("only spaces", "   \t  "),
    ("unaffable", "unaffable"),
    ("accents", "Café naïve résumé façade Ångström"),
    ("decomposed accent", "Cafe\u0301 nai\u0308ve"),
    ("apostrophe", "don't!! I'm"),
    ("cjk", "中文字"),
    ("cjk mixed", "BERT是一个模型, 北京天安门."),
    ("cjk compatibility ideograph", "\uf900\u8c48"),
    ("long word 101", "a" * 101),
    ("long word 100", "a" * 100),
    ("long word then short", "x" * 150 + " ok"),
    ("unknown piece", "quiz xylophone qzx"),
    ("control chars", "a\x00b\x01c\x7fd\u200be\ufffdf"),
    ("whitespace kinds", "a\tb\nc\r\nd\u00a0e\u3000f\u2028g\u2029h\u0085i"),
    ("format and private use", "co\u00adoperate \ue000x \u0378y \ufeffz"),
    ("emoji", "I \u2764\ufe0f NLP \U0001F600 hello\U0001F600world \U0001F44D\U0001F3FD"),
    ("punctuation unicode", "\u00abquoted\u00bb \u2014 dash\u2026 \u00bfQu\u00e9? \u201csmart\u201d"),
    ("ascii symbols", "a^b`c~d $100.00 #tag @user e-mail 3.14 50% x+y=z <html> a|b \\n"),
    ("url", "https://example.com/path?q=1&x=2#frag"),
    ("numbers", "1,000,000 3.14159 2nd 1990s"),
    ("mixed case", "McDonald's iPhone XBOX NASA"),
    ("greek final sigma", "ΟΔΟΣ Σίσυφος ΣΟΦΙΑ"),
    ("sharp s and dotted I", "Straße İstanbul"),
    ("ligature and fullwidth", "\ufb01ne \uff21\uff22\uff23 x\u00b2"),
    ("hangul", "안녕하세요 한국어"),
    ("kana", "こんにちは ガギグ"),
    ("vietnamese", "Tiếng Việt"),
    ("devanagari", "नमस्ते"),
    ("arabic hebrew", "مرحبا שלום"),
    ("special tokens", "[CLS] hello [SEP] world [MASK]"),
    ("special tokens glued", "a[MASK]b [mask] [Mask] [UNK][PAD]"),
    ("special tokens broken", "[CLS [SE P] [MASK"),
    ("angstrom ohm", "\u212b \u2126 \u212a"),
    ("roman numeral", "\u216b \u2167"),
    ("combining order", "a\u0301\u0316b q\u0323\u0307"),
    ("sentence", "The quick brown fox jumps over the lazy dog; it wasn't (really) that lazy."),
    ("moby", "Call me Ishmael. Some years ago\u2014never mind how long precisely\u2014having little or no money"),
]

# A tiny vocabulary (id = line number): specials, punctuation, single letters and digits, their
# "##" forms except ##q ##x ##z (so "quiz" cannot be split), and a few words and pieces.
TINY_WORDS = ["the", "hello", "world", "un", "##aff", "##able", "cafe", "naive", "resume",
              "facade", "don", "i", "m", "t", "bert", "is", "model", "##s", "##ing", "how", "are",
              "you", "nlp", "quick", "brown", "fox", "jump", "over", "lazy", "dog", "it", "was",
              "##n", "really", "that", "call", "me", "some", "year", "ago", "never", "mind", "long",
              "##ly", "##er", "##ed", "co", "##op", "##erate", "http", "##s", "example", "com", "path",
              "straße", "istanbul", "ok", "中", "文", "北", "京", "天", "一", "个", "σ", "ς", "ο", "δ"]


def tiny_vocab():
    toks = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks += [chr(c) for c in range(33, 127) if not chr(c).isalnum()]
    toks += ["\u00ab", "\u00bb", "\u2014", "\u2026", "\u00bf", "\u201c", "\u201d"]
    toks += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    toks += ["##" + chr(c) for c in range(ord("a"), ord("z") + 1) if chr(c) not in "qxz"]
    toks += [str(d) for d in range(10)] + ["##" + str(d) for d in range(10)]
    for w in TINY_WORDS:
        if w not in toks:
            toks.append(w)
    return toks


# ---- files --------------------------------------------------------------------------------------
def read_vocab(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def write_golden(path, ref, title):
    with open(path, "w", encoding="utf-8") as f:
        f.write("# %s\n# Written by tools/make_tokenizer_golden.py (Unicode %s). Columns: hex of the "
                "UTF-8 text, expected ids, name.\n" % (title, unicodedata.unidata_version))
        for name, text in CASES:
            ids = ref.encode(text)
            f.write("%s\t%s\t%s\n" % (text.encode("utf-8").hex(), " ".join(map(str, ids)), name))
    print("wrote", path)


# ---- comparisons --------------------------------------------------------------------------------
def run_tool(binary, vocab_path, lines, mode="ids"):
    data = "".join(l + "\n" for l in lines).encode("utf-8", "surrogatepass")
    out = subprocess.run([binary, "--vocab", vocab_path, "--print", mode], input=data,
                         capture_output=True, check=True).stdout.decode("utf-8")
    res = out.split("\n")
    assert res[-1] == "" and len(res) == len(lines) + 1, (len(res), len(lines))
    return res[:-1]


def random_text(rng):
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        " \t\r\u00a0\u3000\u2028\u2009",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\u00ab\u00bb\u2014\u2026\u00bf\u00a1\u201c\u201d",
        "\u00e0\u00e9\u00ee\u00f5\u00fc\u00c7\u00d1\u0130\u00df\u0301\u0308\u0327\u0323\u0307",
        "\u03b1\u03a3\u03c3\u03c2\u0416\u0436\u05d0\u0627\u0928\u094d\u093e",
        "\u4e2d\u6587\u5b57\u5317\u4eac\uf900\u3042\u30ac\uac00\ud55c",
        "\x00\x01\x1f\x7f\u200b\u00ad\ufeff\ufffd\ue000\u0378",
        "\U0001F600\U0001F44D\U0001F3FD\u2764\ufe0f\u00b2\ufb01\u212b\u216b",
    ]
    specials = ["[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", "[mask]", "the", "un", "aff", "ing"]
    parts = []
    for _ in range(rng.randint(1, 30)):
        r = rng.random()
        if r < 0.1:
            parts.append(rng.choice(specials))
        else:
            pool = pools[0] if r < 0.55 else rng.choice(pools)
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 12))))
    return "".join(parts)


def compare(args, ref):
    texts = [t for _, t in CASES if "\n" not in t]
    rng = random.Random(1234)
    texts += [random_text(rng) for _ in range(args.fuzz)]
    texts = [t.replace("\n", " ") for t in texts]
    got = run_tool(args.compare, args.vocab, texts)
    bad = 0
    for t, g in zip(texts, got):
        want = " ".join(map(str, ref.encode(t)))
        if g != want:
            bad += 1
            if bad <= 10:
                print("MISMATCH %r\n  tool: %s\n  ref:  %s" % (t, g, want))
    print("ids: %d texts, %d mismatches" % (len(texts), bad))
    if args.exhaustive:
        # Every code point between two letters, in basic mode: checks every table entry.
        cps = [c for c in range(0x110000) if c != 10 and not 0xD800 <= c <= 0xDFFF]
        lines = ["A" + chr(c) + "\u00c9" + chr(c) + "\u0301z" for c in cps]
        got = run_tool(args.compare, args.vocab, lines, mode="basic")
        ebad = 0
        for c, line, g in zip(cps, lines, got):
            want = " ".join(ref.basic_tokens(line))
            if g != want:
                ebad += 1
                if ebad <= 10:
                    print("MISMATCH U+%04X: tool %r ref %r" % (c, g, want))
        print("basic tokens: %d code points, %d mismatches" % (len(cps), ebad))
        bad += ebad
    return 1 if bad else 0


JS_DRIVER = r"""
const path = process.argv[2], vocabPath = process.argv[3];
const { Tokenizer } = require(path + '/package/dist/tokenizers.cjs');
const fs = require('fs');
const lines = fs.readFileSync(vocabPath, 'utf8').split('\n'); lines.pop();
const vocab = {}; lines.forEach((t, i) => { vocab[t] = i; });
const special = [0, 100, 101, 102, 103].map(id => ({id, content: lines[id], single_word: false,
  lstrip: false, rstrip: false, normalized: false, special: true}));
const json = { version: '1.0', added_tokens: special,
  normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true,
                strip_accents: null, lowercase: true },
  pre_tokenizer: { type: 'BertPreTokenizer' }, post_processor: null, decoder: null,
  model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
           max_input_chars_per_word: 100, vocab } };
const tok = new Tokenizer(json, { do_lower_case: true });
const texts = JSON.parse(fs.readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(texts.map(t => tok.encode(t, { add_special_tokens: false }).ids)));
"""


def js_check(args, ref):
    texts = [t for _, t in CASES]
    rng = random.Random(99)
    texts += [random_text(rng) for _ in range(args.fuzz)]
    with tempfile.NamedTemporaryFile("w", suffix=".cjs", delete=False) as f:
        f.write(JS_DRIVER)
        driver = f.name
    try:
        out = subprocess.run(["node", driver, os.path.abspath(args.js_check), os.path.abspath(args.vocab)],
                             input=json.dumps(texts).encode(), capture_output=True, check=True).stdout
    finally:
        os.unlink(driver)
    js = json.loads(out)
    diff = 0
    for t, j in zip(texts, js):
        r = ref.encode(t)
        if r != j:
            diff += 1
            print("DIFF %r\n  ref: %s\n  js:  %s" % (t, r, j))
    print("tokenizers.js: %d texts, %d differ" % (len(texts), diff))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", default=os.path.join(REPO, "data", "bert", "vocab.txt"))
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--compare", metavar="BIN", help="the tokenize program to check")
    ap.add_argument("--fuzz", type=int, default=0, help="random strings to add to the comparison")
    ap.add_argument("--exhaustive", action="store_true", help="with --compare: every code point")
    ap.add_argument("--js-check", metavar="DIR", help="unpacked npm @huggingface/tokenizers")
    args = ap.parse_args()
    have_vocab = os.path.exists(args.vocab)
    if args.compare or args.js_check:
        if not have_vocab:
            sys.exit("%s not found: run tools/fetch_data.sh bert-vocab or pass --vocab" % args.vocab)
        ref = Reference(read_vocab(args.vocab))
        return compare(args, ref) if args.compare else js_check(args, ref)
    os.makedirs(args.out, exist_ok=True)
    tiny = tiny_vocab()
    with open(os.path.join(args.out, "tiny_vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tiny))
    write_golden(os.path.join(args.out, "tokenizer_tiny.tsv"), Reference(tiny),
                 "Expected ids with tests/data/bert/tiny_vocab.txt (%d tokens)" % len(tiny))
    if have_vocab:
        write_golden(os.path.join(args.out, "tokenizer_bert_base_uncased.tsv"),
                     Reference(read_vocab(args.vocab)),
                     "Expected ids with bert-base-uncased's vocab.txt (md5 64800d5d8528ce344256daf115d4965e)")
    else:
        print("%s not found: kept the existing bert-base-uncased golden file" % args.vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
