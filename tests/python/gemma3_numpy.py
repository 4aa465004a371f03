"""An independent Gemma 3 forward pass in numpy (float64), for checking larql's forward pass.

Written from the published architecture (Gemma Team 2025, "Gemma 3 Technical Report"; Hugging
Face `modeling_gemma3.py`; the facts in docs/gemma3.md), not from larql's C++: weights come from
the `gguf` package's dequantisation, every product runs in float64 with no quantised activations.
Its logits are the "exact" answer for the weights in the file.

    w = load_gguf(path)            # weights and config from a Gemma 3 GGUF
    w = load_hf(directory)         # or from a Hugging Face directory (config.json + safetensors)
    logits = forward(w, ids)       # [len(ids), vocab] float32 (computed in float64)

Per layer (x: [T, hidden] residual):
    h = rmsnorm(x) * attn_norm;  q, k, v = h Wq^T, h Wk^T, h Wv^T  (per head: rmsnorm * q_norm / k_norm)
    rope (NeoX halves; base 10k on sliding layers, rope.freq_base on global ones)
    scores = q k^T / sqrt(query_pre_attn_scalar) (GQA), causal, sliding layers see the last
    `sliding_window` positions (own included); softmax; attn = scores v
    x += rmsnorm(attn Wo^T) * post_attention_norm
    h = rmsnorm(x) * ffn_norm; x += rmsnorm((gelu_tanh(h Wgate^T) * h Wup^T) Wdown^T) * post_ffw_norm
then logits = (rmsnorm(x) * output_norm) E^T with the unscaled embedding E (tied head).
GGUF norm weights already hold Gemma's (1 + w).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf_table import dequantize_tensor, read_gguf


@dataclass
class Config:
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    eps: float
    sliding_window: int
    rope_global: float
    rope_local: float = 10_000.0   # not in the file: Gemma 3 family default
    global_every: int = 6          # layer i is global iff (i + 1) % 6 == 0 (family default)
    query_pre_attn_scalar: float = 0.0  # 0: head_dim

    def is_global(self, layer: int) -> bool:
        return (layer + 1) % self.global_every == 0


def load_gguf(path: Path) -> dict:
    mm, meta, table = read_gguf(path)
    assert meta["general.architecture"] == "gemma3", meta["general.architecture"]
    a = "gemma3."
    cfg = Config(
        n_layers=int(meta[a + "block_count"]),
        hidden=int(meta[a + "embedding_length"]),
        n_heads=int(meta[a + "attention.head_count"]),
        n_kv_heads=int(meta[a + "attention.head_count_kv"]),
        head_dim=int(meta[a + "attention.key_length"]),
        eps=float(meta[a + "attention.layer_norm_rms_epsilon"]),
        sliding_window=int(meta[a + "attention.sliding_window"]),
        rope_global=float(meta[a + "rope.freq_base"]),
    )
    cfg.query_pre_attn_scalar = cfg.head_dim
    w = {"config": cfg}
    for name in table:
        w[name] = dequantize_tensor(mm, table, name)
    return w


# Hugging Face Gemma 3 per-layer names -> the GGUF names the forward pass uses (also used by
# scripts/hf_from_gguf.py the other way round).
HF_LAYER_NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight", "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def load_hf(directory: Path) -> dict:
    """Weights and config from a Hugging Face Gemma 3 directory: config.json and
    model.safetensors (or the shards model.safetensors.index.json names). Hugging Face stores
    Gemma's norm weights as w; the multiplier 1 + w is formed here."""
    import json

    from safetensors.numpy import load_file

    directory = Path(directory)
    cfg_json = json.loads((directory / "config.json").read_text())
    cfg = Config(
        n_layers=int(cfg_json["num_hidden_layers"]), hidden=int(cfg_json["hidden_size"]),
        n_heads=int(cfg_json["num_attention_heads"]), n_kv_heads=int(cfg_json["num_key_value_heads"]),
        head_dim=int(cfg_json["head_dim"]), eps=float(cfg_json["rms_norm_eps"]),
        sliding_window=int(cfg_json["sliding_window"]), rope_global=float(cfg_json["rope_theta"]),
        rope_local=float(cfg_json.get("rope_local_base_freq", 10_000.0)),
        query_pre_attn_scalar=float(cfg_json.get("query_pre_attn_scalar", cfg_json["head_dim"])),
    )
    index = directory / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    w = {"config": cfg}
    for f in files:
        for name, arr in load_file(str(directory / f)).items():
            if name == "model.embed_tokens.weight":
                key = "token_embd.weight"
            elif name == "model.norm.weight":
                key = "output_norm.weight"
            elif name == "lm_head.weight":
                key = "output.weight"
            else:
                _, _, layer, rest = name.split(".", 3)
                key = f"blk.{layer}.{HF_LAYER_NAMES[rest]}"
            arr = arr.astype(np.float32)
            w[key] = arr + 1.0 if key.endswith("norm.weight") else arr
    return w


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope_neox(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """x [T, heads, head_dim]; dimension i pairs with i + head_dim/2."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d // 2, dtype=np.float64) * 2.0 / d)
    ang = positions[:, None].astype(np.float64) * inv[None, :]          # [T, d/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(w: dict, ids, chunk_vocab: int = 32768, last_attention: dict | None = None) -> np.ndarray:
    """Logits [len(ids), vocab] (float32) for the token ids, positions 0..len(ids)-1. With
    `last_attention` (a dict), also fills it with layer -> [n_heads, len(ids)]: the last
    position's attention weights per head (0 outside its window)."""
    cfg: Config = w["config"]
    ids = np.asarray(ids, dtype=np.int64)
    T = ids.size
    E = w["token_embd.weight"]
    x = E[ids].astype(np.float64) * math.sqrt(cfg.hidden)
    pos = np.arange(T)
    hd, nh, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    group = nh // nkv
    scale = 1.0 / math.sqrt(cfg.query_pre_attn_scalar)
    causal = pos[None, :] <= pos[:, None]
    local = causal & (pos[:, None] - pos[None, :] < cfg.sliding_window)
    for li in range(cfg.n_layers):
        p = f"blk.{li}."
        f64 = lambda n: w[p + n].astype(np.float64)  # noqa: E731
        h = rmsnorm(x, f64("attn_norm.weight"), cfg.eps)
        q = (h @ f64("attn_q.weight").T).reshape(T, nh, hd)
        k = (h @ f64("attn_k.weight").T).reshape(T, nkv, hd)
        v = (h @ f64("attn_v.weight").T).reshape(T, nkv, hd)
        q = rmsnorm(q, f64("attn_q_norm.weight"), cfg.eps)
        k = rmsnorm(k, f64("attn_k_norm.weight"), cfg.eps)
        base = cfg.rope_global if cfg.is_global(li) else cfg.rope_local
        q, k = rope_neox(q, pos, base), rope_neox(k, pos, base)
        mask = causal if cfg.is_global(li) else local
        attn = np.empty((T, nh, hd))
        for head in range(nh):
            g = head // group
            s = (q[:, head, :] @ k[:, g, :].T) * scale
            s = np.where(mask, s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            if last_attention is not None:
                last_attention.setdefault(li, np.zeros((nh, T)))[head] = s[-1]
            attn[:, head, :] = s @ v[:, g, :]
        o = attn.reshape(T, nh * hd) @ f64("attn_output.weight").T
        x = x + rmsnorm(o, f64("post_attention_norm.weight"), cfg.eps)
        h = rmsnorm(x, f64("ffn_norm.weight"), cfg.eps)
        ff = gelu_tanh(h @ f64("ffn_gate.weight").T) * (h @ f64("ffn_up.weight").T)
        d = ff @ f64("ffn_down.weight").T
        x = x + rmsnorm(d, f64("post_ffw_norm.weight"), cfg.eps)
    hn = rmsnorm(x, w["output_norm.weight"].astype(np.float64), cfg.eps)
    head = w.get("output.weight", E)
    out = np.empty((T, head.shape[0]), dtype=np.float32)
    for r in range(0, head.shape[0], chunk_vocab):
        out[:, r:r + chunk_vocab] = hn @ head[r:r + chunk_vocab].astype(np.float64).T
    return out
