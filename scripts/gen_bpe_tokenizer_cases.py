#!/usr/bin/env python3
"""Generate the byte-level BPE tokenizer fixtures and golden files (tests/tokenizer/data/bpe/).

For each of three small vocabularies, trained offline with the Hugging Face `tokenizers` package
on text files of this repository (deterministic: one thread, fixed file order):

    llama3  Split(Llama 3's regex) + ByteLevel, ignore_merges, <|begin_of_text|> added as BOS
    qwen2   Split(Qwen2's regex) + ByteLevel, no BOS (Qwen2's NFC normalizer is left out: llama.cpp
            does not apply it)
    gpt2    plain ByteLevel (GPT-2's regex), no BOS

it writes, under tests/tokenizer/data/bpe/<name>/:

    tokenizer.json          the trained tokenizer (the `tokenizers` package's file; gpt2's with
                            its merges in the older "left right" string form)
    vocab.gguf              the same vocabulary as GGUF metadata (tokenizer.ggml.model "gpt2",
                            pre, tokens, token_type, merges, bos/eos ids, add_bos_token) plus the
                            few llama hyperparameters llama.cpp needs to open it with vocab_only
    llama_cpp_cases.jsonl   llama.cpp's ids per case (the peer for vocab.gguf):
                              {"name", "text" | "text_hex" (invalid UTF-8, hex bytes),
                               "ids_special": tokenize(add_bos=True, special=True),
                               "ids_plain":   tokenize(add_bos=True, special=False),
                               "detok_hex":   llama_detokenize(ids_special, remove_special=False,
                                                               unparse_special=True), hex,
                               "detok_plain_hex": llama_detokenize(ids_special, remove_special=True,
                                                                   unparse_special=False), hex}
    tokenizers_cases.jsonl  the `tokenizers` package's ids per case (the peer for tokenizer.json):
                              {"name", "text",
                               "ids_special": encode(text, add_special_tokens=True).ids,
                               "ids_plain":   the same with encode_special_tokens = True}
                            A Python str cannot hold invalid UTF-8: those cases are given to
                            `tokenizers` as bytes.decode("utf-8", "replace") (Python's maximal-
                            subpart U+FFFD), llama.cpp gets the raw bytes.
    differences.json        the cases whose ids differ between llama.cpp and `tokenizers` (same
                            text, same flags), with the reason. Expected:
                              - invalid UTF-8: llama.cpp replaces every byte that does not start
                                a complete sequence by U+FFFD (unicode_cpts_from_utf8), Python one
                                U+FFFD per maximal subpart, so the texts differ;
                              - anything else listed there is a real disagreement between the two
                                peers and is explained in the "reason" field.

Rerunning gives the same bytes. tests/tokenizer/bpe_test.cc requires larql's ids to equal
llama.cpp's (GGUF) and tokenizers' (tokenizer.json); tests/python/test_bpe_tokenizer_parity.py
checks the committed files against live llama.cpp / tokenizers.

Usage: .venv/bin/python scripts/gen_bpe_tokenizer_cases.py [--check]
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # training order must not depend on threads
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "tokenizer" / "data" / "bpe"

# The pre-tokenizer regexes as the models' tokenizer.json files spell them.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

VOCABS = {
    "llama3": dict(pre="llama-bpe", regex=LLAMA3_REGEX, merges=1500, ignore_merges=True,
                   special=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                            "<|end_header_id|>", "<|eot_id|>"],
                   user_defined=["<tool_call>"],
                   bos="<|begin_of_text|>", eos="<|end_of_text|>", add_bos=True),
    "qwen2": dict(pre="qwen2", regex=QWEN2_REGEX, merges=1200, ignore_merges=False,
                  special=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                  user_defined=["<think>", "</think>"],
                  bos="<|endoftext|>", eos="<|im_end|>", add_bos=False),
    "gpt2": dict(pre="gpt-2", regex=None, merges=800, ignore_merges=False,
                 special=["<|endoftext|>"], user_defined=[],
                 bos="<|endoftext|>", eos="<|endoftext|>", add_bos=False),
}


# A few lines repeated so that merges also cross the splits the cases probe (letters of CJK
# Extension I next to Latin ones, a space before them, digits, non-ASCII spaces): a splitter that
# cut these words differently would then give other ids, not just the same bytes.
EXTRA_TRAINING = ("x\U0002EBF0y \U0002EBF1z \U0002EBF0\U0002EBF1 a\U0002EE5D 1234567 \u00a0b \u3000c "
                  "caf\u00e9 na\u0308ive \U0001F600\U0001F600 \u4e2d\u6587 'S 'LL\n") * 40


def training_files() -> list[Path]:
    # The corpora under data/ only: README.md and docs/ change with every feature, and a changed
    # corpus trains other merges (the committed files would no longer be what this script makes).
    files = sorted(p for p in (REPO / "data").rglob("*") if p.suffix in (".txt", ".jsonl", ".json"))
    return [p for p in files if p.is_file()]


def train(name: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    cfg = VOCABS[name]
    tok = Tokenizer(models.BPE(ignore_merges=cfg["ignore_merges"]))
    if cfg["regex"] is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(cfg["regex"]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + cfg["merges"], min_frequency=2,
                                  show_progress=False, initial_alphabet=sorted(alphabet),
                                  special_tokens=[])
    texts = [p.read_text(encoding="utf-8") for p in training_files()] + [EXTRA_TRAINING]
    tok.train_from_iterator(texts, trainer=trainer)
    # Added tokens after the trained vocabulary, as in the real models.
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in cfg["special"]])
    if cfg["user_defined"]:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in cfg["user_defined"]])
    if cfg["add_bos"]:
        bos = cfg["bos"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def write_gguf(name: str, tok_json: dict, path: Path) -> None:
    import gguf
    cfg = VOCABS[name]
    vocab = tok_json["model"]["vocab"]
    added = {a["id"]: a for a in tok_json["added_tokens"]}
    n = max(list(vocab.values()) + list(added)) + 1
    tokens = [""] * n
    types = [1] * n
    for piece, i in vocab.items():
        tokens[i] = piece
    for i, a in added.items():
        tokens[i] = a["content"]
        types[i] = 3 if a["special"] else 4  # CONTROL / USER_DEFINED
    merges = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in tok_json["model"]["merges"]]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"bpe-{name}-vocab")
    # llama.cpp reads the architecture's hyperparameters before the vocabulary, even vocab_only.
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(cfg["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(cfg["bos"]))
    w.add_eos_token_id(tokens.index(cfg["eos"]))
    w.add_add_bos_token(cfg["add_bos"])
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _base_cases() -> list[tuple[str, str | bytes]]:
    spec = importlib.util.spec_from_file_location("gen_tokenizer_cases", REPO / "scripts" / "gen_tokenizer_cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cases()


def cases(name: str) -> list[tuple[str, str | bytes]]:
    """(name, text) pairs for one vocabulary: the SentencePiece golden set's strings
    (scripts/gen_tokenizer_cases.py) plus byte-level BPE specifics. Deterministic."""
    cfg = VOCABS[name]
    out = list(_base_cases())
    # Digits: Llama 3 groups them by three, Qwen2 splits each, GPT-2 keeps the run.
    digits = "12345678901234567890"
    for n in (1, 2, 3, 4, 5, 6, 7, 9, 10, 13, 20):
        out.append((f"digits_{n}", digits[:n]))
        out.append((f"digits_{n}_in_text", f"x{digits[:n]} y {digits[:n]}z"))
    out += [
        ("digits_unicode", "٣٤٥٦ ४५६ ½ ⅓ ①②③ 𝟙𝟚𝟛"),
        ("contractions", "I'm you're we've they'll she'd it's don't"),
        ("contractions_upper", "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T 'S 'T"),
        ("contractions_mixed", "You'Re We'vE It'S 'Ll 'lL"),
        ("contractions_alone", "'s 't 're 've 'm 'll 'd ' ''"),
        ("apostrophe_runs", "rock'n'roll o'clock ''quoted'' '''"),
        ("long_s_apostrophe", "'\u017f 'K 'K"),
        ("whitespace_unicode", "a\u00a0b\u3000c\u2009d\u0085e\u000bf\u2028g\u200bh"),
        ("whitespace_then_newline", "a \t \nb  \r\n c\n\n\n d"),
        ("cr_only", "a\rb\r\rc \r d"),
        ("space_before_punct", "Hello , world ! Really ? Yes . ' quoted ' it 's done"),
        ("space_apostrophe_clean", "a ' b ' c 's 'm 're 've 'll 't 'd"),
        ("cjk_ext_i", "\U0002EBF0\U0002EBF1 mixed \U0002EE5D"),
        ("cjk_ext_i_in_words", "x\U0002EBF0y \U0002EBF1z!\U0002EE5D9 'a\U0002EBF0"),
        ("cjk_ext_b", "\U00020000\U0002A6DF"),
        ("very_long_word", "supercalifragilistic" * 30),
        ("very_long_digits", "9" * 200),
        ("very_long_spaces", " " * 300 + "x"),
        ("very_long_punct", "!?" * 150),
        ("letters_marks", "cafe\u0301 na\u0308ive \u0915\u094d\u0937"),
        ("hangul_jamo", "\u1100\u1161\u11a8 \u3131\u314f"),
        ("emoji_keycap", "1\ufe0f\u20e3 #\ufe0f\u20e3 *\ufe0f\u20e3"),
        ("emoji_zwj_long", "\U0001F9D1\u200d\U0001F91d\u200d\U0001F9D1 \U0001F468\u200d\U0001F469\u200d\U0001F467"),
        ("ghost_byte_chars", "\u0120\u010a\u0100 \u00c4\u00a0"),
        ("gpt2_alphabet_text", "ĠĊ ĉ Ġthe"),
    ]
    specials = cfg["special"] + cfg["user_defined"]
    for i, s in enumerate(specials):
        out += [
            (f"special{i}_alone", s),
            (f"special{i}_text", f"Hello{s}world"),
            (f"special{i}_spaced", f" {s} x {s}\n"),
            (f"special{i}_partial", s[:-1] + " " + s[1:]),
        ]
    out.append(("specials_all", "".join(specials) + " end"))
    out.append(("specials_repeated", (specials[0] + "a ") * 5))
    out += [
        ("bytes_overlong_nul", b"a\xc0\x80b"),
        ("bytes_surrogate_pair", b"\xed\xa0\x80\xed\xb0\x80 x"),
        ("bytes_f8", b"\xf8\x88\x80\x80\x80 y"),
        ("bytes_in_word", b"ab\xffcd ef\xfe"),
        ("bytes_many", bytes(range(0x80, 0xC0)) + b" z"),
    ]
    names = [n for n, _ in out]
    assert len(names) == len(set(names)), "duplicate case names"
    return out


def load_llama(path: Path):
    import llama_cpp
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def detokenize(llm, ids: list[int], remove_special: bool = False, unparse_special: bool = True) -> bytes:
    import llama_cpp
    arr = (llama_cpp.llama_token * max(len(ids), 1))(*ids)
    cap = 256 + 64 * len(ids)
    buf = ctypes.create_string_buffer(cap)
    n = llama_cpp.llama_detokenize(llm._model.vocab, arr, len(ids), buf, cap, remove_special, unparse_special)
    if n < 0:
        raise RuntimeError(f"llama_detokenize needs {-n} bytes, buffer has {cap}")
    return buf.raw[:n]


def record_llama(llm, name: str, text: str | bytes) -> dict:
    b = text if isinstance(text, bytes) else text.encode("utf-8")
    ids_special = [int(t) for t in llm.tokenize(b, add_bos=True, special=True)]
    ids_plain = [int(t) for t in llm.tokenize(b, add_bos=True, special=False)]
    key, val = ("text_hex", text.hex()) if isinstance(text, bytes) else ("text", text)
    return {"name": name, key: val, "ids_special": ids_special, "ids_plain": ids_plain,
            "detok_hex": detokenize(llm, ids_special).hex(),
            "detok_plain_hex": detokenize(llm, ids_special, True, False).hex()}


def hf_text(text: str | bytes) -> str:
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else text


def record_hf(tok, name: str, text: str | bytes) -> dict:
    t = hf_text(text)
    tok.encode_special_tokens = False
    ids_special = tok.encode(t, add_special_tokens=True).ids
    tok.encode_special_tokens = True
    ids_plain = tok.encode(t, add_special_tokens=True).ids
    tok.encode_special_tokens = False
    return {"name": name, "text": t, "ids_special": ids_special, "ids_plain": ids_plain}


def differences(llama_recs: list[dict], hf_recs: list[dict]) -> list[dict]:
    out = []
    for lr, hr in zip(llama_recs, hf_recs):
        for key in ("ids_special", "ids_plain"):
            if lr[key] != hr[key]:
                if "text_hex" in lr:
                    reason = ("invalid UTF-8: llama.cpp has one U+FFFD per byte that does not start a "
                              "complete sequence, `tokenizers` got Python's decode('utf-8', 'replace')")
                else:
                    reason = "unexplained"
                out.append({"name": lr["name"], "key": key, "reason": reason})
    return out


def dumps(rec) -> str:
    return json.dumps(rec, ensure_ascii=True, separators=(",", ":"))


def tokenizer_json_text(name: str, tok) -> str:
    j = json.loads(tok.to_str())
    if name == "gpt2":  # the older merge form, "left right" strings, as GPT-2's own file has it
        j["model"]["merges"] = [f"{a} {b}" for a, b in j["model"]["merges"]]
    return json.dumps(j, ensure_ascii=False, indent=1, sort_keys=False) + "\n"


def generate(name: str, workdir: Path) -> dict[str, bytes]:
    """All files of one vocabulary, as bytes, keyed by file name (written under workdir first:
    GGUFWriter and llama.cpp need paths)."""
    return generate_from(name, tokenizer_json_text(name, train(name)), workdir)


def generate_from(name: str, tj_text: str, workdir: Path) -> dict[str, bytes]:
    """generate() after the training: the files made from the tokenizer.json text `tj_text` (the
    committed one, in the parity test: it checks the peers, not the trainer)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_str(tj_text)  # exactly what is committed
    workdir.mkdir(parents=True, exist_ok=True)
    gguf_path = workdir / "vocab.gguf"
    write_gguf(name, json.loads(tj_text), gguf_path)
    llm = load_llama(gguf_path)
    cs = cases(name)
    lrecs = [record_llama(llm, n, t) for n, t in cs]
    hrecs = [record_hf(tok, n, t) for n, t in cs]
    del llm
    return {
        "tokenizer.json": tj_text.encode("utf-8"),
        "vocab.gguf": gguf_path.read_bytes(),
        "llama_cpp_cases.jsonl": "".join(dumps(r) + "\n" for r in lrecs).encode("utf-8"),
        "tokenizers_cases.jsonl": "".join(dumps(r) + "\n" for r in hrecs).encode("utf-8"),
        "differences.json": (json.dumps(differences(lrecs, hrecs), indent=1) + "\n").encode("utf-8"),
    }


def main() -> int:
    import tempfile
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    ap.add_argument("--only", choices=sorted(VOCABS), action="append")
    args = ap.parse_args()
    stale = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or VOCABS:
            files = generate(name, Path(tmp) / name)
            d = OUT / name
            for fname, data in files.items():
                p = d / fname
                if args.check:
                    if not p.is_file() or p.read_bytes() != data:
                        stale.append(str(p))
                else:
                    d.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(data)
            n = files["llama_cpp_cases.jsonl"].count(b"\n")
            ndiff = len(json.loads(files["differences.json"]))
            print(f"{name}: {n} cases, {ndiff} llama.cpp/tokenizers differences")
    if stale:
        print("stale (rerun scripts/gen_bpe_tokenizer_cases.py):\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
