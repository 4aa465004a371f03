#!/usr/bin/env python3
"""Generate the tokenizer golden file from llama.cpp (the independent peer).

Writes tests/tokenizer/data/llama_cpp_cases.jsonl: one JSON object per line,

    {"name": str, "text": str,
     "ids_special": [...],   # llama.cpp tokenize(text, add_bos=True, special=True)
     "ids_plain":   [...],   # llama.cpp tokenize(text, add_bos=True, special=False)
     "detok_hex":   str}     # llama.cpp detokenize(ids_special[1:], special=True), hex bytes

Cases that are not valid UTF-8 carry "text_hex" (the bytes, hex) instead of "text".
The C++ test tests/tokenizer/parity_test.cc requires identical ids from larql, and
tests/python/test_tokenizer_parity.py regenerates the file's content live so it cannot rot.

Usage: .venv/bin/python scripts/gen_tokenizer_cases.py [--model PATH] [--out PATH] [--check]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"
DEFAULT_OUT = REPO / "tests" / "tokenizer" / "data" / "llama_cpp_cases.jsonl"
GPL = REPO / "tests" / "python" / "data" / "long_text_gpl3.txt"


def cases() -> list[tuple[str, str | bytes]]:
    """(name, text) pairs; text is str, or bytes for invalid UTF-8. Deterministic; no randomness so the golden file is stable."""
    base: list[tuple[str, str]] = [
        ("empty", ""),
        ("space", " "),
        ("two_spaces", "  "),
        ("newline", "\n"),
        ("tab", "\t"),
        ("hello", "Hello world"),
        ("hello_lower", "hello world"),
        ("capital", "The capital of France is"),
        ("sentence", "The quick brown fox jumps over the lazy dog."),
        ("punct", "Wait... what?! No way -- really? (Yes.) [ok] {fine} <tag>"),
        ("apostrophes", "It's John's book, isn't it? 'quoted' \"double\""),
        ("numbers", "1 12 123 1234 12345 123456 3.14159 -42 1e-9 0x1F 1,000,000"),
        ("dates", "2024-01-15T12:34:56Z, 15/01/2024, Jan 15th 2024"),
        ("math", "E = mc^2; a² + b² = c²; ∑_{i=1}^{n} i = n(n+1)/2; √2 ≈ 1.414"),
        ("url", "Visit https://example.com/path?query=1&x=y#frag or http://a.b.c:8080/"),
        ("email", "contact: john.doe+test@example.co.uk"),
        ("french", "Le cœur a ses raisons que la raison ne connaît point. Ça va très bien, merci !"),
        ("german", "Größenwahn und Fußgängerübergänge: Die Straße ist schön. Übermäßig!"),
        ("spanish", "¿Dónde está la biblioteca? ¡Mañana será otro día, señor!"),
        ("italian", "Perché è così difficile? Più tardi andrò là."),
        ("portuguese", "A ação não é fácil, mas é possível. Coração, pão."),
        ("polish", "Zażółć gęślą jaźń. Źdźbło trawy."),
        ("turkish", "İstanbul'da ılık bir gün; şeker, çay, göz."),
        ("vietnamese", "Tiếng Việt có dấu: Xin chào, cảm ơn bạn rất nhiều."),
        ("chinese", "我爱自然语言处理。今天天气很好，我们去公园散步吧！"),
        ("chinese_trad", "這是一個繁體中文的句子，包含標點符號。"),
        ("japanese", "日本語のテキストです。ひらがな、カタカナ、漢字を含みます。"),
        ("japanese_kana", "カタカナとひらがな：ありがとうございます。"),
        ("korean", "안녕하세요, 만나서 반갑습니다. 한국어 문장입니다."),
        ("arabic", "مرحبا بالعالم! هذه جملة باللغة العربية."),
        ("hebrew", "שלום עולם, זה משפט בעברית."),
        ("russian", "Привет, мир! Это предложение на русском языке. Ёжик в тумане."),
        ("ukrainian", "Доброго ранку, Україно! Ґанок, їжак, є."),
        ("greek", "Γειά σου Κόσμε! Αυτή είναι μια ελληνική πρόταση."),
        ("hindi", "नमस्ते दुनिया! यह हिंदी में एक वाक्य है।"),
        ("bengali", "আমি বাংলায় গান গাই।"),
        ("tamil", "வணக்கம் உலகம்"),
        ("thai", "สวัสดีครับ ภาษาไทยไม่มีช่องว่างระหว่างคำ"),
        ("armenian_georgian", "Բարեւ աշխարհ — გამარჯობა მსოფლიო"),
        ("amharic", "ሰላም ልዑል"),
        ("emoji", "I love 🍕 and 🎉! 😀😃😄😁"),
        ("emoji_zwj", "Family: 👨‍👩‍👧‍👦, technologist: 👩🏽‍💻, rainbow flag: 🏳️‍🌈"),
        ("emoji_flags", "Flags: 🇫🇷 🇩🇪 🇯🇵 🇺🇸 🇧🇷 🏴󠁧󠁢󠁳󠁣󠁴󠁿"),
        ("emoji_skin", "👍🏻👍🏼👍🏽👍🏾👍🏿 ✌️ ❤️ ☺️"),
        ("emoji_only", "🤖"),
        ("emoji_rare", "🫠🪿🫎🩷"),
        ("combining", "e\u0301 vs \u00e9; n\u0303; a\u030a\u0301; Z\u0351\u0352\u0353"),
        ("zero_width", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom"),
        ("nbsp", "non\u00a0breaking\u2009thin\u3000ideographic"),
        ("rtl_marks", "\u202eright-to-left override\u202c and \u200fRLM"),
        ("u2581", "literal \u2581 lower one eighth block \u2581\u2581"),
        ("replacement_char", "bad \ufffd char"),
        ("private_use", "\ue000\uf8ff"),
        ("astral", "𝕳𝖊𝖑𝖑𝖔 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝒜𝒷𝒸 𐍈 𓀀"),
        ("box_drawing", "┌──┐\n│ok│\n└──┘"),
        ("control_chars", "bell\x07 backspace\x08 formfeed\x0c vtab\x0b esc\x1b[0m"),
        ("cr_lf", "line one\r\nline two\r\nline three\r"),
        ("nul", "a\x00b"),
        ("spaces_runs", "a  b   c    d     e      f" + " " * 40 + "g"),
        ("leading_space", " leading"),
        ("leading_spaces", "    four leading"),
        ("trailing_space", "trailing "),
        ("trailing_spaces", "trailing   "),
        ("both_spaces", "  both  "),
        ("only_spaces_long", " " * 70),
        ("tabs", "\tone\t\ttwo\t\t\tthree"),
        ("tabs_long", "\t" * 35 + "x"),
        ("newlines", "a\nb\n\nc\n\n\nd"),
        ("newlines_long", "\n" * 40),
        ("mixed_ws", " \t \n \r\n\t\t  \n   x"),
        ("space_newline", "end of line \nnext line  \n  indented"),
        ("python", "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"),
        ("python_class", "class Foo(Bar):\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, x: int = 0) -> None:\n        self._x = x  # comment\n"),
        ("cpp", "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) x *= 2;\n\treturn 0;\n}\n"),
        ("rust", "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}"),
        ("javascript", "const f = async (a, b) => { await fetch(`/api/${a}`); return a ?? b; };"),
        ("go", "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n"),
        ("sql", "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;"),
        ("html", "<html><body><div class=\"a\"><h1>Title</h1><p>Para <b>bold</b> <i>it</i></p></div></body></html>"),
        ("html_table", "<table><tr><th>A</th><td>1</td></tr></table>"),
        ("markdown", "# Title\n\n- item **bold** _it_\n- `code`\n\n```python\nprint('x')\n```\n> quote"),
        ("json", "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}"),
        ("yaml", "name: test\nitems:\n  - a\n  - b\nnested:\n    deep: true\n"),
        ("latex", "\\begin{equation} \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}"),
        ("regex", r"^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@\w+\.\w{2,}$"),
        ("shell", "for f in *.txt; do echo \"$f\" | tr a-z A-Z >> out.log 2>&1; done"),
        ("bos_in_text", "<bos>Hello"),
        ("eos_in_text", "Goodbye<eos>"),
        ("turns", "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"),
        ("turns_system", "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"),
        ("specials_adjacent", "<start_of_turn><end_of_turn><eos><bos><pad><unk><mask>"),
        ("specials_spaced", " <start_of_turn> user <end_of_turn> "),
        ("special_partial", "<start_of_tur <end_of_turn <eos <bos> >"),
        ("special_nested", "<<bos>>"),
        ("unused_tokens", "<unused0> <unused1><unused10> <unused6241>"),
        ("image_tokens", "<start_of_image><end_of_image>"),
        ("multimodal", "[multimodal] and [multimodal]x"),
        ("html_user_defined", "<h1>Head</h1><strong>s</strong><code>c</code><blockquote>q</blockquote>"),
        ("angle_noise", "< > << >> <> </> <0x41> <0xFF>"),
        ("byte_token_text", "<0x0A><0x00>"),
        ("repeat_a", "a" * 100),
        ("repeat_ab", "ab" * 60),
        ("repeat_word", "the " * 50),
        ("repeat_emoji", "😀" * 20),
        ("repeat_han", "的" * 50),
        ("long_word", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
        ("camel", "getHTTPResponseCodeFromURLString XMLHttpRequest snake_case_name kebab-case-name"),
        ("hex_hash", "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000"),
        ("ipv6", "fe80::1ff:fe23:4567:890a%eth0 192.168.0.1:443"),
        ("currency", "$100, €50, £30, ¥1000, ₹500, ₿0.01"),
        ("quotes_unicode", "“Smart quotes” ‘single’ «guillemets» „German“ 「Japanese」"),
        ("dashes", "en–dash em—dash minus−sign hyphen-minus ellipsis…"),
        ("arrows_symbols", "→ ← ↑ ↓ ⇒ ⇔ ∀ ∃ ∈ ∉ ∩ ∪ ⊂ ⊆ ≠ ≤ ≥ ∞ © ® ™ ° ±"),
        ("fullwidth", "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ１２３"),
        ("mixed_scripts", "English, 中文, العربية, русский, हिन्दी, 日本語 and 🎌 in one line."),
        ("cjk_punct", "「こんにちは」と言った。（括弧）【重要】"),
        ("korean_jamo", "한글 vs 한글"),
        ("devanagari_conj", "क्षत्रिय ज्ञान श्रृंगार"),
        ("arabic_diacritics", "السَّلَامُ عَلَيْكُمْ"),
        ("arabic_numbers", "٠١٢٣٤٥٦٧٨٩ and ۰۱۲۳"),
        ("single_chars", "a"),
        ("single_digit", "7"),
        ("single_punct", "."),
        ("single_cjk", "中"),
        ("single_accent", "é"),
        ("dot_space", ". , ! ?"),
        ("question", "What is the meaning of life, the universe, and everything?"),
        ("chat_like", "User: hi\nAssistant: hello, how can I help?\nUser: tell me a joke"),
        ("csv", "id,name,score\n1,Alice,93.5\n2,Bob,87\n3,\"Carol, Jr.\",78\n"),
        ("path", "C:\\Users\\me\\file.txt and /usr/local/bin/python3"),
        ("version", "v1.2.3-rc.1+build.5 python>=3.11,<4"),
        ("emoticons", ":) :-( ;) xD <3 ¯\\_(ツ)_/¯"),
        ("music_math_alnum", "𝄞 𝅘𝅥𝅮 𝛼𝛽𝛾 𝟘𝟙𝟚"),
        ("cyrillic_latin_mix", "Mоscow (with Cyrillic о) vs Moscow"),
        ("ligatures", "ﬁ ﬂ ﬀ ﬃ æ œ ß"),
        ("superscripts", "x⁰¹²³⁴⁵⁶⁷⁸⁹ H₂O CO₂"),
        ("roman", "Ⅰ Ⅱ Ⅲ Ⅳ Ⅻ ⅰ ⅱ"),
        ("braille", "⠓⠑⠇⠇⠕"),
        ("khmer", "សួស្តី​ពិភពលោក"),
        ("mongolian", "ᠮᠣᠩᠭᠣᠯ"),
        ("tibetan", "བཀྲ་ཤིས་བདེ་ལེགས།"),
        ("sinhala", "ආයුබෝවන්"),
        ("yoruba", "Ẹ kú àárọ̀, ẹ̀gbọ́n mi"),
    ]
    out = list(base)
    # Whitespace / special-token variations of a few seeds.
    seeds = ["Hello world", "Bonjour le monde", "你好世界", "Привет мир", "def f(x): return x"]
    for i, s in enumerate(seeds):
        out += [
            (f"var{i}_lead", " " + s),
            (f"var{i}_trail", s + " "),
            (f"var{i}_nl", s + "\n"),
            (f"var{i}_double_nl", "\n\n" + s + "\n\n"),
            (f"var{i}_tab", "\t" + s),
            (f"var{i}_eot", s + "<end_of_turn>"),
            (f"var{i}_sot", "<start_of_turn>" + s),
            (f"var{i}_bos", "<bos>" + s),
            (f"var{i}_eos_mid", s + "<eos>" + s),
            (f"var{i}_spaces3", s.replace(" ", "   ")),
        ]
    # Whitespace runs of every length the vocabulary stores, and beyond.
    for n in (1, 2, 3, 5, 8, 16, 31, 32, 33, 64):
        out.append((f"spaces_{n}_between", "x" + " " * n + "y"))
    for n in (1, 2, 3, 31, 32):
        out.append((f"newlines_{n}_between", "x" + "\n" * n + "y"))
        out.append((f"tabs_{n}_between", "x" + "\t" * n + "y"))
    # Prompts used elsewhere in the project.
    prompts = REPO / "tests" / "python" / "data" / "prompts.txt"
    if prompts.exists():
        for j, line in enumerate(prompts.read_text(encoding="utf-8").splitlines()):
            if line.strip() and not line.startswith("#"):
                out.append((f"prompt_{j}", line.replace("\\n", "\n")))
    # A long real document (whitespace-heavy legal text).
    if GPL.exists():
        gpl = GPL.read_text(encoding="utf-8")
        out.append(("gpl_head_4k", gpl[:4096]))
        out.append(("gpl_tail_2k", gpl[-2048:]))
    # Raw bytes that are not valid UTF-8 (llama.cpp takes bytes; stored as "text_hex").
    out += [
        ("bytes_ff_fe", b"\xff\xfe abc"),
        ("bytes_truncated_2581", b"x \xe2\x96"),
        ("bytes_truncated_e_acute", b"caf\xc3"),
        ("bytes_bad_continuation", b"\xc3\x28 ok"),
        ("bytes_surrogate", b"\xed\xa0\x80 sur"),
        ("bytes_lead_swallows_space", b"\xf0ab cd"),
        ("bytes_special_then_partial", b"<start_of_turn>\xf0\x9f"),
        ("bytes_lone_continuations", b"\x80\x81\xbf hi"),
    ]
    names = [n for n, _ in out]
    assert len(names) == len(set(names)), "duplicate case names"
    return out


def load_vocab_llama(model: Path):
    import llama_cpp  # imported lazily: pytest collection must not need it
    return llama_cpp.Llama(model_path=str(model), vocab_only=True, verbose=False)


def detokenize(llm, ids: list[int], remove_special: bool, unparse_special: bool) -> bytes:
    """llama.cpp's llama_detokenize on the whole sequence (llama-cpp-python's Llama.detokenize
    goes token by token through a 32-byte buffer and truncates longer pieces)."""
    import ctypes
    import llama_cpp
    arr = (llama_cpp.llama_token * max(len(ids), 1))(*ids)
    cap = 64 + 64 * len(ids)
    buf = ctypes.create_string_buffer(cap)
    n = llama_cpp.llama_detokenize(llm._model.vocab, arr, len(ids), buf, cap,
                                   remove_special, unparse_special)
    if n < 0:
        raise RuntimeError(f"llama_detokenize needs {-n} bytes, buffer has {cap}")
    return buf.raw[:n]


def record(llm, name: str, text: str | bytes) -> dict:
    b = text if isinstance(text, bytes) else text.encode("utf-8")
    ids_special = [int(t) for t in llm.tokenize(b, add_bos=True, special=True)]
    ids_plain = [int(t) for t in llm.tokenize(b, add_bos=True, special=False)]
    detok = detokenize(llm, ids_special[1:], remove_special=False, unparse_special=True)
    key, val = ("text_hex", text.hex()) if isinstance(text, bytes) else ("text", text)
    return {"name": name, key: val, "ids_special": ids_special, "ids_plain": ids_plain,
            "detok_hex": detok.hex()}


def generate(model: Path) -> list[dict]:
    llm = load_vocab_llama(model)
    return [record(llm, n, t) for n, t in cases()]


def dumps(rec: dict) -> str:
    return json.dumps(rec, ensure_ascii=True, separators=(",", ":"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing")
    args = ap.parse_args()
    recs = generate(args.model)
    text = "".join(dumps(r) + "\n" for r in recs)
    if args.check:
        old = args.out.read_text(encoding="utf-8")
        if old != text:
            print(f"{args.out} is stale: regenerate with {Path(__file__).name}", file=sys.stderr)
            return 1
        print(f"{args.out}: {len(recs)} cases up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {len(recs)} cases to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
