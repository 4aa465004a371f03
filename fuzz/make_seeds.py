#!/usr/bin/env python3
"""Writes the committed seed corpus fuzz/corpus/gguf/ with the `gguf` Python package (gguf-py,
llama.cpp's reference writer), so the seeds — and the C++ tests that read the valid ones
(tests/formats/gguf_seed_test.cc) — come from a writer independent of larql's.

Usage: .venv/bin/python fuzz/make_seeds.py [OUT_DIR]   (default: fuzz/corpus/gguf next to this file)

Valid seeds:   valid_minimal, valid_all_types, valid_align64, valid_v2 (v3 bytes with version 2;
               v2 and v3 are identical on the wire for little-endian files, see ggml/docs/gguf.md)
Invalid seeds: bad magic, version 1, truncated, huge kv_count, unknown tensor type, misaligned
               tensor offset, deeply nested array, tensor data past the end of the file.
"""
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import gguf

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "corpus" / "gguf"


def build(fill, alignment=None) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.gguf"
        w = gguf.GGUFWriter(p, "larqltest")
        if alignment is not None:
            w.add_custom_alignment(alignment)
        fill(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return p.read_bytes()


def all_types(w):
    # Values the C++ seed test checks (tests/formats/gguf_seed_test.cc).
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float32("t.f32", 1.5)
    w.add_float64("t.f64", -2.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, -1.0])
    w.add_array("t.arr_str", ["a", "", "ccc"])
    w.add_array("t.arr_nested", [[1, 2], [3]])
    # F32 [4, 2] = 0..7 (numpy shape (2, 4): GGUF dims are reversed)
    w.add_tensor("f32.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    # F16 [8] = 0..7
    w.add_tensor("f16.weight", np.arange(8, dtype=np.float16))
    # one Q8_0 block (raw bytes): d = 1.0 (f16 0x3c00), qs = 0..31  -> dims [32, 1]
    q = np.frombuffer(struct.pack("<H", 0x3C00) + bytes(range(32)), dtype=np.uint8).reshape(1, 34)
    w.add_tensor("q8.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def align64(w):
    w.add_uint32("larqltest.block_count", 2)
    w.add_tensor("a", np.ones(3, dtype=np.float32))
    w.add_tensor("b", np.full(5, 2.0, dtype=np.float32))




def main():
    OUT.mkdir(parents=True, exist_ok=True)
    seeds = {}
    seeds["valid_minimal.gguf"] = build(lambda w: w.add_string("general.name", "tiny"))
    full = build(all_types)
    seeds["valid_all_types.gguf"] = full
    seeds["valid_align64.gguf"] = build(align64, alignment=64)
    seeds["valid_v2.gguf"] = full[:4] + struct.pack("<I", 2) + full[8:]

    small = build(align64)
    seeds["invalid_bad_magic.gguf"] = b"GGUX" + small[4:]
    seeds["invalid_v1.gguf"] = small[:4] + struct.pack("<I", 1) + small[8:]
    seeds["invalid_truncated.gguf"] = full[: len(full) // 2]
    seeds["invalid_huge_kv_count.gguf"] = small[:16] + struct.pack("<Q", 2**62) + small[24:]
    # tensor "b" info ends with: name "b" | n_dims=1 | dim 5 | type u32 | offset u64
    ib = small.rindex(struct.pack("<Q", 1) + b"b")
    type_at = ib + 8 + 1 + 4 + 8
    seeds["invalid_unknown_type.gguf"] = small[:type_at] + struct.pack("<I", 99) + small[type_at + 4:]
    seeds["invalid_misaligned.gguf"] = small[:type_at + 4] + struct.pack("<Q", 33) + small[type_at + 12:]
    seeds["invalid_past_eof.gguf"] = small[:type_at + 4] + struct.pack("<Q", 1 << 20) + small[type_at + 12:]
    # 12 levels of nested arrays (limit is 8): u32 ARRAY, u64 1, ... innermost u32 UINT8, u64 0
    nest = b"".join(struct.pack("<IQ", 9, 1) for _ in range(12)) + struct.pack("<IQ", 0, 0)
    key = b"deep"
    seeds["invalid_nesting.gguf"] = (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key))
                                     + key + struct.pack("<I", 9) + nest)

    for name, data in sorted(seeds.items()):
        (OUT / name).write_bytes(data)
    print(f"wrote {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes, to {OUT}")


if __name__ == "__main__":
    main()
