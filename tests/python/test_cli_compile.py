"""`larql compile VINDEX -o DIR/ | OUT.gguf` (docs/cli.md "compile"), on the committed family fixtures.

Each family's f32 GGUF (llama.cpp's converter run on the fixture's transformers checkpoint) is
extracted into a vindex and compiled into a Hugging Face directory. Independent checks:
- the safetensors the directory holds (read by the `safetensors` package) are the fixture's own
  `model.safetensors` — the same names, shapes and values (Gemma's norms within 1e-6: the GGUF holds
  1 + w in f32); that checks the names, the fused Phi-3 matrices, the experts one by one, and for
  the Llama-family GGUFs the Q/K rows put back from llama.cpp's permutation;
- config.json's keys equal the fixture's config.json (transformers' own save_pretrained);
- larql on the directory gives the vindex's logits bit for bit (families that pair NeoX halves; a
  Llama GGUF's Q/K were permuted, so its float sums run in another order: within 1e-4 — and then bit
  for bit those of the fixture's own directory, whose tensors are the same bytes);
- a quantised (q8_0) vindex's tensors come out as the `gguf` package's dequantisation;
- with transformers importable (not in CI: no torch) the directory gives the fixture's logits.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import peer
from gguf_table import dequantize_tensor, read_gguf

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "model" / "data" / "families"
TEXT = ("The old bridge at Lowfield was built in 1887 by a small crew of engineers. Every spring the river "
        "rose, and every spring the town argued about whether the stones would hold.")
# Mistral from its Hugging Face directory: its GGUF carries no sliding window (llama.cpp's "llama"
# loader reads none, docs/architecture.md), so a config from it is Llama's.
NEOX = {"qwen2", "qwen3", "qwen2_moe", "gemma2", "phi3", "phi3_longrope", "mistral"}
ADJACENT = {"llama2", "llama3", "mixtral"}
FAMILIES = sorted(NEOX | ADJACENT)


def source(family):
    return FIXTURES / family if family == "mistral" else FIXTURES / family / f"{family}-f32.gguf"


def larql(*args, check=True, timeout=600):
    return peer.run_larql([str(a) for a in args], check=check, timeout=timeout)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("t") / "t.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """family -> (vindex, compiled dir, compile's --json report), made once per module."""
    made = {}

    def get(family):
        if family not in made:
            tmp = tmp_path_factory.mktemp(family)
            vx, out = tmp / "f32.vindex", tmp / "hf"
            larql("extract", source(family), "-o", vx, "--level", "inference", "-t", peer.THREADS)
            rep = json.loads(larql("compile", vx, "-o", out, "--json").stdout)
            made[family] = (vx, out, rep)
        return made[family]

    return get


def load_dir(d: Path) -> dict:
    from safetensors.numpy import load_file
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def logits(model, text_file, tmp_path, name):
    npy = tmp_path / f"{name}.npy"
    ppl = peer.larql_perplexity(text_file, logits_out=npy, model=model)
    return np.load(npy), ppl["ids"]


@pytest.mark.parametrize("family", FAMILIES)
def test_compiled_tensors_are_the_fixture_checkpoint(family, compiled):
    pytest.importorskip("safetensors")
    _, out, rep = compiled(family)
    ours, theirs = load_dir(out), load_dir(FIXTURES / family)
    assert sorted(ours) == sorted(theirs)
    for name, want in theirs.items():
        got = ours[name]
        assert got.shape == want.shape and got.dtype == want.dtype, name
        if family.startswith("gemma") and name.endswith("norm.weight"):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=name)
        else:
            assert np.array_equal(got, want), name
    assert rep["unpermuted_qk"] == (family in ADJACENT)
    assert rep["dequantised"] == 0 and rep["shards"] == 1 and rep["tokenizer_copied"]


CONFIG_KEYS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "vocab_size", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings", "num_local_experts",
               "num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
               "query_pre_attn_scalar", "final_logit_softcapping", "attn_logit_softcapping", "layer_types",
               "model_type"]


@pytest.mark.parametrize("family", FAMILIES)
def test_config_matches_transformers_own(family, compiled):
    _, out, _ = compiled(family)
    ours = json.loads((out / "config.json").read_text())
    theirs = json.loads((FIXTURES / family / "config.json").read_text())
    for k in CONFIG_KEYS:
        if k in theirs and theirs[k] is not None:
            assert ours.get(k) == pytest.approx(theirs[k]), k
    assert ours["architectures"] == theirs["architectures"]
    rope = theirs.get("rope_parameters") or {}
    assert ours["rope_theta"] == rope.get("rope_theta", ours["rope_theta"])
    if rope.get("rope_type") == "llama3":  # the parameters recovered from the GGUF's frequency factors
        for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            assert ours["rope_scaling"][k] == rope[k], k
    if theirs.get("sliding_window"):
        assert ours["sliding_window"] == theirs["sliding_window"]
    gen = json.loads((out / "generation_config.json").read_text())
    if theirs.get("bos_token_id") is not None:
        assert gen["bos_token_id"] == theirs["bos_token_id"] == ours["bos_token_id"]


