"""A minimal GGUF v2/v3 reader for the Python tests, independent of larql's parser.

gguf.GGUFReader spends ~40 s building the 262k-entry vocabulary fields of the default model; the
tests need only the tensor table and a few scalar metadata values. Layout: ggml/docs/gguf.md.
"""
from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np

# GGUF value types (ggml/docs/gguf.md): fixed sizes; 8 = string, 9 = array.
_SCALAR_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_gguf(path: Path, arrays: tuple = ()):
    """Returns (memmap of the file, {key: scalar or string metadata value} (arrays skipped unless
    their key is in `arrays`: then a list of strings or a numpy array),
    {tensor name: (GGMLQuantizationType, dims fastest-first, absolute data offset)})."""
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    buf = memoryview(mm)
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = bytes(buf[pos:pos + n]).decode("utf-8", "replace")
        pos += n
        return s

    def skip_value(vtype):
        nonlocal pos
        if vtype == 8:
            n = take("Q")  # (not `pos += take(...)`: that reads pos before take moves it)
            pos += n
        elif vtype == 9:
            etype, count = take("IQ")
            if etype in _SCALAR_FMT:
                pos += struct.calcsize("<" + _SCALAR_FMT[etype]) * count
            else:
                for _ in range(count):
                    skip_value(etype)
        else:
            pos += struct.calcsize("<" + _SCALAR_FMT[vtype])

    magic, version, n_tensors, n_kv = take("4sIQQ")
    assert magic == b"GGUF" and version in (2, 3), (magic, version)
    meta = {}
    for _ in range(n_kv):
        key = string()
        vtype = take("I")
        if vtype in _SCALAR_FMT:
            meta[key] = take(_SCALAR_FMT[vtype])
        elif vtype == 8:
            meta[key] = string()
        elif vtype == 9 and key in arrays:
            etype, count = take("IQ")
            if etype == 8:
                meta[key] = [string() for _ in range(count)]
            else:
                fmt = _SCALAR_FMT[etype]
                meta[key] = np.frombuffer(buf, dtype=np.dtype("<" + fmt), count=count, offset=pos).copy()
                pos += struct.calcsize("<" + fmt) * count
        else:
            skip_value(vtype)
    alignment = int(meta.get("general.alignment", 32))
    infos = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take("I")
        dims = [take("Q") for _ in range(n_dims)]
        ttype, offset = take("IQ")
        infos.append((name, gguf.GGMLQuantizationType(ttype), dims, offset))
    data_start = (pos + alignment - 1) // alignment * alignment
    return mm, meta, {name: (tt, dims, data_start + off) for name, tt, dims, off in infos}


def read_tensor_table(path: Path):
    """(memmap, {name: (type, dims, offset)}): read_gguf without the metadata."""
    mm, _, table = read_gguf(path)
    return mm, table


def tensor_bytes(mm, table, name: str) -> bytes:
    """One tensor's raw bytes as stored (its blocks, ggml/docs/gguf.md)."""
    ttype, dims, offset = table[name]
    block, type_size = gguf.GGML_QUANT_SIZES[ttype]
    return bytes(mm[offset:offset + int(np.prod(dims)) // block * type_size])


def reference_dequant(mm, ttype, dims, offset, rows_per_chunk=8192):
    """Yields (first element index, f32 values) over row chunks of one tensor, dequantised by
    gguf.quants.dequantize (numpy is ~2x faster on cache-sized pieces)."""
    block, type_size = gguf.GGML_QUANT_SIZES[ttype]
    row_len = dims[0]
    n_rows = int(np.prod(dims[1:])) if len(dims) > 1 else 1
    row_bytes = row_len // block * type_size
    raw = np.asarray(mm[offset:offset + row_bytes * n_rows]).reshape(n_rows, row_bytes)
    if ttype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        raw = raw.view(np.float32 if ttype == gguf.GGMLQuantizationType.F32 else np.float16)
    for r in range(0, n_rows, rows_per_chunk):
        out = gguf.quants.dequantize(raw[r:r + rows_per_chunk], ttype)
        yield r * row_len, np.asarray(out, dtype=np.float32).reshape(-1)


def dequantize_tensor(mm, table, name: str) -> np.ndarray:
    """The whole tensor as f32, shaped outermost-first ([out, in] for a matrix)."""
    ttype, dims, offset = table[name]
    out = np.empty(int(np.prod(dims)), dtype=np.float32)
    for start, vals in reference_dequant(mm, ttype, dims, offset):
        out[start:start + vals.size] = vals
    return out.reshape(list(reversed(dims)))
