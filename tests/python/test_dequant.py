"""Parity: every tensor of the real model dequantised by larql equals the `gguf` package's.

The C++ side is `larql_dequant_dump` (tests/quant/tools/dequant_dump.cc), which streams
"<name>\\t<dtype>\\t<n>\\n" + n float32 per tensor. The reference is
`gguf.quants.dequantize(tensor.data, tensor.tensor_type)` from the `gguf` Python package
(llama.cpp's gguf-py), an independent numpy implementation of the ggml block layouts.
Expected: bit-identical (np.array_equal; NaN never occurs in a real model).

Tool location: $LARQL_DEQUANT_DUMP, else $LARQL_BUILD_DIR/larql_dequant_dump (or .../tests/),
LARQL_BUILD_DIR defaulting to <repo>/build. Model: $LARQL_MODEL or models/gemma-3-270m-q4_k_m.gguf.
"""
import os
import struct
import subprocess
from pathlib import Path

import pytest

np = pytest.importorskip("numpy", reason="numpy missing: run `make setup` (venv)")
gguf = pytest.importorskip("gguf", reason="gguf package missing: run `make setup` (venv)")

REPO = Path(__file__).resolve().parents[2]
MODEL = Path(os.environ.get("LARQL_MODEL", REPO / "models" / "gemma-3-270m-q4_k_m.gguf"))


def find_tool() -> Path:
    if os.environ.get("LARQL_DEQUANT_DUMP"):
        return Path(os.environ["LARQL_DEQUANT_DUMP"])
    build = Path(os.environ.get("LARQL_BUILD_DIR", REPO / "build"))
    candidates = [build / "larql_dequant_dump", build / "tests" / "larql_dequant_dump"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    pytest.fail(
        "larql_dequant_dump not found (looked at %s); build it with "
        "`cmake --build <build> --target larql_dequant_dump` or set LARQL_DEQUANT_DUMP"
        % ", ".join(str(c) for c in candidates)
    )


@pytest.fixture(scope="module")
def model():
    if not MODEL.is_file():
        pytest.skip("real model missing at %s: run `make setup`" % MODEL)
    return MODEL


# GGUF value types (ggml/docs/gguf.md): fixed sizes; 8 = string, 9 = array.
_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_tensor_table(path: Path):
    """Minimal GGUF v2/v3 tensor-table reader, independent of larql's parser (gguf.GGUFReader
    spends ~40 s building the 262k-entry vocabulary fields; we only need the tensor table).
    Returns (memmap of the file, {name: (GGMLQuantizationType, dims, absolute data offset)})."""
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
            if etype in _SCALAR_SIZE:
                pos += _SCALAR_SIZE[etype] * count
            else:
                for _ in range(count):
                    skip_value(etype)
        else:
            pos += _SCALAR_SIZE[vtype]

    magic, version, n_tensors, n_kv = take("4sIQQ")
    assert magic == b"GGUF" and version in (2, 3), (magic, version)
    alignment = 32
    for _ in range(n_kv):
        key = string()
        vtype = take("I")
        if key == "general.alignment" and vtype == 4:
            alignment = take("I")
        else:
            skip_value(vtype)
    infos = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take("I")
        dims = [take("Q") for _ in range(n_dims)]
        ttype, offset = take("IQ")
        infos.append((name, gguf.GGMLQuantizationType(ttype), dims, offset))
    data_start = (pos + alignment - 1) // alignment * alignment
    return mm, {name: (tt, dims, data_start + off) for name, tt, dims, off in infos}


def read_into(stream, n_floats: int):
    arr = np.empty(n_floats, dtype="<f4")
    view = memoryview(arr).cast("B")
    got = 0
    while got < len(view):
        k = stream.readinto(view[got:])
        if not k:
            raise AssertionError("dump stream ended early (%d of %d bytes)" % (got, len(view)))
        got += k
    return arr


def reference_dequant(mm, ttype, dims, offset, rows_per_chunk=8192):
    """gguf.quants.dequantize over row chunks (numpy is ~2x faster on cache-sized pieces)."""
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


def stream_tensors(tool: Path, model: Path, names=()):
    """Yields (name, dtype_name, float32 array) from the tool, one tensor at a time."""
    proc = subprocess.Popen([str(tool), str(model), *names], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=1 << 20)
    try:
        while True:
            line = proc.stdout.readline().decode()
            assert line, "dump stream ended without END"
            if line == "END\n":
                break
            name, dtype, n = line.rstrip("\n").split("\t")
            yield name, dtype, read_into(proc.stdout, int(n))
    finally:
        proc.stdout.close()
        err = proc.stderr.read().decode()
        rc = proc.wait()
        assert rc == 0, "larql_dequant_dump failed (%d): %s" % (rc, err)


def test_every_tensor_matches_gguf_package(model):
    tool = find_tool()
    mm, ref = read_tensor_table(model)
    seen = set()
    types = {}
    for name, dtype, ours in stream_tensors(tool, model):
        assert name in ref, "tool emitted unknown tensor %s" % name
        ttype, dims, offset = ref[name]
        assert dtype == ttype.name, "%s: dtype %s vs gguf %s" % (name, dtype, ttype.name)
        assert ours.size == int(np.prod(dims)), "%s: %d elements vs dims %s" % (name, ours.size, dims)
        compared = 0
        for start, theirs in reference_dequant(mm, ttype, dims, offset):
            compared += theirs.size
            mine = ours[start:start + theirs.size]
            if not np.array_equal(mine, theirs):
                diff = np.abs(mine - theirs)
                i = int(np.argmax(diff))
                pytest.fail("%s (%s): %d elements differ, max |diff| %g at %d (ours %r, gguf %r)"
                            % (name, dtype, int(np.count_nonzero(diff)), diff[i], start + i,
                               mine[i], theirs[i]))
        assert compared == ours.size, "%s: compared %d of %d" % (name, compared, ours.size)
        seen.add(name)
        types[dtype] = types.get(dtype, 0) + compared
    print("elements compared per dtype:", types)
    assert seen == set(ref), "tensors not dumped: %s" % sorted(set(ref) - seen)[:10]
    # The model mixes these formats; make sure each one was actually compared.
    for expected in ("F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"):
        assert expected in types, "no %s tensor compared (got %s)" % (expected, types)


def test_named_subset_only(model):
    tool = find_tool()
    out = list(stream_tensors(tool, model, ["output_norm.weight"]))
    assert [n for n, _, _ in out] == ["output_norm.weight"]