@pytest.mark.parametrize("family", FAMILIES)
def test_compiled_dir_runs_with_the_vindex_logits(family, compiled, text_file, tmp_path):
    vx, out, _ = compiled(family)
    lv, ids_v = logits(vx, text_file, tmp_path, "vindex")
    lo, ids_o = logits(out, text_file, tmp_path, "compiled")
    assert ids_v == ids_o
    if family in NEOX:
        assert np.array_equal(lv, lo), np.abs(lv - lo).max()
    else:
        assert np.abs(lv - lo).max() < 1e-4
        lf, _ = logits(FIXTURES / family, text_file, tmp_path, "fixture")
        assert np.array_equal(lf, lo), np.abs(lf - lo).max()


def test_default_model_f32_vindex_round_trips_bit_for_bit(f32_vindex, hf_dir, tmp_path, text_file):
    """The default Gemma 3 270M as an f32 vindex (conftest's, from scripts/hf_from_gguf.py's directory)
    compiled back: the same logits bit for bit, and the tensors those of the directory it came from."""
    from safetensors import safe_open
    vx, _ = f32_vindex
    out = tmp_path / "g"
    rep = json.loads(larql("compile", vx, "-o", out, "--json").stdout)
    assert rep["dequantised"] == 0 and rep["norm_values_inexact"] == 0 and not rep["unpermuted_qk"]
    lv, ids_v = logits(vx, text_file, tmp_path, "vx")
    lo, ids_o = logits(out, text_file, tmp_path, "hf")
    assert ids_v == ids_o and np.array_equal(lv, lo)
    src = {}
    for f in hf_dir.glob("*.safetensors"):
        with safe_open(str(f), "np") as h:
            src.update({k: (f, k) for k in h.keys()})
    with safe_open(str(out / "model.safetensors"), "np") as h:
        assert sorted(h.keys()) == sorted(src)
        for name in ("model.layers.3.self_attn.q_proj.weight", "model.layers.17.mlp.down_proj.weight",
                     "model.layers.5.self_attn.k_norm.weight", "model.norm.weight"):
            with safe_open(str(src[name][0]), "np") as g:
                want = g.get_tensor(name)
            got = h.get_tensor(name)
            if name.endswith("norm.weight"):
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=name)
            else:
                assert np.array_equal(got, want), name


def test_transformers_reads_the_compiled_dir(compiled):
    torch = pytest.importorskip("torch", reason="torch is not in the venv (CI has none): the transformers check is skipped")
    transformers = pytest.importorskip("transformers")
    for family in ("qwen2", "llama3", "gemma2", "mixtral"):
        _, out, _ = compiled(family)
        ref = json.loads((FIXTURES / family / "reference.json").read_text())
        model = transformers.AutoModelForCausalLM.from_pretrained(str(out), torch_dtype=torch.float32, attn_implementation="eager")
        with torch.no_grad():
            got = model(torch.tensor([ref["eval_ids"]])).logits[0].numpy()
        want = np.load(FIXTURES / family / "logits.npy")
        assert np.abs(got - want).max() < 1e-4, family


def test_quantised_vindex_compiles_to_its_dequantised_floats(tmp_path, text_file):
    pytest.importorskip("safetensors")
    gguf = FIXTURES / "qwen2" / "qwen2-q8_0.gguf"
    vx, out = tmp_path / "q8.vindex", tmp_path / "hf"
    larql("extract", gguf, "-o", vx, "--level", "inference", "-t", peer.THREADS)
    rep = json.loads(larql("compile", vx, "-o", out, "--json").stdout)
    assert rep["dequantised"] > 0
    mm, _, table = read_gguf(gguf)
    ours = load_dir(out)
    got = ours["model.layers.1.mlp.down_proj.weight"]
    want = dequantize_tensor(mm, table, "blk.1.ffn_down.weight")
    assert table["blk.1.ffn_down.weight"][0] == 8  # Q8_0
    assert got.dtype == np.float32 and np.array_equal(got, want.reshape(got.shape))
    lv, _ = logits(vx, text_file, tmp_path, "q8")
    lo, _ = logits(out, text_file, tmp_path, "f32")
    # The vindex runs Q8_0 kernels (activations quantised too), the directory f32 weights: close, not equal.
    diff = np.abs(lv - lo).max()
    pa, pb = log_softmax(lv), log_softmax(lo)
    kl = (np.exp(pa) * (pa - pb)).sum(-1).mean()
    top1 = (lv.argmax(-1) == lo.argmax(-1)).mean()
    print(f"\n[compile q8_0 -> f32] vs the Q8_0 vindex: max |logit delta| {diff:.3g}, mean KL {kl:.3g} nats, top-1 {top1:.3f}")
    assert 0 < kl < 0.01 and top1 > 0.9


