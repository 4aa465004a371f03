#!/usr/bin/env python3
"""Build tiny random-initialised reference models of several architecture families.

For each family this writes tests/model/data/families/<name>/:

    config.json, model.safetensors (float32), tokenizer.json, tokenizer_config.json
        what transformers' save_pretrained writes for a model built from a config object
        (no download); SentencePiece families also get tokenizer.model.
    <name>-f32.gguf, <name>-q8_0.gguf
        llama.cpp's own convert_hf_to_gguf.py on that directory (--outtype f32 / q8_0).
    reference.json
        evaluation-text token ids, the greedy 32-token continuation of a short prompt
        (transformers generate(do_sample=False), float32, eager attention), the top-1 logit margin
        at every greedy step and evaluation position, versions, seed, what the converter
        needed, family notes (known llama.cpp differences), and
        "sensitivity_max_abs_logit_change": the largest logit change that each plausible
        misreading (dropped bias, wrong RoPE pairing, no sliding window, ...) causes.
    logits.npy
        transformers' float32 logits [n_positions, vocab] for the evaluation ids (one forward
        pass, no cache).

Nobody on the team wrote these models: the weights come from transformers' own model classes,
the GGUF files from llama.cpp's converter, the tokenizers from the `tokenizers` /
`sentencepiece` trainers on local text (data/apollo/document.txt, data/accuracy/*.jsonl).
Every parameter is re-drawn from a seeded generator after transformers' init (norm weights
around 1, around 0 for Gemma's 1+w norms; nonzero biases; router weights; embeddings) at a scale
that gives logits a spread of several units, so convention errors show up far above 1e-3.

Families (in build order): llama3 qwen2 qwen3 mixtral qwen2_moe gemma2 mistral llama2 phi3
phi3_longrope.

Regenerate (needs torch, transformers, tokenizers, sentencepiece, safetensors, numpy; CI never
runs this):

    pip download llama-cpp-python==0.3.36 --no-binary :all: --no-deps -d /tmp/sdist
    tar xzf /tmp/sdist/llama_cpp_python-0.3.36.tar.gz -C /tmp/sdist
    python scripts/make_family_fixtures.py \\
        --converter /tmp/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py \\
        [--only NAME] [--out DIR]

The converter (and its gguf-py, which it puts on sys.path itself) is imported as a module so
that its BPE pre-tokenizer check can be taught our tokenizers: convert_hf_to_gguf.py identifies
a pre-tokenizer by the sha256 of the token ids of a test string and refuses unknown hashes; ours
are unknown because the vocabularies are tiny, so the script maps each family's hash to the
llama.cpp pre-tokenizer whose regex it was trained with ("llama-bpe" or "qwen2"). Nothing else
in the converter is changed; reference.json's "converter" notes say what was done.

Check against llama.cpp (needs numpy and llama-cpp-python, e.g. the project's .venv):

    .venv/bin/python scripts/make_family_fixtures.py --check [--only NAME] [--out DIR]

prints, per family and GGUF, llama.cpp-vs-transformers mean KL and top-1 agreement over the
evaluation ids, tokenization agreement and greedy agreement. It writes nothing.

Running the build twice gives byte-identical files (single-threaded torch, seeded generators,
fixed corpus; the corpus sha256 is recorded).
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from family_fixtures_tokenizers import (BPE_VOCAB, CHATML_TEMPLATE, CORPUS_FILES, GEMMA_TEMPLATE,  # noqa: E402
                                        INST_TEMPLATE, LLAMA3_REGEX, LLAMA3_TEMPLATE, PHI3_TEMPLATE,
                                        QWEN2_REGEX, SPM_VOCAB, build_bpe_tokenizer, build_spm_tokenizer,
                                        corpus_lines, corpus_sha256, train_spm)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "model" / "data" / "families"
SEED = 1234
N_GREEDY = 32

EVAL_TEXT = (
    "The old bridge at Lowfield was built in 1887 by a small crew of engineers. "
    "Every spring the river rose, and every spring the town argued about whether "
    "the stones would hold."
)
PROMPT = "The river rose and the town"
# phi3_longrope: a prompt longer than original_max_position_embeddings (32), so that transformers
# (long factors once the sequence exceeds 32 positions) and llama.cpp (long factors whenever the
# context exceeds 32) use the same factors for every greedy step.
LONG_PROMPT = ("The old bridge at Lowfield was built by a small crew of engineers, and "
               "every spring the river rose and the town")

# Facts about a family that reference.json should carry.
FAMILY_NOTES = {
    "mistral": ["sliding_window 32 < evaluation length. llama.cpp's llama architecture has no "
                "sliding-window key and attends to the whole context: its logits equal "
                "transformers' up to position 31 and differ from position 32 on."],
    "gemma2": ["query_pre_attn_scalar equals head_dim (32), while hidden/heads is 16. "
               "convert_hf_to_gguf.py writes no key for query_pre_attn_scalar and llama.cpp "
               "scales queries by 1/sqrt(head_dim) (by 1/sqrt(hidden/heads) only for 46-layer "
               "models); a value different from head_dim would make llama.cpp disagree."],
    "phi3_longrope": ["longrope with original_max_position_embeddings 32: transformers picks "
                      "long_factor when the sequence exceeds 32 positions, llama.cpp when the "
                      "context (n_ctx) exceeds 32. The evaluation ids and the greedy prompt are "
                      "longer than 32 tokens so both use long_factor throughout."],
}

# name -> description. "tok" picks the tokenizer recipe; "pre" the llama.cpp pre-tokenizer name
# its hash is mapped to.
FAMILIES: dict[str, dict] = {
    "llama3": {"arch": "LlamaForCausalLM", "tok": "llama3_bpe", "pre": "llama-bpe"},
    "qwen2": {"arch": "Qwen2ForCausalLM", "tok": "qwen2_bpe", "pre": "qwen2"},
    "qwen3": {"arch": "Qwen3ForCausalLM", "tok": "qwen2_bpe", "pre": "qwen2"},
    "mixtral": {"arch": "MixtralForCausalLM", "tok": "llama3_bpe", "pre": "llama-bpe"},
    "qwen2_moe": {"arch": "Qwen2MoeForCausalLM", "tok": "qwen2_bpe", "pre": "qwen2"},
    "gemma2": {"arch": "Gemma2ForCausalLM", "tok": "gemma_spm"},
    "mistral": {"arch": "MistralForCausalLM", "tok": "llama_spm"},
    "llama2": {"arch": "LlamaForCausalLM", "tok": "llama_spm"},
    "phi3": {"arch": "Phi3ForCausalLM", "tok": "phi3_spm"},
    "phi3_longrope": {"arch": "Phi3ForCausalLM", "tok": "phi3_spm"},
}



# ------------------------------------------------------------------------------------------------
# configs and weights
# ------------------------------------------------------------------------------------------------

def make_config(name: str, tok):
    import transformers as tf

    vocab = len(tok)
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                  rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if name == "llama3":
        return tf.LlamaConfig(**common, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    if name == "llama2":
        return tf.LlamaConfig(**common, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if name == "mistral":
        return tf.MistralConfig(**common, sliding_window=32,
                                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if name == "qwen2":
        return tf.Qwen2Config(**common, use_sliding_window=False,
                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if name == "qwen3":
        return tf.Qwen3Config(**common, attention_bias=False, use_sliding_window=False,
                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if name == "mixtral":
        c = dict(common, intermediate_size=32)
        return tf.MixtralConfig(**c, num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0,
                                sliding_window=None,
                                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if name == "qwen2_moe":
        c = dict(common, intermediate_size=64)
        return tf.Qwen2MoeConfig(**c, moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                 num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                                 decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False,
                                 output_router_logits=False,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if name == "gemma2":
        # head_dim 32 != hidden/heads (16), query_pre_attn_scalar = head_dim: the Gemma 2 2B/9B
        # convention, the one llama.cpp implements (it ignores query_pre_attn_scalar and scales
        # by 1/sqrt(head_dim) unless the model has 46 layers).
        c = dict(common, rms_norm_eps=1e-6, tie_word_embeddings=True, head_dim=32)
        return tf.Gemma2Config(**c, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=32,
                               sliding_window=16, attn_logit_softcapping=20.0, final_logit_softcapping=15.0,
                               layer_types=["sliding_attention", "full_attention"],
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if name in ("phi3", "phi3_longrope"):
        c = dict(common)
        c["head_dim"] = None
        del c["head_dim"]
        if name == "phi3":
            return tf.Phi3Config(**c, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                 original_max_position_embeddings=256, sliding_window=None)
        half = 8  # head_dim 16 -> 8 rotary frequencies
        short = [round(1.0 + 0.25 * i, 4) for i in range(half)]
        long = [round(1.0 + 1.5 * i, 4) for i in range(half)]
        return tf.Phi3Config(**c, sliding_window=None, original_max_position_embeddings=32,
                             rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                              "short_factor": short, "long_factor": long,
                                              "original_max_position_embeddings": 32})
    raise KeyError(name)


def redraw(model, name: str, seed: int):
    """Re-draw every parameter from a seeded generator (transformers' init is ignored)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    gemma = name.startswith("gemma")
    with torch.no_grad():
        for pname, p in model.named_parameters():
            shape = p.shape

            def randn(*s):
                return torch.randn(*s, generator=g, dtype=torch.float32)

            if gemma and pname == "model.norm.weight":
                # tied output and a small embedding: scale the final norm (1+w ~ 9) for a logit
                # spread of several units
                val = 8.0 + 0.25 * randn(shape)
            elif p.ndim == 1 and "norm" in pname:
                val = 0.25 * randn(shape) if gemma else 1.0 + 0.25 * randn(shape)
            elif p.ndim == 1:  # biases
                val = 0.5 * randn(shape)
            elif "embed_tokens" in pname:
                # Gemma scales the input by sqrt(hidden): rms 0.3 in the residual stream, below the
                # post-normed layer outputs (a larger embedding would drown them, and the tied
                # output would then predict the input token)
                val = randn(shape) * (0.3 / math.sqrt(hidden) if gemma else 1.0)
            elif pname.startswith("lm_head"):
                val = randn(shape) * (3.0 / math.sqrt(shape[-1]))
            elif pname.endswith("mlp.gate.weight") or "shared_expert_gate" in pname:
                val = randn(shape) * (3.0 / math.sqrt(shape[-1]))
            elif any(k in pname for k in ("q_proj", "k_proj", "qkv_proj")):
                val = randn(shape) * (2.0 / math.sqrt(shape[-1]))
            else:
                val = randn(shape) * (1.0 / math.sqrt(shape[-1]))
            p.copy_(val)


# ------------------------------------------------------------------------------------------------
# converter
# ------------------------------------------------------------------------------------------------

_CONV = None
_PRE_MAP: dict[str, str] = {}
_CONV_LOG: list[str] = []


def load_converter(path: Path):
    global _CONV
    if _CONV is not None:
        return _CONV
    if "gguf" in sys.modules:
        raise RuntimeError("gguf imported before the converter; the converter must use its own gguf-py")
    sys.path.insert(0, str(path.parent))
    import importlib
    conv = importlib.import_module(path.stem)
    import gguf
    from conversion.base import TextModel

    orig = TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer):
        from hashlib import sha256
        chktxt = ('\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis '
                  'concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 '
                  '?我想在apple工作1314151天～ ------======= нещо на Български \'\'\'\'\'\'```````""""......!!!!!!?????? '
                  'I\'ve been \'told he\'s there, \'RE you sure? \'M not sure I\'ll make it, \'D you like some tea? '
                  'We\'Ve a\'lL')
        chkhsh = sha256(str(tokenizer.encode(chktxt)).encode()).hexdigest()
        if chkhsh in _PRE_MAP:
            _CONV_LOG.append(f"pre-tokenizer hash {chkhsh} mapped to {_PRE_MAP[chkhsh]!r}")
            return _PRE_MAP[chkhsh]
        return orig(self, tokenizer)

    TextModel.get_vocab_base_pre = get_vocab_base_pre
    _CONV = conv
    _CONV.__gguf_version = getattr(gguf, "__version__", None) or _gguf_version(Path(gguf.__file__))
    return conv


