"""Float and re-quantised vindexes, and Hugging Face directories as a source (issue 10).

The fixture is the Hugging Face directory scripts/hf_from_gguf.py makes from the default GGUF
with independent tools (conftest `hf_dir`: f32 safetensors in two shards, config.json,
tokenizer.json). One f32 vindex is extracted from it per session (conftest `f32_vindex`, shared
with test_export.py: `larql extract HF_DIR --quant none --dtype f32`). Checks, each against an
independent answer:
- the exactness bar: logits of `larql perplexity` on the f32 vindex vs the float64 numpy Gemma 3
  forward (tests/python/gemma3_numpy.py) on the same weights, over 640 positions (past the
  512-token sliding window): max |Δ logit| <= 1e-3;
- running the Hugging Face directory directly gives the f32 vindex's logits bit for bit, and an
  f32 vindex extracted from the GGUF has the same weight bytes and the same logits (the C++
  dequantisation and +1 of the norms agree with the `gguf` package and the script);
- `--quant q4k` (re-quantised by larql's quantiser): mean KL vs the f32 vindex <= 0.02 nats, and
  the manifest stores the types docs/vindex-format.md names;
- bad Hugging Face directories (no config.json, a tensor of the wrong shape, a truncated
  safetensors file, an unsupported model type) give a clear error and exit != 0.
Numbers go to the results file (key "vindex_float").
"""
from __future__ import annotations

import gc
import json
import shutil
import subprocess

import numpy as np
import pytest

import peer

gemma3_numpy = pytest.importorskip("gemma3_numpy")

TOKENS = 640
BAR_DLOGIT = 1e-3
BAR_Q4K_KL = 0.02
TEXT = peer.DATA_DIR / "long_text_gpl3.txt"

pytestmark = pytest.mark.usefixtures("larql_bin", "model_path")


def _extract(larql_bin, source, out, quant, dtype):
    r = subprocess.run([str(larql_bin), "extract", str(source), "-o", str(out), "--level", "inference", "--quant", quant,
                        "--dtype", dtype, "--json", "-t", str(peer.THREADS)], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    print(f"\n[extract {quant}/{dtype} from {source.name}] {info['seconds']:.1f} s, {info['bytes'] / 2**20:.0f} MiB")
    return info


@pytest.fixture(scope="module")
def f32_run(f32_vindex, tmp_path_factory):
    """larql's logits on the f32 vindex over TOKENS positions: (ids, path of the .npy)."""
    npy = tmp_path_factory.mktemp("vf_logits") / "f32.npy"
    r = peer.larql_perplexity(TEXT, logits_out=npy, max_tokens=TOKENS, model=f32_vindex[0])
    assert len(r["ids"]) == TOKENS
    return r["ids"], npy


def test_f32_vindex_meets_the_exactness_bar(f32_vindex, f32_run, hf_dir):
    ids, npy = f32_run
    w = gemma3_numpy.load_hf(hf_dir)
    exact = gemma3_numpy.forward(w, ids)
    del w
    gc.collect()
    lq = np.load(npy)
    d = np.abs(lq.astype(np.float64) - exact).max(axis=1)
    c = peer.compare_logits(exact, lq, ids)
    res = {"tokens": TOKENS, "max_abs_dlogit": float(d.max()), "max_abs_dlogit_beyond_512": float(d[512:].max()),
           "kl_mean": c.summary()["kl_mean"], "top1_agreement": c.summary()["top1_agreement"],
           "extract_seconds": f32_vindex[1]["seconds"], "vindex_bytes": f32_vindex[1]["bytes"]}
    peer.record_results("vindex_float_f32", res)
    print(f"\n[f32 vindex vs numpy f64] {res}")
    assert d[512:].size >= 100
    assert d.max() <= BAR_DLOGIT, res


def test_hf_dir_runs_as_its_f32_vindex(hf_dir, f32_vindex, tmp_path):
    a, b = tmp_path / "hf.npy", tmp_path / "vx.npy"
    ra = peer.larql_perplexity(TEXT, logits_out=a, max_tokens=96, model=hf_dir)
    rb = peer.larql_perplexity(TEXT, logits_out=b, max_tokens=96, model=f32_vindex[0])
    assert ra["ids"] == rb["ids"]
    np.testing.assert_array_equal(np.load(a), np.load(b))
    idx = json.loads((f32_vindex[0] / "index.json").read_text())
    assert idx["quant"] == "none" and idx["source"]["format"] == "safetensors"
    manifest = json.loads((f32_vindex[0] / "weight_manifest.json").read_text())
    assert {e["dtype"] for e in manifest} == {"F32"}


def test_f32_vindex_from_gguf_equals_the_one_from_hf(larql_bin, model_path, f32_vindex, tmp_path):
    out = tmp_path / "gguf-f32.vindex"
    _extract(larql_bin, model_path, out, "none", "f32")
    for f in ("attn_weights.bin", "ffn_weights.bin", "norms.bin", "embed_weights.bin", "gate_vectors.bin", "embeddings.bin"):
        assert (out / f).read_bytes() == (f32_vindex[0] / f).read_bytes(), f
    a, b = tmp_path / "gguf.npy", tmp_path / "hf.npy"
    ra = peer.larql_perplexity(TEXT, logits_out=a, max_tokens=96, model=out)
    rb = peer.larql_perplexity(TEXT, logits_out=b, max_tokens=96, model=f32_vindex[0])
    assert ra["ids"] == rb["ids"]
    np.testing.assert_array_equal(np.load(a), np.load(b))


def test_q4k_vindex_is_near_the_f32_one(larql_bin, hf_dir, f32_run, tmp_path):
    out = tmp_path / "q4k.vindex"
    info = _extract(larql_bin, hf_dir, out, "q4k", "f16")
    types = {}
    for e in json.loads((out / "weight_manifest.json").read_text()):
        types.setdefault(e["role"], set()).add(e["dtype"])
    # docs/vindex-format.md: Q, K, O, gate, up Q4_K, V and down Q6_K; a row width that is not a
    # multiple of 256 (hidden 640 here) falls back to Q5_0 / Q8_0; embedding at --dtype; vectors f32.
    assert types["attn_output"] == {"Q4_K"} and types["ffn_down"] == {"Q6_K"}
    assert types["attn_q"] == types["ffn_gate"] == {"Q5_0"} and types["attn_v"] == {"Q8_0"}
    assert types["token_embd"] == {"F16"} and types["attn_norm"] == {"F32"}
    ids, f32_npy = f32_run
    npy = tmp_path / "q4k.npy"
    r = peer.larql_perplexity(TEXT, logits_out=npy, max_tokens=TOKENS, model=out)
    assert r["ids"] == ids
    c = peer.compare_logits(np.load(f32_npy, mmap_mode="r"), np.load(npy, mmap_mode="r"), ids)
    s = c.summary()
    res = {"kl_mean": s["kl_mean"], "kl_p99": s["kl_p99"], "top1_agreement": s["top1_agreement"],
           "extract_seconds": info["seconds"], "vindex_bytes": info["bytes"]}
    peer.record_results("vindex_float_q4k", res)
    print(f"\n[q4k vs f32 vindex] {res}")
    assert s["kl_mean"] <= BAR_Q4K_KL, res


# ---------------------------------------------------------------------------------------------
# Bad Hugging Face directories: a one-layer Gemma 3 written here, then broken one way at a time.
# ---------------------------------------------------------------------------------------------

TINY = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 32, "vocab_size": 262144, "sliding_window": 512}


