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
import subprocess
from pathlib import Path

import pytest

from gguf_table import read_tensor_table, reference_dequant

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
