"""Shared helpers for the peer tests: run the larql CLI, run llama.cpp (llama-cpp-python), and
compare logit matrices.

Everything that produces an *expected* value comes from llama.cpp, never from larql's own output.

Logit matrices are large (vocab 262,144: a 2,048-position f32 matrix is ~2 GiB), so the
comparison functions work in float64 chunks of rows and accept memory-mapped arrays.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_BIN = REPO_ROOT / "build" / "larql"
DEFAULT_MODEL = REPO_ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"

# Gemma 3 special ids (checked against the model's vocab in the tests, not assumed blindly).
EOS_ID = 1
END_OF_TURN_ID = 106
STOP_IDS = (EOS_ID, END_OF_TURN_ID)

THREADS = int(os.environ.get("LARQL_THREADS", "2"))


def larql_bin() -> Path:
    return Path(os.environ.get("LARQL_BIN", str(DEFAULT_BIN)))


def model_path() -> Path:
    return Path(os.environ.get("LARQL_MODEL", str(DEFAULT_MODEL)))


def results_dir(create: bool = True) -> Path:
    d = Path(os.environ.get("LARQL_RESULTS_DIR", str(REPO_ROOT / "build")))
    if create:
        d.mkdir(parents=True, exist_ok=True)
    return d


def record_results(name: str, payload: dict) -> Path:
    """Merge `payload` under key `name` into <results_dir>/parity-results.json and return the path."""
    path = results_dir() / "parity-results.json"
    data = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (ValueError, OSError):
            data = {}
    data[name] = payload
    data.setdefault("_meta", {})["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)
    return path


def read_lines(name: str) -> list[str]:
    """Non-empty, non-comment lines of tests/python/data/<name>. `\\n` escapes become newlines."""
    out = []
    for line in (DATA_DIR / name).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        out.append(line.replace("\\n", "\n"))
    return out


# --------------------------------------------------------------------------------------------
# larql CLI
# --------------------------------------------------------------------------------------------

class LarqlError(AssertionError):
    pass


def run_larql(args: Sequence[str], timeout: float = 600, check: bool = True,
              binary: Path | None = None) -> subprocess.CompletedProcess:
    """Run `larql ARGS...`; with check=True a non-zero exit raises LarqlError with stderr."""
    cmd = [str(binary or larql_bin()), *map(str, args)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              errors="replace")
    except subprocess.TimeoutExpired as e:
        raise LarqlError(f"timed out after {timeout}s: {' '.join(cmd)}\n"
                         f"stderr: {(e.stderr or '')[-2000:]}") from None
    if check and proc.returncode != 0:
        raise LarqlError(f"exit {proc.returncode}: {' '.join(cmd)}\nstderr: {proc.stderr[-4000:]}")
    return proc


def _parse_json_stdout(proc: subprocess.CompletedProcess, what: str) -> dict:
    text = proc.stdout.strip()
    try:
        return json.loads(text)
    except ValueError:
        # Tolerate log lines before the object: take the last line that parses.
        for line in reversed(text.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    pass
    raise LarqlError(f"larql {what}: stdout is not one JSON object:\n{text[:2000]}\n"
                     f"stderr: {proc.stderr[-2000:]}")


def larql_tokenize(text: str, model: Path | None = None, timeout: float = 120) -> list[int]:
    proc = run_larql(["tokenize", model or model_path(), text, "--json"], timeout=timeout)
    return [int(t) for t in _parse_json_stdout(proc, "tokenize")["ids"]]


def larql_perplexity(text_file: Path, logits_out: Path | None = None, max_tokens: int | None = None,
                     model: Path | None = None, threads: int = THREADS,
                     timeout: float = 1200) -> dict:
    args = ["perplexity", model or model_path(), text_file, "--json", "--threads", threads]
    if max_tokens is not None:
        args += ["--max-tokens", max_tokens]
    if logits_out is not None:
        args += ["--logits-out", logits_out]
    proc = run_larql(args, timeout=timeout)
    out = _parse_json_stdout(proc, "perplexity")
    out["ids"] = [int(t) for t in out["ids"]]
    return out


def larql_generate(prompt: str, n: int, model: Path | None = None, threads: int = THREADS,
                   chat: bool = False, timeout: float = 600, extra_args: Sequence = ()) -> dict:
    args = ["run", model or model_path(), prompt, "-n", n, "--temperature", "0", "--json",
            "--threads", threads, *extra_args]
    if chat:
        args.append("--chat")
    proc = run_larql(args, timeout=timeout)
    out = _parse_json_stdout(proc, "run")
    out["ids"] = [int(t) for t in out["ids"]]
    out["prompt_ids"] = [int(t) for t in out["prompt_ids"]]
    return out


def larql_bench(prompt_tokens: int = 512, decode_tokens: int = 128, threads: int = THREADS,
                model: Path | None = None, binary: Path | None = None,
                timeout: float = 1800) -> dict:
    args = ["bench", model or model_path(), "--prompt-tokens", prompt_tokens,
            "--decode-tokens", decode_tokens, "--threads", threads, "--json"]
    proc = run_larql(args, timeout=timeout, binary=binary)
    return _parse_json_stdout(proc, "bench")


# --------------------------------------------------------------------------------------------
# llama.cpp (llama-cpp-python)
# --------------------------------------------------------------------------------------------

def import_llama_cpp():
    import llama_cpp  # noqa: F401  (raises ImportError when the venv lacks it)
    return llama_cpp


def load_llama(n_ctx: int = 2048, logits_all: bool = False, model: Path | None = None,
               threads: int = THREADS, n_batch: int = 512, kv_f32: bool = False):
    """A llama.cpp context on the model. With logits_all=True `llm.scores` is [n_ctx, vocab] f32
    (allocated lazily by numpy, touched only for evaluated rows).

    kv_f32=False (the default) is *the peer*: llama.cpp's defaults, K/V cache in f16.
    kv_f32=True stores K/V in f32 (type_k = type_v = GGML_TYPE_F32 = 0), everything else equal:
    an equally valid llama.cpp whose distance from the peer is the numerical noise floor the
    parity bars are measured against (flash_attn stays at its default, off)."""
    llama_cpp = import_llama_cpp()
    kv = {}
    if kv_f32:
        f32 = int(getattr(llama_cpp, "GGML_TYPE_F32", 0))
        kv = {"type_k": f32, "type_v": f32}
    return llama_cpp.Llama(
        **kv,
        model_path=str(model or model_path()),
        n_ctx=n_ctx,
        n_batch=n_batch,
        n_ubatch=n_batch,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=logits_all,
        seed=0,
        verbose=False,
    )


def llama_tokenize(llm, text: str, special: bool = True) -> list[int]:
    """llama.cpp's tokenization with BOS; special tokens (`<end_of_turn>`...) parsed when special
    (larql's `tokenize` and `run` contract). llama.cpp's own perplexity tool tokenizes text
    files with special=False, and so does `larql perplexity`."""
    return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)]


def llama_logits(llm, ids: Sequence[int]) -> np.ndarray:
    """Logits [len(ids), vocab] (a view into llm.scores; copy if you keep it across evals).
    Row i = logits after consuming ids[0..i]. Requires logits_all=True and n_ctx >= len(ids)."""
    if not llm._logits_all:
        raise ValueError("llama context needs logits_all=True")
    if len(ids) > llm.n_ctx():
        raise ValueError(f"{len(ids)} tokens > n_ctx {llm.n_ctx()}")
    llm.reset()
    llm.eval(list(ids))
    return llm.scores[: len(ids)]


def _last_logits(llm) -> np.ndarray:
    import llama_cpp
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def llama_greedy(llm, prompt_ids: Sequence[int], n: int,
                 stop_ids: Iterable[int] = STOP_IDS) -> list[int]:
    """Greedy (argmax) continuation of prompt_ids for up to n tokens; stops after a stop id (the
    stop id is included, matching the decision point; callers compare up to and including it)."""
    stop = set(stop_ids)
    llm.reset()
    llm.eval(list(prompt_ids))
    out: list[int] = []
    for _ in range(n):
        tok = int(np.argmax(_last_logits(llm)))
        out.append(tok)
        if tok in stop:
            break
        llm.eval([tok])
    return out


def llama_bench(llm, prompt_ids: Sequence[int], decode_tokens: int) -> dict:
    """Prefill tok/s over one eval of prompt_ids, decode tok/s over decode_tokens single-token
    evals (greedy argmax, stop tokens ignored) on a fresh context."""
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(list(prompt_ids))
    _ = _last_logits(llm)[0]
    t_prefill = time.perf_counter() - t0
    tok = int(np.argmax(_last_logits(llm)))
    t0 = time.perf_counter()
    for _ in range(decode_tokens):
        llm.eval([tok])
        tok = int(np.argmax(_last_logits(llm)))
    t_decode = time.perf_counter() - t0
    return {
        "prompt_tokens": len(prompt_ids),
        "decode_tokens": decode_tokens,
        "prefill_s": t_prefill,
        "decode_s": t_decode,
        "prefill_tok_s": len(prompt_ids) / t_prefill,
        "decode_tok_s": decode_tokens / t_decode,
    }


# --------------------------------------------------------------------------------------------
# Comparing logit matrices
# --------------------------------------------------------------------------------------------

def _log_softmax64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@dataclass
class Comparison:
    """Per-position comparison of reference (llama.cpp) and test (larql) logits."""
    kl: np.ndarray                 # [n] KL(ref || test) in nats
    top1_ref: np.ndarray           # [n] argmax of the reference
    top1_test: np.ndarray          # [n] argmax of larql
    ref_margin: np.ndarray         # [n] reference top-1 minus top-2 logit (near-ties explain flips)
    nll_ref: np.ndarray            # [n-1] -log p_ref(ids[i+1] | ids[:i+1])
    nll_test: np.ndarray           # [n-1] same under larql
    max_abs_dlogit: np.ndarray     # [n] max |Δlogit| per row
    extra: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.kl.shape[0])

    def agree(self) -> np.ndarray:
        return self.top1_ref == self.top1_test

    def summary(self, start: int = 0, stop: int | None = None) -> dict:
        sl = slice(start, stop)
        agree = self.agree()[sl]
        kl = self.kl[sl]
        if agree.size == 0:
            return {"positions": 0}
        nll_sl = slice(start, None if stop is None else max(stop - 1, 0))
        nll_r, nll_t = self.nll_ref[nll_sl], self.nll_test[nll_sl]
        return {
            "positions": int(agree.size),
            "top1_agreement": float(agree.mean()),
            "top1_disagreements": int((~agree).sum()),
            "kl_mean": float(kl.mean()),
            "kl_max": float(kl.max()),
            "kl_p99": float(np.quantile(kl, 0.99)),
            "max_abs_dlogit": float(self.max_abs_dlogit[sl].max()),
            "ppl_ref": float(math.exp(nll_r.mean())) if nll_r.size else None,
            "ppl_test": float(math.exp(nll_t.mean())) if nll_t.size else None,
        }

    def disagreements(self, limit: int = 20) -> list[dict]:
        idx = np.nonzero(~self.agree())[0][:limit]
        return [{"pos": int(i), "ref": int(self.top1_ref[i]), "test": int(self.top1_test[i]),
                 "ref_margin": float(self.ref_margin[i]), "kl": float(self.kl[i])} for i in idx]


def compare_logits(ref, test, ids: Sequence[int], chunk: int = 32) -> Comparison:
    """Compare two [n, vocab] logit matrices (numpy arrays or np.load(mmap_mode='r') memmaps)
    row-chunk by row-chunk in float64. Row i predicts ids[i+1]."""
    return compare_logits_multi({"ref": ref, "test": test}, [("ref", "test")], ids,
                                chunk=chunk)[("ref", "test")]


def compare_logits_multi(mats: dict, pairs: Sequence[tuple[str, str]], ids: Sequence[int],
                         chunk: int = 32) -> dict[tuple[str, str], Comparison]:
    """Compare several [n, vocab] logit matrices (arrays or memmaps) pairwise in one pass.

    mats: name -> matrix; pairs: (ref, test) names, KL(ref || test). Each matrix is read, turned
    into float64 and log-normalised once per row chunk however many pairs use it, so comparing
    larql, llama.cpp and a second llama.cpp costs three reads instead of six."""
    n = len(ids)
    names = list(mats)
    for name in names:
        if mats[name].shape[0] < n:
            raise ValueError(f"{name}: logit rows {mats[name].shape[0]} < {n} ids")
    vocab = {mats[name].shape[1] for name in names}
    if len(vocab) != 1:
        raise ValueError(f"vocab mismatch: " + ", ".join(f"{k} {mats[k].shape[1]}" for k in names))
    refs = {r for r, _ in pairs}
    ids_arr = np.asarray(ids, dtype=np.int64)
    top1 = {k: np.empty(n, dtype=np.int64) for k in names}
    margin = {k: np.empty(n) for k in refs}
    nll = {k: np.empty(max(n - 1, 0)) for k in names}
    kl = {pq: np.empty(n) for pq in pairs}
    maxd = {pq: np.empty(n) for pq in pairs}
    # Row-chunk buffers, reused: fresh 64 MiB temporaries per operation cost more in page faults
    # than the arithmetic.
    vocab_n = next(iter(vocab))
    xbuf = {k: np.empty((chunk, vocab_n)) for k in names}
    pbuf = {k: np.empty((chunk, vocab_n)) for k in refs}
    scratch = np.empty((chunk, vocab_n))
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        rows = np.arange(e - s)
        tgt_pos = np.arange(s, e) + 1
        ok = tgt_pos < n
        tmp = scratch[: e - s]
        x, lse = {}, {}
        for k in names:
            r = xbuf[k][: e - s]
            np.copyto(r, mats[k][s:e], casting="unsafe")
            if not np.all(np.isfinite(r)):
                bad = s + int(np.nonzero(~np.isfinite(r).all(axis=1))[0][0])
                raise AssertionError(f"{k} logits contain non-finite values at position {bad}")
            a = r.argmax(axis=1)
            top1[k][s:e] = a
            best = r[rows, a]
            if k in refs:
                r[rows, a] = -np.inf
                margin[k][s:e] = best - r.max(axis=1)
                r[rows, a] = best
            ex = pbuf[k][: e - s] if k in refs else tmp
            np.subtract(r, best[:, None], out=ex)
            np.exp(ex, out=ex)
            z = ex.sum(axis=1)
            lse[k] = best + np.log(z)
            if k in refs:
                ex /= z[:, None]
            # NLL of the next token: rows s..e-1 predict ids[s+1..e]; the last row has no target.
            if ok.any():
                nll[k][tgt_pos[ok] - 1] = lse[k][ok] - r[rows[ok], ids_arr[tgt_pos[ok]]]
            x[k] = r
        for rk, tk in pairs:
            d = np.subtract(x[rk], x[tk], out=tmp)
            # KL = sum p_r (r - t) - lse_r + lse_t, since sum p_r = 1.
            kl[(rk, tk)][s:e] = np.einsum("ij,ij->i", pbuf[rk][: e - s], d) - lse[rk] + lse[tk]
            np.abs(d, out=d)
            maxd[(rk, tk)][s:e] = d.max(axis=1)
        del x
    return {(rk, tk): Comparison(kl=np.maximum(kl[(rk, tk)], 0.0), top1_ref=top1[rk],
                                 top1_test=top1[tk], ref_margin=margin[rk], nll_ref=nll[rk],
                                 nll_test=nll[tk], max_abs_dlogit=maxd[(rk, tk)])
            for rk, tk in pairs}


def perplexity_from_logits(logits, ids: Sequence[int], chunk: int = 64) -> float:
    """exp(mean over i=1..n-1 of -log p(ids[i] | ids[:i])) from a [n, vocab] logit matrix."""
    n = len(ids)
    total = 0.0
    for s in range(0, n - 1, chunk):
        e = min(n - 1, s + chunk)
        lp = _log_softmax64(np.asarray(logits[s:e], dtype=np.float64))
        total -= lp[np.arange(e - s), np.asarray(ids[s + 1:e + 1])].sum()
    return math.exp(total / (n - 1))


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token, or None when one is a prefix of the other and the
    lengths match."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def write_text_file(text: str, directory: Path | None = None) -> Path:
    fd, name = tempfile.mkstemp(suffix=".txt", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return Path(name)
