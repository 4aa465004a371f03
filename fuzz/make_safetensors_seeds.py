#!/usr/bin/env python3
"""Writes the committed seed corpus fuzz/corpus/safetensors/ with the `safetensors` package
(Hugging Face's reference writer): a few small valid files and some malformed variants.

Usage: .venv/bin/python fuzz/make_safetensors_seeds.py [OUT_DIR]
"""
import struct
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "corpus" / "safetensors"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    seeds = {
        "valid_f32": save({"w": rng.standard_normal((4, 4)).astype(np.float32)}),
        "valid_mixed": save({
            "a": rng.standard_normal(8).astype(np.float16),
            "b": np.arange(6, dtype=np.int32).reshape(2, 3),
            "c": np.array([True, False]),
            "s": np.array(1.5, dtype=np.float64),
            "e": np.zeros((0, 3), dtype=np.float32),
        }, metadata={"format": "np"}),
    }
    base = seeds["valid_f32"]
    n = struct.unpack("<Q", base[:8])[0]
    seeds["truncated"] = base[:-5]
    seeds["huge_header"] = struct.pack("<Q", 1 << 40) + base[8:]
    header = base[8:8 + n].decode()
    seeds["bad_offsets"] = struct.pack("<Q", n) + header.replace("[0,64]", "[0,60]").encode() + base[8 + n:]
    seeds["bad_dtype"] = struct.pack("<Q", n) + header.replace('"F32"', '"F31"').encode() + base[8 + n:]
    for name, blob in seeds.items():
        (out / name).write_bytes(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main())
