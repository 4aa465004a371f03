"""Every architecture record against llama.cpp on synthetic GGUF files of its family.

For each family a small random model is written at test time with the `gguf` package, in the
tensor layout and metadata llama.cpp's loader for that architecture expects
(llama.cpp src/models/<arch>.cpp), scored by larql (`perplexity --logits-out`) and by llama.cpp
(llama-cpp-python, logits_all) on the same ids. Bars: test_parity.py's, relative to llama.cpp's
own noise floor (f16 vs f32 K/V), as in test_llama_family.py.

Each family's distinguishing feature is checked to matter: llama.cpp's logits on the same file
with the feature removed (biases zeroed, q/k norms set to 1, soft-capping or the window taken
out, rope_freqs removed, the fused halves swapped) move far beyond the bars, so a larql that
ignored it would fail.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import peer
from test_llama_family import TEXT, add_vocabulary, vocabulary
from test_parity import KL_ABS, KL_FLOOR_FACTOR, SANITY_KL, SANITY_TOP1, TOP1_ABS, TOP1_FLOOR_SLACK

gguf = pytest.importorskip("gguf")

HIDDEN, FFN, HEADS, KV_HEADS, LAYERS, CTX = 64, 128, 4, 2, 3, 256

# Each family: the architecture name and what its file carries.
FAMILIES = {
    # Qwen2: Q/K/V biases, NeoX pairing.
    "qwen2": dict(arch="qwen2", head_dim=16, biases=True),
    # Qwen3: per-head q/k RMSNorm, head_dim not hidden / heads.
    "qwen3": dict(arch="qwen3", head_dim=32, qk_norm=True),
    # Gemma 2: post norms, soft-capped attention and final logits, a window on layers 0 and 2.
    "gemma2": dict(arch="gemma2", head_dim=16, post_norms=True, softcap=(3.0, 6.0), window=8),
    # Phi-3: fused attn_qkv and ffn_up (gate rows first).
    "phi3": dict(arch="phi3", head_dim=16, fused=True),
    # Llama 3.1: RoPE frequency factors (rope_freqs.weight), untied output.
    "llama31": dict(arch="llama", head_dim=16, rope_freqs=True, untied=True),
    # Mixtral (llama.cpp's "llama" with experts): 4 experts, top-2, weights renormalised.
    "mixtral": dict(arch="llama", head_dim=16, moe=(4, 2, 96, 0)),
    # Qwen2-MoE: 8 experts, top-2 (softmax probabilities as they are), a shared expert with a
    # sigmoid gate, Q/K/V biases.
    "qwen2moe": dict(arch="qwen2moe", head_dim=16, biases=True, untied=True, moe=(8, 2, 32, 64)),
}


def rope_factors(head_dim):
    # Llama 3.1's shape of correction (convert_hf_to_gguf.py LlamaModel), at a small original context.
    from math import pi
    base, factor, low, high, orig = 10000.0, 8.0, 1.0, 4.0, 64.0
    out = []
    for i in range(head_dim // 2):
        freq = 1.0 / base ** (2 * i / head_dim)
        wavelen = 2 * pi / freq
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            s = (orig / wavelen - low) / (high - low)
            out.append(1 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def write_family(path, arch, head_dim, *, biases=False, qk_norm=False, post_norms=False, softcap=None,
                 window=None, fused=False, rope_freqs=False, untied=False, moe=None, drop=(), bad=None, seed=5):
    """A random model of `arch`; `drop` removes features (to show they matter to llama.cpp)."""
    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    V = len(tokens)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("synthetic")  # not the family's name: llama.cpp patches Phi-3 vocabularies by name
    w.add_block_count(LAYERS)
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    if softcap and "softcap" not in drop:
        w.add_attn_logit_softcapping(softcap[0])
        w.add_final_logit_softcapping(softcap[1])
    if window:
        w.add_sliding_window(window if "window" not in drop else 4096)
    if moe:
        n_exp, n_used, ffn_exp, ffn_shared = moe
        w.add_expert_count(0 if bad == "no_experts" else n_exp)
        w.add_expert_used_count(n_exp + 1 if bad == "top_k" else n_used if "routing" not in drop else 1)
        if arch != "llama":  # Mixtral's experts are feed_forward_length wide
            w.add_expert_feed_forward_length(ffn_exp)
        if ffn_shared:
            w.add_expert_shared_feed_forward_length(ffn_shared)
    add_vocabulary(w, tokens, scores, types)

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm(n):
        return rng.uniform(0.6, 1.4, n).astype(np.float32)

    if rope_freqs:
        f = rope_factors(head_dim)
        w.add_tensor("rope_freqs.weight", np.ones_like(f) if "rope_freqs" in drop else f)
    w.add_tensor("token_embd.weight", mat(V, HIDDEN, 1.0 if arch != "gemma2" else 0.15))
    w.add_tensor("output_norm.weight", norm(HIDDEN))
    if untied:
        w.add_tensor("output.weight", mat(V, HIDDEN, 0.5))
    q_dim, kv_dim = HEADS * head_dim, KV_HEADS * head_dim
    for i in range(LAYERS):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", norm(HIDDEN))
        wq = mat(q_dim, HIDDEN, 2.4 / np.sqrt(HIDDEN))
        wk = mat(kv_dim, HIDDEN, 2.4 / np.sqrt(HIDDEN))
        wv = mat(kv_dim, HIDDEN, 1.0 / np.sqrt(HIDDEN))
        if fused:
            w.add_tensor(b + "attn_qkv.weight", np.concatenate([wq, wk, wv]))
        else:
            w.add_tensor(b + "attn_q.weight", wq)
            w.add_tensor(b + "attn_k.weight", wk)
            w.add_tensor(b + "attn_v.weight", wv)
        if biases:
            for n, d in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                bias = rng.standard_normal(d).astype(np.float32) * 0.5
                w.add_tensor(b + f"attn_{n}.bias", np.zeros(d, np.float32) if "biases" in drop else bias)
        if qk_norm:
            for n in ("q", "k"):
                g = rng.uniform(0.3, 2.5, head_dim).astype(np.float32)
                w.add_tensor(b + f"attn_{n}_norm.weight", np.ones(head_dim, np.float32) if "qk_norm" in drop else g)
        w.add_tensor(b + "attn_output.weight", mat(HIDDEN, q_dim, 1.0 / np.sqrt(q_dim)))
        if post_norms:
            w.add_tensor(b + "post_attention_norm.weight", norm(HIDDEN))
        w.add_tensor(b + "ffn_norm.weight", norm(HIDDEN))
        if moe:
            n_exp, n_used, ffn_exp, ffn_shared = moe
            fe = FFN if arch == "llama" else ffn_exp
            w.add_tensor(b + "ffn_gate_inp.weight", mat(n_exp, HIDDEN, 1.5))
            w.add_tensor(b + "ffn_gate_exps.weight", (rng.standard_normal((n_exp, fe, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32))
            if not (bad == "missing_expert" and i == 1):
                w.add_tensor(b + "ffn_up_exps.weight", (rng.standard_normal((n_exp, fe, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32))
            w.add_tensor(b + "ffn_down_exps.weight", (rng.standard_normal((n_exp, HIDDEN, fe)) / np.sqrt(fe)).astype(np.float32))
            if ffn_shared:
                gi = mat(1, HIDDEN, 0.5)[0]
                # "shared": the gate's sign flipped (llama.cpp computes sigmoid as silu(x) / x, NaN at 0).
                w.add_tensor(b + "ffn_gate_inp_shexp.weight", gi * (-1 if "shared" in drop else 1))
                w.add_tensor(b + "ffn_gate_shexp.weight", mat(ffn_shared, HIDDEN, 1.0 / np.sqrt(HIDDEN)))
                w.add_tensor(b + "ffn_up_shexp.weight", mat(ffn_shared, HIDDEN, 1.0 / np.sqrt(HIDDEN)))
                w.add_tensor(b + "ffn_down_shexp.weight", mat(HIDDEN, ffn_shared, 1.0 / np.sqrt(ffn_shared)))
            if post_norms:
                w.add_tensor(b + "post_ffw_norm.weight", norm(HIDDEN))
            continue
        gate = mat(FFN, HIDDEN, 1.0 / np.sqrt(HIDDEN))
        up = mat(FFN, HIDDEN, 1.0 / np.sqrt(HIDDEN))
        if fused:
            halves = [up, gate] if "gate_first" in drop else [gate, up]
            w.add_tensor(b + "ffn_up.weight", np.concatenate(halves))
        else:
            w.add_tensor(b + "ffn_gate.weight", gate)
            w.add_tensor(b + "ffn_up.weight", up)
        w.add_tensor(b + "ffn_down.weight", mat(HIDDEN, FFN, 1.0 / np.sqrt(FFN)))
        if post_norms:
            w.add_tensor(b + "post_ffw_norm.weight", norm(HIDDEN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def llama_scores(path, ids, kv_f32=False):
    llm = peer.load_llama(n_ctx=CTX, logits_all=True, model=path, kv_f32=kv_f32)
    out = np.array(peer.llama_logits(llm, ids), dtype=np.float32, copy=True)
    del llm
    gc.collect()
    return out


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def scored(request, larql_bin, llama_cpp_mod, tmp_path_factory):
    spec = FAMILIES[request.param]
    tmp = tmp_path_factory.mktemp("family-" + request.param)
    path = write_family(tmp / f"{request.param}.gguf", **spec)
    txt = tmp / "text.txt"
    txt.write_text(TEXT, encoding="utf-8")
    npy = tmp / "larql.npy"
    lq = peer.larql_perplexity(txt, logits_out=npy, model=path)
    ids = lq["ids"]
    mats = {"larql": np.load(npy), "llama": llama_scores(path, ids), "llama_f32kv": llama_scores(path, ids, True)}
    return {"name": request.param, "spec": spec, "path": path, "ids": ids, "mats": mats}


def test_logits_match_llama_cpp(scored):
    m, ids = scored["mats"], scored["ids"]
    assert len(ids) >= 40
    a = peer.compare_logits(m["llama"], m["larql"], ids).summary()
    b = peer.compare_logits(m["llama"], m["llama_f32kv"], ids).summary()
    peer.record_results(f"family-{scored['name']}", {"a": a, "b": b})
    kl_bar = max(KL_ABS, KL_FLOOR_FACTOR * b["kl_mean"])
    top1_bar = min(TOP1_ABS, b["top1_agreement"] - TOP1_FLOOR_SLACK)
    assert a["kl_mean"] <= kl_bar, f"{scored['name']}: mean KL {a['kl_mean']:.4g} > {kl_bar:.4g} (floor {b})"
    assert a["top1_agreement"] >= top1_bar, f"{scored['name']}: top-1 {a['top1_agreement']:.4f} < {top1_bar:.4f}"
    assert a["top1_agreement"] >= SANITY_TOP1 and a["kl_mean"] <= SANITY_KL, a


FEATURES = {
    "qwen2": ["biases"],
    "qwen3": ["qk_norm"],
    "gemma2": ["softcap", "window"],
    "phi3": ["gate_first"],
    "llama31": ["rope_freqs"],
    "mixtral": ["routing"],
    "qwen2moe": ["routing", "shared"],
}


def test_each_feature_matters_to_llama_cpp(scored, tmp_path):
    """The family's feature moves llama.cpp's own logits far beyond the bars, so a larql that
    ignored it could not pass test_logits_match_llama_cpp."""
    for feature in FEATURES[scored["name"]]:
        without = write_family(tmp_path / f"without-{feature}.gguf", **scored["spec"], drop=(feature,))
        d = peer.compare_logits(scored["mats"]["llama"], llama_scores(without, scored["ids"]), scored["ids"]).summary()
        assert d["kl_mean"] > 10 * KL_ABS, (feature, d)


def test_show_names_the_family(scored):
    proc = peer.run_larql(["show", str(scored["path"]), "--json"])
    import json
    info = json.loads(proc.stdout)
    text = json.dumps(info)
    assert f'"{scored["spec"]["arch"]}"' in text, text[:400]


def test_unknown_architecture_is_refused_naming_it(larql_bin, tmp_path):
    path = write_family(tmp_path / "mamba.gguf", "qwen2", 16, biases=True)
    r = gguf.GGUFReader(str(path), "r+")
    # Rename the architecture in place: same length, so the file stays valid ("qwen2" -> "qwenX").
    field = r.fields["general.architecture"]
    field.parts[field.data[0]][:] = np.frombuffer(b"qwenX", dtype=np.uint8)
    del r
    proc = peer.run_larql(["show", str(path)], check=False)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)  # docs/cli.md "Exit codes": a bad model file
    assert "qwenX" in proc.stderr and "qwen2" in proc.stderr, proc.stderr


@pytest.mark.parametrize("bad, needle", [
    ("no_experts", "llama.expert_count = 0"),
    ("top_k", "llama.expert_used_count = 5 is outside [1, llama.expert_count = 4]"),
    ("missing_expert", "blk.1.ffn_up_exps.weight"),
])
def test_bad_mixture_of_experts_is_refused_naming_the_key(bad, needle, larql_bin, tmp_path):
    path = write_family(tmp_path / f"{bad}.gguf", **FAMILIES["mixtral"], bad=bad)
    proc = peer.run_larql(["run", str(path), "the cat", "-n", "1"], check=False)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)  # docs/cli.md "Exit codes": a bad model file
    assert needle in proc.stderr, proc.stderr
