#!/usr/bin/env python3
"""Hugging Face transformers on the GPU, the 4B Gemma 3 shape with random bf16 weights and a static
cache: decode tok/s (128 greedy tokens after 16), prefill of 2,048 tokens, and 16 sequences
batched. Speed does not depend on the weights' values; the shape is google/gemma-3-4b's."""
import time

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

cfg = Gemma3TextConfig(hidden_size=2560, intermediate_size=10240, num_hidden_layers=34, num_attention_heads=8,
                       num_key_value_heads=4, head_dim=256, vocab_size=262144, sliding_window=1024,
                       max_position_embeddings=131072, query_pre_attn_scalar=256)
torch.manual_seed(0)
with torch.device("cuda"):
    model = Gemma3ForCausalLM(cfg).to(torch.bfloat16).eval()
print("transformers", __import__("transformers").__version__, "torch", torch.__version__,
      torch.cuda.get_device_name(), flush=True)


def gen(batch, prompt, new):
    ids = torch.randint(10, 200000, (batch, prompt), device="cuda")
    torch.cuda.synchronize()
    t = time.time()
    out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                         cache_implementation="static", pad_token_id=0, disable_compile=True)
    torch.cuda.synchronize()
    return time.time() - t, out.shape[1] - prompt


with torch.no_grad():
    gen(1, 16, 8)
    gen(1, 16, 1)
    t1, _ = gen(1, 16, 1)
    t, n = gen(1, 16, 128)
    decode = (n - 1) / (t - t1)
    ids = torch.randint(10, 200000, (1, 2048), device="cuda")
    model(ids)
    torch.cuda.synchronize()
    t = time.time()
    for _ in range(3):
        model(ids, logits_to_keep=1)
    torch.cuda.synchronize()
    prefill = 3 * 2048 / (time.time() - t)
    gen(16, 16, 4)
    tb1, _ = gen(16, 16, 1)
    tb, nb = gen(16, 16, 64)
    batch = 16 * (nb - 1) / (tb - tb1)
print(f"HF decode {decode:.1f} tok/s; prefill 2048 {prefill:.0f} tok/s; 16 batched {batch:.1f} tok/s aggregate")
