#!/usr/bin/python3
"""Writes data/unicode_tables.cc: the Unicode data the BERT tokenizer needs, from Python's
`unicodedata` (Debian's /usr/bin/python3; 3.11 ships Unicode 14.0.0). No network, no ICU.

    /usr/bin/python3 tools/make_unicode_tables.py            # rewrites data/unicode_tables.cc
    /usr/bin/python3 tools/make_unicode_tables.py --check    # exit 1 if the file is stale

The tables reproduce what HuggingFace's BertTokenizer computes with `unicodedata` and `str`:
  * kProps: sorted, disjoint code-point ranges [first, last] with property bits and the canonical
    combining class (ccc); code points outside every range have no bits and ccc 0. Bits:
      control    category C* (Cc Cf Cn Co Cs) except \\t \\n \\r  (BertTokenizer drops them)
      whitespace ' ' \\t \\n \\r or category Zs                 (BertTokenizer maps them to ' ')
      space      str.isspace()                               (str.split() splits on them)
      punct      ASCII 33-47, 58-64, 91-96, 123-126 or category P*
      mn         category Mn                                 (dropped after NFD)
      cjk        the CJK ideograph blocks of BERT's _is_chinese_char
      word       str.isalnum() or '_': Python re's \\w (SQuAD's answer normalisation)
  * kLower: runs (first, last, stride, delta): str.lower() of every code point in the run, stepping
    by stride, is the code point + delta. U+0130 (lower() gives two code points) is the only
    multi-code-point mapping; the C++ side handles it and this script asserts it.
  * kDecomp/kDecompPool: the full canonical decomposition unicodedata.normalize('NFD', c) of every
    code point that has one, except the Hangul syllables (decomposed arithmetically in C++).
"""
import argparse
import os
import sys
import unicodedata as ud

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "data", "unicode_tables.cc")
MAX_CP = 0x110000
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3

CONTROL, WHITESPACE, SPACE, PUNCT, MN, CJK, WORD = 1, 2, 4, 8, 16, 32, 64

CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def props(cp):
    ch = chr(cp)
    cat = ud.category(ch)
    bits = 0
    if cat.startswith("C") and ch not in "\t\n\r":
        bits |= CONTROL
    if ch in " \t\n\r" or cat == "Zs":
        bits |= WHITESPACE
    if ch.isspace():
        bits |= SPACE
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or cat.startswith("P"):
        bits |= PUNCT
    if cat == "Mn":
        bits |= MN
    if any(a <= cp <= b for a, b in CJK_RANGES):
        bits |= CJK
    if ch.isalnum() or ch == "_":
        bits |= WORD
    return bits, ud.combining(ch)


def prop_ranges():
    out = []
    cur = None  # [first, last, bits, ccc]
    for cp in range(MAX_CP):
        bits, ccc = props(cp)
        if bits == 0 and ccc == 0:
            cur = None
            continue
        if cur is not None and cur[1] == cp - 1 and cur[2] == bits and cur[3] == ccc:
            cur[1] = cp
        else:
            cur = [cp, cp, bits, ccc]
            out.append(cur)
    return out


def lower_runs():
    mapped = {}
    for cp in range(MAX_CP):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        low = chr(cp).lower()
        if low == chr(cp):
            continue
        if cp == 0x130:
            assert low == "i\u0307", repr(low)
            continue
        assert len(low) == 1, (hex(cp), low)
        # Lower-casing must not move a code point between the classes the tokenizer tests before
        # lower-casing (HuggingFace lower-cases first, we clean first), and must be idempotent.
        assert props(cp)[0] & (CONTROL | WHITESPACE | SPACE | CJK) == \
            props(ord(low))[0] & (CONTROL | WHITESPACE | SPACE | CJK), hex(cp)
        assert low.lower() == low, hex(cp)
        mapped[cp] = ord(low) - cp
    runs = []
    cps = sorted(mapped)
    i = 0
    while i < len(cps):
        first = cps[i]
        delta = mapped[first]
        last, stride = first, 0
        j = i + 1
        while j < len(cps):
            nxt = cps[j]
            step = nxt - last
            if mapped[nxt] != delta or step not in (1, 2) or (stride and step != stride):
                break
            # A stride-2 run must not cover a mapped code point it skips (ranges stay disjoint).
            if step == 2 and (last + 1) in mapped:
                break
            stride, last = step, nxt
            j += 1
        runs.append((first, last, stride or 1, delta))
        i = j
    # Self-check: the runs reproduce every mapping and nothing else.
    for first, last, stride, delta in runs:
        for cp in range(first, last + 1):
            if (cp - first) % stride == 0:
                assert mapped[cp] == delta
            else:
                assert cp not in mapped
    return runs


def decompositions():
    entries, pool = [], []
    for cp in range(MAX_CP):
        if 0xD800 <= cp <= 0xDFFF or HANGUL_FIRST <= cp <= HANGUL_LAST:
            continue
        d = ud.normalize("NFD", chr(cp))
        if d == chr(cp):
            continue
        assert len(d) <= 255 and len(pool) < 65536
        entries.append((cp, len(pool), len(d)))
        pool.extend(ord(c) for c in d)
    return entries, pool


def render():
    pr = prop_ranges()
    lr = lower_runs()
    de, pool = decompositions()
    lines = [
        "// GENERATED by tools/make_unicode_tables.py from Python %s's unicodedata (Unicode %s)."
        % ("%d.%d" % sys.version_info[:2], ud.unidata_version),
        "// Do not edit: change the script and rerun it. Layout and meaning: data/unicode_tables.h.",
        "// clang-format off",
        '#include "data/unicode_tables.h"',
        "",
        "namespace ada::data::unicode::tables {",
        "",
        'const char* const kUnicodeVersion = "%s";' % ud.unidata_version,
        "",
        "const PropRange kProps[] = {",
    ]
    row = []
    for first, last, bits, ccc in pr:
        row.append("{0x%X,0x%X,%d,%d}," % (first, last, bits, ccc))
        if len(row) == 6:
            lines.append("    " + "".join(row))
            row = []
    if row:
        lines.append("    " + "".join(row))
    lines += ["};", "const size_t kPropsSize = sizeof(kProps) / sizeof(kProps[0]);", "",
              "const LowerRun kLower[] = {"]
    row = []
    for first, last, stride, delta in lr:
        row.append("{0x%X,0x%X,%d,%d}," % (first, last, stride, delta))
        if len(row) == 6:
            lines.append("    " + "".join(row))
            row = []
    if row:
        lines.append("    " + "".join(row))
    lines += ["};", "const size_t kLowerSize = sizeof(kLower) / sizeof(kLower[0]);", "",
              "const Decomp kDecomp[] = {"]
    row = []
    for cp, off, n in de:
        row.append("{0x%X,%d,%d}," % (cp, off, n))
        if len(row) == 8:
            lines.append("    " + "".join(row))
            row = []
    if row:
        lines.append("    " + "".join(row))
    lines += ["};", "const size_t kDecompSize = sizeof(kDecomp) / sizeof(kDecomp[0]);", "",
              "const char32_t kDecompPool[] = {"]
    for k in range(0, len(pool), 12):
        lines.append("    " + "".join("0x%X," % c for c in pool[k:k + 12]))
    lines += ["};", "", "}  // namespace ada::data::unicode::tables", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare with the committed file")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    text = render()
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            same = f.read() == text
        print("%s is %s" % (args.out, "up to date" if same else "STALE: rerun tools/make_unicode_tables.py"))
        return 0 if same else 1
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print("wrote %s (%d bytes)" % (args.out, len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
