#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets into tests/fuzz/corpus/<target>/seed-*.

Small, valid (or nearly valid) inputs that reach deep into each reader; libFuzzer and the
replay harness mutate them. Inputs that once crashed a target live beside them as crash-*
files and are never rewritten here. Run from anywhere: python3 tests/fuzz/make_seeds.py
"""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- config: YAML, then NUL and --set lines ------------------------------------------------
for name in ("mnist_lenet_adasum", "bert_tiny_mlm_lamb", "resnet50_adasum"):
    with open(os.path.join(ROOT, "configs", name + ".yaml")) as f:
        put("config", name, f.read())
put("config", "overrides",
    "model: {name: lenet5}\ntrain: {steps: 2, batch_per_rank: 8}\nreducer: {name: sum}\n\0"
    "train.steps=3\nreducer.name=adasum\noptimizer={lr: 0.1, name: sgd}\nnew.deep.key=[1, 2]\n"
    "train=null\n")
put("config", "types",
    "a: 1\nb: -2.5e3\nc: .inf\nd: true\ne: [1, 2, 3]\nf: [x, 'y', \"z\"]\ng: ~\nh:\n"
    "i: {j: {k: 0x10}}\nl: 1e6\nm: 2.0\nn: 99999999999999999999\no: ''\n")
put("config", "anchors",
    "base: &b {lr: 0.1, momentum: 0.9}\nopt: *b\nlist: &l [1, 2]\nother: *l\n\0opt.lr=0.2\n")
put("config", "bad", "model: {name: lenet5\n  x: [1, 2\n")

# ---- idx: u8 IDX files, raw and gzip ------------------------------------------------------------


def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


images = idx([3, 4, 4], [(i * 7) % 256 for i in range(48)])
labels = idx([3], [0, 9, 4])
put("idx", "images", images)
put("idx", "labels", labels)
put("idx", "images.gz", gzip.compress(images, mtime=0))
put("idx", "labels.gz", gzip.compress(labels, mtime=0))
put("idx", "rank2", idx([2, 3], range(6)))
put("idx", "label-out-of-range", idx([4], [1, 2, 77, 3]))

# ---- safetensors ----------------------------------------------------------------------------------


def safetensors(tensors, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


put("safetensors", "two", safetensors(
    [("w", "F32", [2, 3], struct.pack("<6f", *range(6))), ("step", "I64", [], struct.pack("<q", 7))],
    {"format": "pt", "step": "7"}))
put("safetensors", "kinds", safetensors(
    [("a", "BF16", [2], b"\x80\x3f\x00\x40"), ("b", "F16", [1, 1], b"\x00\x3c"),
     ("c", "I32", [0], b""), ("d", "F32", [1], struct.pack("<f", 1.5))]))
put("safetensors", "empty", safetensors([]))
put("safetensors", "escapes", safetensors(
    [("na\\u00efve \\\"q\\\"", "F32", [1], b"\0\0\0\0")], {"k\u00e9": "v\\n"}))

# ---- mlm_shard: a flags byte, then a shard (format: data/mlm_shards.h) ---------------------------


def fnv(b, h=0xCBF29CE484222325):
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def shard(docs, vocab=60000, special=(0, 1, 2, 3, 4)):
    width = 2 if vocab <= 65536 else 4
    doc_index, seg_index, toks = [0], [0], []
    for d in docs:
        for s in d:
            toks += s
            seg_index.append(len(toks))
        doc_index.append(len(seg_index) - 1)
    D, S, T = len(doc_index) - 1, len(seg_index) - 1, len(toks)
    docs_off = 128
    segs_off = docs_off + 8 * (D + 1)
    toks_off = segs_off + 8 * (S + 1)
    size = toks_off + width * T
    payload = struct.pack("<%dQ" % (D + 1), *doc_index) + struct.pack("<%dQ" % (S + 1), *seg_index)
    payload += struct.pack("<%d%s" % (T, "H" if width == 2 else "i"), *toks)
    h = b"ADAMLMSH" + struct.pack("<IIII", 1, 128, width, vocab) + struct.pack("<Q", 0x1234)
    h += struct.pack("<5i", *special) + struct.pack("<I", 0)
    h += struct.pack("<8Q", D, S, T, docs_off, segs_off, toks_off, size, fnv(payload))
    h += struct.pack("<Q", fnv(h))
    return h + payload


docs = [[[10, 11, 12], [13, 14, 15, 16, 17, 18]], [[19, 20]], [[21, 22, 23, 24, 25, 26, 27], [28]]]
put("mlm_shard", "packed", bytes([0]) + shard(docs))
put("mlm_shard", "nsp-fix", bytes([1 | 2]) + shard(docs))
put("mlm_shard", "wide-fix", bytes([1 | 4]) + shard(docs, vocab=70000))
put("mlm_shard", "one-doc", bytes([2 | 8]) + shard([[[10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]]]))
put("mlm_shard", "empty", bytes([1]) + shard([]))

# ---- tokenizer: mode byte (even: text, odd: vocab.txt), then bytes --------------------------------
put("tokenizer", "text", b"\0Hello, unaffable world! [CLS] the [MASK] quick\tbrown fox [SEP]")
put("tokenizer", "unicode",
    "\0Caf\u00e9 na\u00efve \u4e2d\u6587 \u00c5ngstr\u00f6m \u0301x \ufffd\x01 ##ing".encode())
put("tokenizer", "vocab",
    b"\x01[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\nun\n##aff\n##able\n,\n!\n##ing\n")
put("tokenizer", "vocab-crlf", b"\x01[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nthe\r\n")