def _gguf_version(gguf_init: Path) -> str:
    pyproject = gguf_init.parent.parent / "pyproject.toml"
    if pyproject.exists():
        for line in pyproject.read_text().splitlines():
            if line.startswith("version"):
                return line.split("=", 1)[1].strip().strip('"')
    return "unknown"


def converter_version(path: Path) -> dict:
    info = {"convert_hf_to_gguf_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    for up in path.parents:
        init = up / "llama_cpp" / "__init__.py"
        if init.exists():
            for line in init.read_text().splitlines():
                if line.startswith("__version__"):
                    info["llama_cpp_python_sdist"] = line.split("=", 1)[1].strip().strip('"')
            break
    return info


def run_converter(conv, hf_dir: Path, outtype: str, outfile: Path, model_name: str):
    import logging
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(hf_dir), "--outtype", outtype, "--outfile", str(outfile),
                "--model-name", model_name]
    try:
        conv.main()
    except SystemExit as e:
        if e.code not in (0, None):
            raise RuntimeError(f"convert_hf_to_gguf.py exited {e.code}") from None
    finally:
        sys.argv = argv
        logging.getLogger().setLevel(logging.WARNING)


# ------------------------------------------------------------------------------------------------
# reference outputs
# ------------------------------------------------------------------------------------------------

