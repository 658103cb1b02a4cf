"""The safetensors layout written by hand (no safetensors package), shared by the golden-file
generators: 8-byte little-endian header length, JSON header {name: {dtype, shape,
data_offsets}, "__metadata__": {...}} padded with spaces to a multiple of 8, then raw
little-endian data. F32 and I64 tensors."""
import json
import os
import struct

import numpy as np
import torch

_DTYPES = {torch.float32: ("F32", "<f4"), torch.int64: ("I64", "<i8")}


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, torch.Tensor f32/i64); metadata: dict str -> str. Atomic."""
    header = {}
    blobs = []
    offset = 0
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        if t.dtype not in _DTYPES:
            raise TypeError(f"{path}: tensor {name} has unsupported dtype {t.dtype}")
        dtype, np_dtype = _DTYPES[t.dtype]
        raw = t.numpy().astype(np_dtype).tobytes(order="C")
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    """Reads back a file written above: ({name: numpy array}, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__")
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        dt = {"F32": "<f4", "I64": "<i8"}[h["dtype"]]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype=dt).reshape(h["shape"])
    return out, meta


def write_verified(path, tensors, metadata):
    """Writes the file, reads it back and checks every tensor and the metadata; returns its size."""
    write_safetensors(path, tensors, metadata)
    back, back_meta = read_safetensors(path)
    assert back_meta == {k: str(v) for k, v in metadata.items()}, path
    for name, t in tensors:
        assert np.array_equal(back[name], t.detach().cpu().numpy()), (path, name)
    return os.path.getsize(path)
