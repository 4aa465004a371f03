"""The `llama` family file against llama.cpp: a synthetic Llama-shaped model (adjacent-pair RoPE,
Q/K/V biases, grouped-query attention, SiLU-gated FFN, untied or tied output), written at test
time with the `gguf` package into a tmp dir, scored by larql (`perplexity --logits-out`) and by
llama.cpp (llama-cpp-python, logits_all) on the same ids.

Bars: those of the Gemma parity (test_parity.py), relative to llama.cpp's own noise floor
(llama.cpp f16 K/V vs f32 K/V on the same ids): mean KL <= max(0.01, 1.5 x floor), top-1 >=
min(0.99, floor - 0.02), and the sanity bars top-1 >= 0.90, mean KL <= 0.03.

The biases are checked to matter: llama.cpp's logits on the same file with the biases zeroed
differ from those with them by far more than the bars (so a larql that ignored them would fail),
and the same holds for the RoPE form (the NeoX pairing would fail: see test_neox_pairing_would_fail).
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import peer
from test_parity import KL_ABS, KL_FLOOR_FACTOR, SANITY_KL, SANITY_TOP1, TOP1_ABS, TOP1_FLOOR_SLACK

gguf = pytest.importorskip("gguf")

SP = "\u2581"
WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "and", "ran", "to", "big", "red", "hat", "in",
         "sun", "fox"]
HIDDEN, FFN, HEADS, KV_HEADS, LAYERS, CTX = 64, 128, 4, 2, 3, 256
HEAD_DIM = HIDDEN // HEADS
TEXT = ("the big red cat sat on the mat and the dog ran to the sun . a fox in a hat ran and sat on "
        "a big mat ; the sun , the fox and the red dog sat in the hat and ran to the cat .")


def vocabulary():
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    pieces = [SP + w for w in WORDS] + WORDS + [SP, ".", ",", ";", SP + ".", SP + ",", SP + ";"]
    pieces += [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in pieces]
    for i, p in enumerate(pieces):
        tokens.append(p)
        scores.append(-1.0 - 0.01 * i)
        types.append(1)
    return tokens, scores, types


def add_vocabulary(w, tokens, scores, types):
    """The SentencePiece vocabulary of vocabulary() as GGUF tokenizer.ggml.* metadata (unk 0,
    BOS 1 added, EOS 2)."""
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def write_llama(path, *, biases: bool, tied: bool, dtype=np.float32, zero_biases=False, seed=7,
                rope_dims=HEAD_DIM, chat_template=None):
    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    V = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("synthetic-llama")
    w.add_block_count(LAYERS)
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(rope_dims)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    add_vocabulary(w, tokens, scores, types)

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(dtype)

    def norm(n):
        return rng.uniform(0.8, 1.2, n).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(V, HIDDEN, 1.0))
    w.add_tensor("output_norm.weight", norm(HIDDEN))
    if not tied:
        w.add_tensor("output.weight", mat(V, HIDDEN, 0.5))
    q_dim, kv_dim = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", norm(HIDDEN))
        w.add_tensor(b + "attn_q.weight", mat(q_dim, HIDDEN, 0.6 / np.sqrt(HIDDEN) * 4))
        w.add_tensor(b + "attn_k.weight", mat(kv_dim, HIDDEN, 0.6 / np.sqrt(HIDDEN) * 4))
        w.add_tensor(b + "attn_v.weight", mat(kv_dim, HIDDEN, 1.0 / np.sqrt(HIDDEN)))
        if biases:
            for n, d in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                bias = rng.standard_normal(d).astype(np.float32) * 0.5
                w.add_tensor(b + f"attn_{n}.bias", np.zeros(d, np.float32) if zero_biases else bias)
        w.add_tensor(b + "attn_output.weight", mat(HIDDEN, q_dim, 1.0 / np.sqrt(q_dim)))
        w.add_tensor(b + "ffn_norm.weight", norm(HIDDEN))
        w.add_tensor(b + "ffn_gate.weight", mat(FFN, HIDDEN, 1.0 / np.sqrt(HIDDEN)))
        w.add_tensor(b + "ffn_up.weight", mat(FFN, HIDDEN, 1.0 / np.sqrt(HIDDEN)))
        w.add_tensor(b + "ffn_down.weight", mat(HIDDEN, FFN, 1.0 / np.sqrt(FFN)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def llama_scores(path, ids, kv_f32):
    llm = peer.load_llama(n_ctx=CTX, logits_all=True, model=path, kv_f32=kv_f32)
    out = np.array(peer.llama_logits(llm, ids), dtype=np.float32, copy=True)
    del llm
    gc.collect()
    return out


VARIANTS = {
    "f32-biases-untied": dict(biases=True, tied=False, dtype=np.float32),
    "f16-tied-no-biases": dict(biases=False, tied=True, dtype=np.float16),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def scored(request, larql_bin, llama_cpp_mod, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llama-" + request.param)
    path = write_llama(tmp / "synthetic-llama.gguf", **VARIANTS[request.param])
    txt = tmp / "text.txt"
    txt.write_text(TEXT, encoding="utf-8")
    npy = tmp / "larql.npy"
    lq = peer.larql_perplexity(txt, logits_out=npy, model=path)
    ids = lq["ids"]
    mats = {"larql": np.load(npy), "llama": llama_scores(path, ids, False),
            "llama_f32kv": llama_scores(path, ids, True)}
    return {"name": request.param, "path": path, "ids": ids, "mats": mats, "tmp": tmp}


def test_tokenization_matches_llama(scored):
    llm = peer.load_llama(n_ctx=CTX, model=scored["path"])
    assert peer.llama_tokenize(llm, TEXT, special=False) == scored["ids"]
    assert 40 <= len(scored["ids"]) <= CTX


def test_logits_match_llama_within_its_noise(scored):
    m, ids = scored["mats"], scored["ids"]
    a = peer.compare_logits(m["llama"], m["larql"], ids).summary()
    b = peer.compare_logits(m["llama"], m["llama_f32kv"], ids).summary()
    peer.record_results(f"llama-family-{scored['name']}", {"a": a, "b": b})
    kl_bar = max(KL_ABS, KL_FLOOR_FACTOR * b["kl_mean"])
    top1_bar = min(TOP1_ABS, b["top1_agreement"] - TOP1_FLOOR_SLACK)
    assert a["kl_mean"] <= kl_bar, f"{scored['name']}: mean KL {a['kl_mean']:.4g} > {kl_bar:.4g} (floor {b})"
    assert a["top1_agreement"] >= top1_bar, f"{scored['name']}: top-1 {a['top1_agreement']:.4f} < {top1_bar:.4f}"
    assert a["top1_agreement"] >= SANITY_TOP1 and a["kl_mean"] <= SANITY_KL, a


def test_biases_matter_to_llama(scored, tmp_path):
    """A larql that ignored the biases would fail the bars: llama.cpp itself moves far with them zeroed."""
    spec = VARIANTS[scored["name"]]
    if not spec["biases"]:
        pytest.skip("variant without biases")
    zeroed = write_llama(tmp_path / "zeroed.gguf", **spec, zero_biases=True)
    d = peer.compare_logits(scored["mats"]["llama"], llama_scores(zeroed, scored["ids"], False),
                            scored["ids"]).summary()
    assert d["kl_mean"] > 10 * SANITY_KL, d


def test_neox_pairing_would_fail(scored, tmp_path):
    """The RoPE form matters: the same model with each head's dimensions permuted so that NeoX
    pairs (i, i + d/2) hold what adjacent pairs (2i, 2i + 1) held is the same model under NeoX;
    under llama.cpp's adjacent pairing it is a different one, far outside the bars."""
    spec = dict(VARIANTS[scored["name"]])
    spec["biases"] = False  # weights only: enough to show the pairing is observed
    plain = write_llama(tmp_path / "plain.gguf", **spec, seed=11)
    perm = write_llama(tmp_path / "perm.gguf", **spec, seed=11)
    # Rewrite perm's q/k rows: new head row j <- old row perm[j], with perm interleaving halves.
    r = gguf.GGUFReader(str(perm), "r+")
    idx = np.concatenate([np.arange(0, HEAD_DIM, 2), np.arange(1, HEAD_DIM, 2)])
    for t in r.tensors:
        if t.name.endswith(("attn_q.weight", "attn_k.weight")):
            data = t.data
            rows = data.reshape(-1, HEAD_DIM, data.shape[-1])
            rows[:] = rows[:, idx, :].copy()
    del r
    ids = scored["ids"]
    d = peer.compare_logits(llama_scores(plain, ids, False), llama_scores(perm, ids, False), ids).summary()
    assert d["kl_mean"] > 10 * SANITY_KL, d