def _cfg(**kv):
    def f(c):
        for k, v in kv.items():
            setattr(c, k, v)
    return f


def _interleave_rope(model):
    """Reorder q/k rows within each head so that transformers' rotate_half (pairs j, j+d/2) acts
    on the original rows (2j, 2j+1): the logits of a reader that pairs RoPE dimensions the other
    way (an identical permutation of q and k leaves everything else unchanged)."""
    import torch
    cfg = model.config
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    perm_head = torch.tensor([2 * j for j in range(d // 2)] + [2 * j + 1 for j in range(d // 2)])

    def perm_rows(w, n_heads, offset=0):
        idx = torch.cat([offset + h * d + perm_head for h in range(n_heads)])
        w[offset:offset + n_heads * d] = w[idx].clone()

    nq, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    for layer in model.model.layers:
        att = layer.self_attn
        if hasattr(att, "qkv_proj"):
            perm_rows(att.qkv_proj.weight, nq, 0)
            perm_rows(att.qkv_proj.weight, nkv, nq * d)
        else:
            perm_rows(att.q_proj.weight, nq)
            perm_rows(att.k_proj.weight, nkv)


def _gemma_norm_without_one(model):
    for n, p in model.named_parameters():
        if p.ndim == 1 and "norm" in n:
            p.sub_(1.0)


# What a reader of these files could get wrong, as (label, config change, parameter change); the
# build records the largest logit change each one causes (all far above 1e-3), to show that the
# fixture tells the right convention from the wrong one.
SENSITIVITY = {
    "llama3": [("rope_scaling llama3 ignored (plain rope_theta)",
                _cfg(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}), None),
               ("RoPE pairs (2i, 2i+1) instead of (i, i+d/2)", None, _interleave_rope)],
    "qwen2": [("q/k/v biases dropped", None,
               lambda m: [b.zero_() for l in m.model.layers for b in
                          (l.self_attn.q_proj.bias, l.self_attn.k_proj.bias, l.self_attn.v_proj.bias)])],
    "qwen3": [("q_norm/k_norm weights set to 1", None,
               lambda m: [w.fill_(1.0) for l in m.model.layers for w in
                          (l.self_attn.q_norm.weight, l.self_attn.k_norm.weight)])],
    "mixtral": [("top-1 routing instead of top-2", _cfg(num_experts_per_tok=1), None)],
    "qwen2_moe": [("shared expert gate ignored (factor 1 instead of sigmoid(gate))", None, "shared_gate"),
                  ("top-k weights renormalised (norm_topk_prob)", _cfg(norm_topk_prob=True), None)],
    "gemma2": [("RMSNorm scale w instead of 1+w", None, _gemma_norm_without_one),
               ("no sliding window", _cfg(sliding_window=256), None),
               ("sliding/full alternation swapped (layer 0 full, layer 1 sliding)",
                _cfg(layer_types=["full_attention", "sliding_attention"]), None),
               ("no attention soft-capping", _cfg(attn_logit_softcapping=None), None),
               ("no final logit soft-capping", _cfg(final_logit_softcapping=None), None),
               ("query scale 1/sqrt(hidden/heads) instead of 1/sqrt(query_pre_attn_scalar)",
                _cfg(query_pre_attn_scalar=16), None)],
    "mistral": [("no sliding window", _cfg(sliding_window=None), None)],
    "llama2": [("RoPE pairs (2i, 2i+1) instead of (i, i+d/2)", None, _interleave_rope)],
    "phi3": [("RoPE pairs (2i, 2i+1) instead of (i, i+d/2)", None, _interleave_rope)],
    "phi3_longrope": [("no longrope (plain rope_theta)",
                       _cfg(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), None),
                      ("short_factor used at every length", None, "short_only")],
}


def measure_sensitivity(name: str, model, cfg, eval_ids, logits) -> dict:
    import copy
    import torch
    import transformers

    out = {}
    state = model.state_dict()
    for label, cfg_mod, pmod in SENSITIVITY.get(name, []):
        c = copy.deepcopy(cfg)
        if pmod == "short_only":
            rp = dict(c.rope_parameters)
            rp["long_factor"] = list(rp["short_factor"])
            c.rope_parameters = rp
        if cfg_mod is not None:
            cfg_mod(c)
        m = transformers.AutoModelForCausalLM.from_config(c, attn_implementation="eager", dtype=torch.float32)
        m.load_state_dict(state)
        m.eval()
        if pmod == "shared_gate":
            # the gate's output becomes 30, so sigmoid(gate) = 1 to float32 precision
            for layer in m.model.layers:
                layer.mlp.shared_expert_gate.forward = lambda x: torch.full(x.shape[:-1] + (1,), 30.0)
        elif callable(pmod):
            with torch.no_grad():
                pmod(m)
        with torch.no_grad():
            got = m(torch.tensor([eval_ids]), use_cache=False).logits[0].float()
        out[label] = float((got - logits).abs().max())
    return out


def margins(logits) -> list[float]:
    import torch
    top = torch.topk(logits.double(), 2, dim=-1).values
    return [float(x) for x in (top[..., 0] - top[..., 1]).reshape(-1)]


def greedy_nocache(model, prompt_ids: list[int], n: int) -> list[int]:
    import torch
    ids = list(prompt_ids)
    for _ in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt_ids):]


