#!/usr/bin/env python3
"""Write a same-shape stand-in for a GGUF model, small enough to carry compressed.

    bench/synth_like.py MODEL.gguf OUT.gguf.xz

The output, once decompressed, is a GGUF file of exactly MODEL's size and layout: the header
(metadata, vocabulary, tensor table) and every F32 tensor (the norms) are copied byte for byte;
each quantised tensor holds its own first ~64 KiB of rows repeated to its full size, so every
block is a valid block of the tensor's type with the model's own scales. Kernels read every byte
once per token as they would for the real model, so speed measured on it (bench/side_by_side.py)
stands for the real model's; the text it generates is meaningless. It exists for machines the
model cannot be copied to (a benchmark host that takes only a few MiB): the repeats compress to
a few MiB with xz.
"""
from __future__ import annotations

import lzma
import sys

import gguf


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    raw = reader.data  # the whole file, memory-mapped (uint8)
    tensors = sorted(reader.tensors, key=lambda t: t.data_offset)
    pos = 0
    with lzma.open(dst, "wb", preset=6) as out:
        for t in tensors:
            start, size = int(t.data_offset), int(t.n_bytes)
            out.write(raw[pos:start].tobytes())  # header / alignment padding, verbatim
            if t.tensor_type == gguf.GGMLQuantizationType.F32:
                out.write(raw[start:start + size].tobytes())
            else:
                rows = max(1, int(t.shape[1:].prod()) if len(t.shape) > 1 else 1)
                row_bytes = size // rows
                chunk = raw[start:start + max(1, 65536 // row_bytes) * row_bytes].tobytes()
                left = size
                while left > 0:
                    out.write(chunk[:left])
                    left -= len(chunk)
            pos = start + size
        out.write(raw[pos:].tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
