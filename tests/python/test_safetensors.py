"""larql's safetensors reader against files written by the `safetensors` package.

The package (Hugging Face's reference implementation) writes single files and the sharded
layout's shards; `larql_safetensors_dump` (tests/formats/tools/safetensors_dump.cc) prints what
larql reads: name, dtype, shape, file offset, byte count, byte sum and, for float tensors, the
sum of the values. Expected values come from the package's own reader and numpy.

Tool location: $LARQL_BUILD_DIR/larql_safetensors_dump (LARQL_BUILD_DIR defaults to <repo>/build).
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

np = pytest.importorskip("numpy", reason="numpy missing: run `make setup` (venv)")
st_numpy = pytest.importorskip("safetensors.numpy", reason="safetensors missing: run `make setup` (venv)")
from safetensors import safe_open  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def tool() -> Path:
    t = Path(os.environ.get("LARQL_BUILD_DIR", REPO / "build")) / "larql_safetensors_dump"
    if not (t.is_file() and os.access(t, os.X_OK)):
        pytest.fail("%s not built: `cmake --build build --target larql_safetensors_dump`" % t)
    return t


def dump(path: Path):
    r = subprocess.run([str(tool()), str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    tensors, meta = {}, {}
    for line in r.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "META":
            meta[f[1]] = f[2]
            continue
        tensors[f[0]] = {
            "dtype": f[1],
            "shape": [int(x) for x in f[2].split(",")] if f[2] else [],
            "offset": int(f[3]),
            "nbytes": int(f[4]),
            "byte_sum": int(f[5]),
            "value_sum": float(f[6]) if len(f) > 6 else None,
        }
    return tensors, meta


def sample_tensors():
    rng = np.random.default_rng(7)
    return {
        "model.embed_tokens.weight": rng.standard_normal((64, 16)).astype(np.float32),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((16, 16)).astype(np.float16),
        "model.layers.0.input_layernorm.weight": rng.standard_normal(16).astype(np.float32),
        "scalar": np.array(3.5, dtype=np.float64),
        "ids": np.arange(10, dtype=np.int64),
        "mask": np.array([True, False, True]),
        "bytes": np.arange(7, dtype=np.uint8),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def expected_dtype(a):
    return {np.float32: "F32", np.float16: "F16", np.float64: "F64", np.int64: "I64", np.bool_: "BOOL",
            np.uint8: "U8"}[a.dtype.type]


def check(path: Path, arrays: dict, got: dict):
    with safe_open(str(path), framework="numpy") as f:
        names = set(f.keys())
    assert set(got) >= names
    for name in names:
        a = arrays[name]
        g = got[name]
        assert g["dtype"] == expected_dtype(a), name
        assert g["shape"] == list(a.shape), name
        assert g["nbytes"] == a.nbytes, name
        raw = a.tobytes()
        assert g["byte_sum"] == sum(raw), name
        # The bytes sit at the offset larql reports.
        assert path.read_bytes()[g["offset"]:g["offset"] + g["nbytes"]] == raw, name
        if g["value_sum"] is not None:
            assert g["value_sum"] == pytest.approx(float(a.astype(np.float64).sum()), rel=1e-5, abs=1e-4), name


def test_single_file_from_the_reference_writer(tmp_path):
    arrays = sample_tensors()
    path = tmp_path / "model.safetensors"
    st_numpy.save_file(arrays, str(path), metadata={"format": "np", "note": "larql test"})
    got, meta = dump(path)
    assert set(got) == set(arrays)
    check(path, arrays, got)
    assert meta == {"format": "np", "note": "larql test"}


def test_sharded_checkpoint_from_the_reference_writer(tmp_path):
    arrays = sample_tensors()
    names = sorted(arrays)
    shards = {"model-00001-of-00002.safetensors": names[:4], "model-00002-of-00002.safetensors": names[4:]}
    weight_map = {}
    for shard, members in shards.items():
        st_numpy.save_file({n: arrays[n] for n in members}, str(tmp_path / shard))
        weight_map.update({n: shard for n in members})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(a.nbytes for a in arrays.values())}, "weight_map": weight_map}))
    got, _ = dump(tmp_path)
    assert set(got) == set(arrays)
    for shard, members in shards.items():
        check(tmp_path / shard, {n: arrays[n] for n in members}, {n: got[n] for n in members})


def test_truncated_and_corrupted_files_are_refused(tmp_path):
    arrays = sample_tensors()
    path = tmp_path / "m.safetensors"
    st_numpy.save_file(arrays, str(path))
    data = path.read_bytes()
    for name, blob in [("truncated", data[:-3]), ("header-cut", data[:40]), ("short", data[:5])]:
        p = tmp_path / (name + ".safetensors")
        p.write_bytes(blob)
        r = subprocess.run([str(tool()), str(p)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, (name, r.stdout)
        assert str(p) in r.stderr, r.stderr