def build_family(name: str, out_root: Path, converter: Path, seed: int) -> dict:
    import numpy as np
    import safetensors
    import sentencepiece
    import tokenizers
    import torch
    import transformers

    conv = load_converter(converter)
    fam = FAMILIES[name]
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    notes: list[str] = []

    tmp = Path(tempfile.mkdtemp(prefix="families-"))
    try:
        hf = tmp / name
        hf.mkdir()
        if fam["tok"].endswith("_bpe"):
            tok = build_bpe_tokenizer(fam["tok"], hf)
            spm_bytes = None
        else:
            tok, spm_bytes = build_spm_tokenizer(fam["tok"], hf)
        # save_pretrained records where the tokenizer was loaded from (a temporary path); drop
        # those keys so that the files are reproducible.
        tc_path = hf / "tokenizer_config.json"
        tc = json.loads(tc_path.read_text())
        for k in ("vocab_file", "is_local", "local_files_only", "name_or_path"):
            tc.pop(k, None)
        if not fam["tok"].endswith("_bpe"):
            # transformers 5 no longer writes add_bos_token/add_eos_token; without them
            # convert_hf_to_gguf.py writes no tokenizer.ggml.add_bos_token for a template with no
            # special tokens (Phi-3) and llama.cpp then adds BOS by default. Say it explicitly,
            # as the real models' tokenizer_config.json files do.
            tc["add_bos_token"] = fam["tok"] != "phi3_spm"
            tc["add_eos_token"] = False
            notes.append("tokenizer_config.json: add_bos_token/add_eos_token written explicitly "
                         "(transformers 5's save_pretrained omits them)")
        tc_path.write_text(json.dumps(tc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(str(hf))

        eval_ids = tok(EVAL_TEXT).input_ids
        prompt = LONG_PROMPT if name == "phi3_longrope" else PROMPT
        prompt_ids = tok(prompt).input_ids
        notes.extend(FAMILY_NOTES.get(name, []))
        if name == "phi3_longrope" and len(prompt_ids) <= 32:
            raise RuntimeError(f"{name}: the long prompt is only {len(prompt_ids)} tokens")
        if len(eval_ids) < 64:
            raise RuntimeError(f"{name}: evaluation text is only {len(eval_ids)} tokens")
        if spm_bytes is not None:
            sp = sentencepiece.SentencePieceProcessor(model_proto=spm_bytes)
            sp_ids = sp.encode(EVAL_TEXT)
            if fam["tok"] != "phi3_spm":
                sp_ids = [sp.bos_id()] + sp_ids
            if sp_ids != eval_ids:
                notes.append("transformers' tokenizer.json disagrees with sentencepiece on the evaluation text")
            else:
                notes.append("tokenizer.json (transformers' conversion of tokenizer.model) gives the same "
                             "evaluation ids as sentencepiece")

        cfg = make_config(name, tok)
        # try seeds until the greedy margins clear 1e-3
        for attempt in range(20):
            s = seed + attempt
            torch.manual_seed(s)
            model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                                   dtype=torch.float32)
            model.eval()
            redraw(model, name, s)
            with torch.no_grad():
                logits = model(torch.tensor([eval_ids]), use_cache=False).logits[0].float()
                gen = model.generate(
                    torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                    max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY, do_sample=False, eos_token_id=None,
                    pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
                    output_logits=True, return_dict_in_generate=True, use_cache=True)
            greedy = [int(t) for t in gen.sequences[0, len(prompt_ids):]]
            step_logits = torch.stack([l[0] for l in gen.logits]).float()
            greedy_margins = margins(step_logits)
            eval_margins = margins(logits)
            if min(greedy_margins) >= 1e-3 and len(greedy) == N_GREEDY:
                break
            notes.append(f"seed {s} rejected: min greedy margin {min(greedy_margins):.2e}")
        else:
            raise RuntimeError(f"{name}: no seed gave greedy margins >= 1e-3")
        nocache = greedy_nocache(model, prompt_ids, N_GREEDY)
        if nocache != greedy:
            notes.append("WARNING: generate() with cache and a no-cache greedy loop disagree")
        else:
            notes.append("generate() (with cache) equals a no-cache argmax loop")
        if not bool((step_logits.argmax(-1) == torch.tensor(greedy)).all()):
            notes.append("WARNING: generate() logits argmax differs from its tokens")
        spread = float(logits.std(dim=-1).mean())
        sensitivity = measure_sensitivity(name, model, cfg, eval_ids, logits)

        # save the HF directory
        model.save_pretrained(str(hf))
        for f in ("generation_config.json",):
            if (hf / f).exists():
                (hf / f).unlink()
        with safetensors.safe_open(str(hf / "model.safetensors"), "pt") as f:
            dtypes = {str(f.get_slice(k).get_dtype()) for k in f.keys()}
        if dtypes != {"F32"}:
            raise RuntimeError(f"{name}: safetensors dtypes {dtypes}")

        # convert
        _CONV_LOG.clear()
        if "pre" in fam:
            from tokenizers import Tokenizer
            # the hash the converter will compute (same test string, same tokenizer)
            _PRE_MAP.clear()
            chk = conv_chkhsh(tok)
            _PRE_MAP[chk] = fam["pre"]
        gguf_files = {}
        for outtype in ("f32", "q8_0"):
            out = tmp / f"{name}-{outtype}.gguf"
            run_converter(conv, hf, outtype, out, name)
            gguf_files[outtype] = out
        conv_notes = sorted(set(_CONV_LOG))
        if "pre" in fam:
            conv_notes.append(
                "convert_hf_to_gguf.py's get_vocab_base_pre() does not know the hash of this tiny "
                f"BPE tokenizer; the script maps it to {fam['pre']!r} (the pre-tokenizer whose regex "
                "it was trained with). No other converter change.")
        else:
            conv_notes.append("SentencePiece vocabulary read from tokenizer.model; converter unmodified.")

        ref = {
            "family": name,
            "architecture": fam["arch"],
            "seed": s,
            "eval_text": EVAL_TEXT,
            "eval_ids": eval_ids,
            "prompt": prompt,
            "prompt_ids": prompt_ids,
            "greedy_ids": greedy,
            "greedy_margins": greedy_margins,
            "greedy_min_margin": min(greedy_margins),
            "eval_margins": eval_margins,
            "eval_min_margin": min(eval_margins),
            "eval_logit_std_mean": spread,
            "sensitivity_max_abs_logit_change": sensitivity,
            "eval_argmax": [int(x) for x in logits.argmax(-1)],
            "logits_file": "logits.npy",
            "n_vocab": int(logits.shape[-1]),
            "versions": {
                "torch": torch.__version__.split("+")[0],
                "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__,
                "sentencepiece": sentencepiece.__version__,
                "gguf_py": conv.__gguf_version,
                **converter_version(converter),
            },
            "corpus": {"files": [str(p.relative_to(REPO)) for p in CORPUS_FILES], "sha256": corpus_sha256()},
            "notes": notes,
            "converter": conv_notes,
        }

        # move into place
        dest = out_root / name
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for p in sorted(hf.iterdir()):
            shutil.copyfile(p, dest / p.name)
        for t, p in gguf_files.items():
            shutil.copyfile(p, dest / p.name)
        np.save(dest / "logits.npy", logits.numpy().astype(np.float32))
        (dest / "reference.json").write_text(dump_reference(ref))
        return ref
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def dump_reference(ref: dict) -> str:
    """One top-level key per line, values compact (lists of ids stay on one line)."""
    lines = [f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in ref.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def conv_chkhsh(tok) -> str:
    chktxt = ('\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis '
              'concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 '
              '?我想在apple工作1314151天～ ------======= нещо на Български \'\'\'\'\'\'```````""""......!!!!!!?????? '
              'I\'ve been \'told he\'s there, \'RE you sure? \'M not sure I\'ll make it, \'D you like some tea? '
              'We\'Ve a\'lL')
    return hashlib.sha256(str(tok.encode(chktxt)).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------
# llama.cpp check
# ------------------------------------------------------------------------------------------------

def check_family(name: str, out_root: Path) -> list[dict]:
    import numpy as np
    import llama_cpp

    d = out_root / name
    ref = json.loads((d / "reference.json").read_text())
    ref_logits = np.load(d / "logits.npy").astype(np.float64)
    ids = ref["eval_ids"]
    rows = []
    f32 = int(getattr(llama_cpp, "GGML_TYPE_F32", 0))
    # llama.cpp's defaults (K/V cache in f16), and the f32 GGUF with an f32 K/V cache
    for outtype, kv in (("q8_0", {}), ("f32", {}), ("f32", {"type_k": f32, "type_v": f32})):
        path = d / f"{name}-{outtype}.gguf"
        row = {"family": name, "gguf": outtype, "kv_cache": "f32" if kv else "f16"}
        try:
            llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_batch=256, n_ubatch=256, logits_all=True,
                                  n_threads=2, n_threads_batch=2, seed=0, verbose=False, **kv)
        except Exception as e:  # noqa: BLE001
            row["error"] = f"load failed: {e}"
            rows.append(row)
            continue
        # add_bos=True lets the GGUF's own tokenizer.ggml.add_bos_token decide
        toks = [int(t) for t in llm.tokenize(ref["eval_text"].encode(), add_bos=True, special=False)]
        row["tokenize_equal"] = toks == ids
        llm.reset()
        llm.eval(list(ids))
        got = np.array(llm.scores[: len(ids)], dtype=np.float64)

        def logsm(x):
            x = x - x.max(-1, keepdims=True)
            return x - np.log(np.exp(x).sum(-1, keepdims=True))
        lp, lq = logsm(ref_logits), logsm(got)
        kl = (np.exp(lp) * (lp - lq)).sum(-1)
        row["mean_kl"] = float(kl.mean())
        row["max_kl"] = float(kl.max())
        row["top1_agree"] = float((ref_logits.argmax(-1) == got.argmax(-1)).mean())
        row["max_abs_logit_diff"] = float(np.abs(ref_logits - got).max())
        # greedy continuation
        llm.reset()
        llm.eval(list(ref["prompt_ids"]))
        out = []
        for _ in range(len(ref["greedy_ids"])):
            last = np.array(llm.scores[llm.n_tokens - 1])
            t = int(np.argmax(last))
            out.append(t)
            llm.eval([t])
        g = ref["greedy_ids"]
        row["greedy_equal"] = out == g
        row["greedy_first_diff"] = next((i for i, (a, b) in enumerate(zip(out, g)) if a != b), None)
        rows.append(row)
        del llm
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=list(FAMILIES), help="build only this family (repeatable)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--converter", type=Path, help="path to llama.cpp's convert_hf_to_gguf.py")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--check", action="store_true", help="compare the written GGUFs in llama.cpp; writes nothing")
    args = ap.parse_args()
    names = args.only or list(FAMILIES)

    if args.check:
        for n in names:
            if not (args.out / n / "reference.json").exists():
                continue
            for row in check_family(n, args.out):
                print(json.dumps(row), flush=True)
        return 0

    if args.converter is None or not args.converter.is_file():
        ap.error("--converter PATH to convert_hf_to_gguf.py is required (see the docstring)")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    load_converter(args.converter.resolve())
    failed = []
    for n in names:
        try:
            ref = build_family(n, args.out, args.converter.resolve(), args.seed)
            size = sum(p.stat().st_size for p in (args.out / n).iterdir())
            print(f"{n}: {size / 1e6:.2f} MB, {len(ref['eval_ids'])} eval ids, vocab {ref['n_vocab']}, "
                  f"min margin greedy {ref['greedy_min_margin']:.3g} eval {ref['eval_min_margin']:.3g}, "
                  f"logit std {ref['eval_logit_std_mean']:.2f}", flush=True)
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            failed.append(n)
            print(f"{n}: FAILED: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