def _tiny_tensors(shapes_override=None):
    rng = np.random.default_rng(0)
    h, f, q, kv, v = 64, 128, 64, 32, 262144
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    p = "model.layers.0."
    shapes.update({p + "input_layernorm.weight": (h,), p + "self_attn.q_proj.weight": (q, h),
                   p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.v_proj.weight": (kv, h),
                   p + "self_attn.q_norm.weight": (32,), p + "self_attn.k_norm.weight": (32,),
                   p + "self_attn.o_proj.weight": (h, q), p + "post_attention_layernorm.weight": (h,),
                   p + "pre_feedforward_layernorm.weight": (h,), p + "mlp.gate_proj.weight": (f, h),
                   p + "mlp.up_proj.weight": (f, h), p + "mlp.down_proj.weight": (h, f),
                   p + "post_feedforward_layernorm.weight": (h,)})
    shapes.update(shapes_override or {})
    return {n: (rng.standard_normal(s) * 0.05).astype(np.float16) for n, s in shapes.items()}


@pytest.fixture
def tiny_dir(hf_dir, tmp_path):
    from safetensors.numpy import save_file

    def make(shapes_override=None, config=None):
        d = tmp_path / "tiny"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config or TINY))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            (d / f).symlink_to(hf_dir / f)
        save_file(_tiny_tensors(shapes_override), str(d / "model.safetensors"))
        return d
    return make


def _fails(d, *words):
    r = peer.run_larql(["run", d, "Hello", "-n", "1", "--temperature", "0"], check=False, timeout=120)
    assert 0 < r.returncode < 128, (r.returncode, r.stderr)
    err = " ".join(ln for ln in r.stderr.splitlines() if ln.startswith("error:"))
    for w in words:
        assert w in err, (w, r.stderr)


def test_the_tiny_dir_runs(tiny_dir):
    d = tiny_dir()
    r = peer.run_larql(["run", d, "Hello", "-n", "2", "--temperature", "0"], check=False, timeout=120)
    assert r.returncode == 0, r.stderr


def test_missing_config_json(tiny_dir):
    d = tiny_dir()
    (d / "config.json").unlink()
    _fails(d, "config.json")


def test_a_tensor_of_the_wrong_shape(tiny_dir):
    _fails(tiny_dir({"model.layers.0.self_attn.k_proj.weight": (48, 64)}), "model.layers.0.self_attn.k_proj.weight", "shape")


def test_a_truncated_safetensors_file(tiny_dir):
    d = tiny_dir()
    p = d / "model.safetensors"
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 1000])
    _fails(d, "model.safetensors")


def test_an_unsupported_model_type(tiny_dir):
    _fails(tiny_dir(config={**TINY, "architectures": ["MambaForCausalLM"], "model_type": "mamba"}), "mamba", "not supported")


def test_a_layer_beyond_the_config(tiny_dir):
    _fails(tiny_dir({"model.layers.3.mlp.up_proj.weight": (128, 64)}), "model.layers.3.mlp.up_proj.weight")