def test_shards_dtype_and_gguf_output(compiled, tmp_path, text_file):
    vx, _, _ = compiled("qwen2")
    out = tmp_path / "sharded"
    rep = json.loads(larql("compile", vx, "-o", out, "--max-shard-mb", "0.05", "--dtype", "bf16", "--json").stdout)
    idx = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert rep["shards"] == len(shards) > 2 and not (out / "model.safetensors").exists()
    assert sorted(set(idx["weight_map"].values())) == shards
    sizes = {}
    for s in shards:
        with open(out / s, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        for name, t in header.items():
            if name != "__metadata__":
                assert idx["weight_map"][name] == s and t["dtype"] == "BF16"
                sizes[name] = t["data_offsets"][1] - t["data_offsets"][0]
    assert idx["metadata"]["total_size"] == sum(sizes.values())
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    lb, _ = logits(out, text_file, tmp_path, "bf16")
    lv, _ = logits(vx, text_file, tmp_path, "vx")
    assert np.abs(lb - lv).max() < 0.5  # bf16 weights: close, not equal
    # A .gguf output is the GGUF export.
    larql("compile", vx, "-o", tmp_path / "c.gguf")
    larql("export", vx, "-o", tmp_path / "e.gguf")
    assert (tmp_path / "c.gguf").read_bytes() == (tmp_path / "e.gguf").read_bytes()


def test_bad_inputs_and_outputs(compiled, tmp_path):
    vx, out, _ = compiled("qwen2")
    r = larql("compile", tmp_path / "nope.vindex", "-o", tmp_path / "x", check=False)
    assert r.returncode == 1 and "nope.vindex" in r.stderr, r.stderr
    r = larql("compile", vx, "-o", out, check=False)
    assert r.returncode == 1 and "--force" in r.stderr, r.stderr
    r = larql("compile", vx, "-o", vx / "inside", check=False)
    assert r.returncode == 1 and "inside" in r.stderr, r.stderr
    r = larql("compile", vx, "-o", tmp_path / "no" / "such" / "dir", check=False)
    assert r.returncode == 1 and "does not exist" in r.stderr, r.stderr
    r = larql("compile", vx, "-o", tmp_path / "y", "--dtype", "f8", check=False)
    assert r.returncode == 2, r.stderr
    r = larql("compile", vx, "-o", tmp_path / "y.gguf", "--dtype", "f16", check=False)
    assert r.returncode == 2 and "--dtype is for a Hugging Face directory" in r.stderr, r.stderr
    f = tmp_path / "file"
    f.write_text("x")
    r = larql("compile", vx, "-o", f, "--force", check=False)
    assert r.returncode == 1 and "not a directory" in r.stderr and f.read_text() == "x", r.stderr
    browse = tmp_path / "browse.vindex"
    larql("extract", FIXTURES / "qwen2" / "qwen2-f32.gguf", "-o", browse, "--level", "browse")
    r = larql("compile", browse, "-o", tmp_path / "b", check=False)
    assert r.returncode == 1 and "--level inference" in r.stderr and not (tmp_path / "b").exists(), r.stderr
    # --force replaces a compiled directory whole.
    larql("compile", vx, "-o", out, "--force")
    assert (out / "model.safetensors").exists() and not list(out.parent.glob("hf.partial-*"))


def test_kill9_leaves_the_old_directory_or_the_new_one(compiled, tmp_path):
    vx, _, _ = compiled("qwen2_moe")
    target = tmp_path / "k"
    cmd = [str(peer.larql_bin()), "compile", str(vx), "-o", str(target), "--force"]
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)
    whole = time.monotonic() - t0
    want = load_dir(target)
    killed = partial = 0
    trials = 24
    for i in range(trials):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(whole * 1.5 * (i + 0.5) / trials)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed += proc.returncode == -signal.SIGKILL
        partial += bool(list(tmp_path.glob("k.partial-*")))
        # The old directory or the new one; between replace_directory's two renames, the old one
        # under k.old-<pid>.
        where = target if target.is_dir() else next(tmp_path.glob("k.old-*"))
        got = load_dir(where)
        assert sorted(got) == sorted(want) and all(np.array_equal(got[k], want[k]) for k in want)
        assert json.loads((where / "config.json").read_text())
    print(f"\n[compile kill -9] {killed} of {trials} runs killed before they ended, {partial} leaving a staging "
          f"directory (a run takes {whole:.2f} s)")
    subprocess.run(cmd, check=True, capture_output=True)
    assert not list(tmp_path.glob("k.partial-*"))  # the next compile removes dead staging directories