def test_partial_rotary_is_refused(larql_bin, tmp_path):
    path = write_llama(tmp_path / "partial.gguf", biases=False, tied=True, rope_dims=HEAD_DIM // 2)
    proc = peer.run_larql(["show", path], check=False)
    assert proc.returncode != 0
    assert "llama.rope.dimension_count = 8" in proc.stderr and "partial rotary" in proc.stderr, proc.stderr


def test_chat_uses_the_models_template(larql_bin, llama_cpp_mod, tmp_path):
    """`run --chat` on a model whose template is Llama 2's: the prompt ids are llama.cpp's
    tokenization of llama.cpp's own llama_chat_apply_template output (with BOS)."""
    import ctypes
    tmpl = "{{ bos_token + '[INST] ' + message['content'].strip() + ' [/INST]' }}"
    path = write_llama(tmp_path / "chat.gguf", biases=True, tied=False, chat_template=tmpl)
    out = peer.larql_generate(" the  cat ", 2, model=path, chat=True)
    msg = (llama_cpp_mod.llama_chat_message * 1)(
        llama_cpp_mod.llama_chat_message(role=b"user", content=b" the  cat "))
    buf = ctypes.create_string_buffer(1024)
    n = llama_cpp_mod.llama_chat_apply_template(tmpl.encode(), msg, 1, True, buf, len(buf))
    text = buf.raw[:n].decode()
    # Not stripped: llama.cpp strips only when the source says `content.strip()` (this says `content'].strip()`).
    assert text == "[INST]  the  cat  [/INST]", text
    llm = peer.load_llama(n_ctx=CTX, model=path)
    assert out["prompt_ids"] == peer.llama_tokenize(llm, text, special=True)
    # Without a template (and no turn markers in this vocabulary) chat is refused clearly.
    bare = write_llama(tmp_path / "bare.gguf", biases=False, tied=True)
    proc = peer.run_larql(["run", bare, "hi", "--chat", "-n", "1"], check=False)
    assert proc.returncode != 0 and "chat template" in proc.stderr, proc.stderr
