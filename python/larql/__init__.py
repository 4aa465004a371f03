"""larql: run, inspect and edit transformer models from Python (docs/python.md).

    import larql
    m = larql.Model("models/gemma-3-270m-q4_k_m.gguf")
    for piece in m.generate("The capital of France is", max_tokens=16, temperature=0):
        print(piece, end="", flush=True)
    logits = m.logits("The capital of France is")          # numpy [positions, vocab]
    tr = m.trace("The capital of France is", layers=[3, 9])
    tr.residual.shape                                       # [2, positions, hidden]

    v = larql.Vindex("gemma.vindex")
    v.describe("France")                                    # list of dicts (one per row)

Errors are larql.Error subclasses by kind (larql.InvalidArgument is also a ValueError,
larql.NotFound also a FileNotFoundError, ...). The GIL is released while the engine computes.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Iterable, Iterator, Sequence

from . import _larql
from ._larql import (  # noqa: F401  (re-exported)
    BackendFailure,
    BackendUnavailable,
    Cancelled,
    ContextOverflow,
    EmptyPrompt,
    Error,
    FormatError,
    InvalidArgument,
    InvariantViolation,
    IoError,
    NotFound,
    RetrievalMiss,
    Unsupported,
)

__all__ = [
    "Model", "Session", "Generation", "Trace", "Vindex", "Table",
    "Error", "InvalidArgument", "NotFound", "IoError", "FormatError", "Unsupported", "ContextOverflow",
    "EmptyPrompt", "BackendUnavailable", "RetrievalMiss", "InvariantViolation", "BackendFailure", "Cancelled",
]
__version__ = "0.1.0"

_Tokens = "str | Sequence[int]"


def _path(p) -> str:
    if isinstance(p, (str, os.PathLike)):
        return os.fspath(p)
    raise TypeError(f"expected a path (str or os.PathLike), got {type(p).__name__}")


class _Closing:
    """`with` closes the object (its close() method)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Generation(_Closing):
    """A streaming generation: iterate it for the text pieces as they are produced.

    After the iteration ends, `result` holds {text, ids, prompt_ids, stop_reason, notes,
    prefill_tok_s, decode_tok_s}. `close()` (or leaving a `with` block, or dropping the object)
    cancels a generation still running."""

    def __init__(self, native):
        self._g = native
        self._result = None

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        piece = self._g._next()
        if piece is None:
            self._result = self._g._result()
            raise StopIteration
        return piece

    @property
    def result(self) -> dict | None:
        if self._result is None:
            self._result = self._g._result()
        return self._result

    def close(self) -> None:
        self._g._close()

    def text(self) -> str:
        """Run to the end; the whole generated text."""
        return "".join(self)


class Trace:
    """What Model.trace recorded, as numpy views of buffers the object owns (no copy; the same
    buffer on every read): `logits` [positions, vocab]; `residual` (the residual leaving each
    layer), `attn` (what attention adds), `ffn_in` (the FFN's normed input) and `ffn` (what the FFN
    adds), each [len(layers), positions, hidden]; `ids`, `layers`."""

    def __init__(self, native, model: "Model"):
        self._c = native
        self._model = model

    ids = property(lambda self: self._c.ids)
    layers = property(lambda self: self._c.layers)
    logits = property(lambda self: self._c.logits)
    residual = property(lambda self: self._c._rows("residual"))
    attn = property(lambda self: self._c._rows("attn"))
    ffn_in = property(lambda self: self._c._rows("ffn_in"))
    ffn = property(lambda self: self._c._rows("ffn"))

    def logit_lens(self, top: int = 5, position: int = -1) -> list[dict]:
        """Per captured layer, the top tokens of lm_head . final_norm(residual) at `position`
        (the logit lens: what the model would say if it stopped after that layer)."""
        import numpy as np
        res = self.residual
        rows = np.ascontiguousarray(res[:, position, :])
        lg = self._model._native._lens(rows)
        out = []
        for i, layer in enumerate(self.layers):
            order = np.argsort(-lg[i], kind="stable")[:top]
            out.append({"layer": layer, "ids": [int(t) for t in order],
                        "tokens": [self._model.detokenize([int(t)]) for t in order],
                        "logits": [float(lg[i, t]) for t in order]})
        return out


class Session:
    """One sequence that successive generate() calls continue (a chat): the engine keeps its
    state between calls. `save_state(path)` writes it (kv state file); Model.session(resume=path)
    continues it in another process."""

    def __init__(self, model: "Model", native):
        self._model = model
        self._s = native

    def generate(self, prompt: _Tokens, **kw) -> Generation:
        return self._model.generate(prompt, _session=self._s, **kw)

    def restart(self) -> None:
        """The next generate() starts a new sequence."""
        self._s._restart()

    @property
    def context(self) -> int:
        return self._s._context()

    def save_state(self, path) -> None:
        self._s._save_state(_path(path))


class Model(_Closing):
    """A model from a GGUF file, a vindex directory (level inference) or a Hugging Face directory.

    Model(path, threads=0, engine="standard"): `threads` 0 = one per core; `engine` the default
    KV engine spec of generate() (`larql engines` lists them). Thread-safe: any number of Python
    threads may generate on one Model at once (each generation has its own session)."""

    def __init__(self, path, threads: int = 0, engine: str = "standard"):
        if not isinstance(threads, int) or isinstance(threads, bool):
            raise TypeError(f"threads must be an int, got {type(threads).__name__}")
        if not isinstance(engine, str):
            raise TypeError(f"engine must be a str, got {type(engine).__name__}")
        self._native = _larql.Model(_path(path), threads, engine)

    # -- basics --
    path = property(lambda self: self._native.path)
    config = property(lambda self: self._native.config, doc="arch, n_layers, hidden, vocab, context_length, ...")
    threads = property(lambda self: self._native.threads)
    closed = property(lambda self: self._native.closed)

    def close(self) -> None:
        """Release the weights; using the model afterwards raises larql.InvalidArgument."""
        self._native.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<larql.Model (closed)>"
        c = self.config
        return f"<larql.Model {self.path!r} {c['arch']} {c['n_layers']} layers, hidden {c['hidden']}>"

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text` (BOS first when add_bos and the vocabulary wants one; special-token
        text such as "<start_of_turn>" parsed when `special`)."""
        return self._native.tokenize(text, add_bos, special)

    def detokenize(self, ids: Sequence[int], skip_special: bool = False) -> str:
        return self._native.detokenize(list(ids), skip_special)

    # -- scoring --
    def logits(self, tokens: _Tokens, add_bos: bool = True):
        """numpy float32 [positions, vocab]: the logits of every position, from one batched
        forward pass — what `larql perplexity --logits-out` writes, bit for bit. `tokens`: text
        (encoded with BOS when add_bos) or token ids."""
        return self._native._logits(tokens, add_bos)

    def perplexity(self, tokens: _Tokens, add_bos: bool = True) -> float:
        """exp(mean NLL) of every token after the first, as `larql perplexity`."""
        return self._native._perplexity(tokens, add_bos)

    def trace(self, tokens: _Tokens, layers: Iterable[int] | None = None, add_bos: bool = True) -> Trace:
        """Run `tokens` and record, at each of `layers` (default: every layer), the residual,
        attention and FFN rows of every position: a Trace of numpy views (no copy)."""
        ls = list(range(self.config["n_layers"])) if layers is None else [int(x) for x in layers]
        return Trace(self._native._trace(tokens, ls, add_bos), self)

    # -- generation --
    def generate(self, prompt: _Tokens, max_tokens: int = 128, temperature: float = 0.8, top_k: int = 40,
                 top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0, seed: int | None = None,
                 stop: Sequence[str] = (), ignore_eos: bool = False, engine: str | None = None,
                 _session=None) -> Generation:
        """Stream a continuation of `prompt` (text: BOS added on a new sequence; or token ids):
        an iterator of text pieces, with the sampling options of `larql run` (temperature 0 =
        greedy). Stops at max_tokens, an end-of-generation token (unless ignore_eos), a stop
        string, or the context. `engine`: a KV engine spec for this call (default: the model's)."""
        if isinstance(stop, str):
            stop = [stop]
        return Generation(self._native._stream(prompt, engine or "", int(max_tokens), float(temperature), int(top_k),
                                               float(top_p), float(min_p), float(repeat_penalty), seed, list(stop),
                                               bool(ignore_eos), _session))

    def complete(self, prompt: _Tokens, **kw) -> dict:
        """generate() run to the end: {text, ids, prompt_ids, stop_reason, ...}."""
        with self.generate(prompt, **kw) as g:
            for _ in g:
                pass
            return g.result

    def session(self, engine: str | None = None, context: int = 0, resume=None, save_state=None) -> Session:
        """A Session: one sequence continued across generate() calls. `context`: positions it may
        use (0: the model's); `resume`: a state file to continue; `save_state`: written after
        every generate()."""
        return Session(self, self._native._session(engine or "", int(context), _path(resume) if resume else "",
                                                   _path(save_state) if save_state else ""))


class Table(list):
    """One LQL result: a list of row dicts, with `.statement`, `.title`, `.columns`, `.notes`.
    `.df()` gives a pandas DataFrame when pandas is installed."""

    def __init__(self, doc: dict):
        names = [c["name"] for c in doc.get("columns", [])]
        super().__init__(dict(zip(names, r)) for r in doc.get("rows", []))
        self.statement = doc.get("statement", "")
        self.title = doc.get("title", "")
        self.columns = names
        self.notes = doc.get("notes", [])
        self.doc = doc

    def df(self):
        import pandas as pd
        return pd.DataFrame(list(self), columns=self.columns)

    def __repr__(self) -> str:
        return f"<larql.Table {self.statement} {len(self)} rows: {self.title!r}>"


def _q(s: str) -> str:
    if not isinstance(s, str):
        raise TypeError(f"expected a str, got {type(s).__name__}")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Vindex(_Closing):
    """A vindex directory in an LQL session (docs/lql.md): queries return Tables (lists of row
    dicts); edits (insert, update, delete) live in the session until compile()."""

    def __init__(self, path, threads: int = 0):
        if not isinstance(threads, int) or isinstance(threads, bool):
            raise TypeError(f"threads must be an int, got {type(threads).__name__}")
        self._native = _larql.Vindex(_path(path), threads)

    def close(self) -> None:
        self._native.close()

    def lql(self, text: str) -> list[Table]:
        """Run LQL statements (';'-separated): one Table per statement, as `larql lql --json`."""
        return [Table(json.loads(d)) for d in self._native._lql(text)]

    def _one(self, text: str) -> Table:
        return self.lql(text)[-1]

    def describe(self, entity: str, layer: int | None = None, raw: bool = False) -> Table:
        return self._one(f"DESCRIBE {_q(entity)}" + (f" AT LAYER {int(layer)}" if layer is not None else "") +
                         (" RAW" if raw else ""))

    def walk(self, prompt: str, top: int = 5) -> Table:
        return self._one(f"WALK {_q(prompt)} TOP {int(top)}")

    def select(self, where: str = "", limit: int = 20, what: str = "FEATURES") -> Table:
        return self._one(f"SELECT * FROM {what}" + (f" WHERE {where}" if where else "") + f" LIMIT {int(limit)}")

    def infer(self, prompt: str, top: int = 5) -> Table:
        return self._one(f"INFER {_q(prompt)} TOP {int(top)}")

    def trace(self, prompt: str) -> Table:
        return self._one(f"TRACE {_q(prompt)}")

    def insert(self, entity: str, relation: str, target: str, layer: int | None = None, mode: str = "compose") -> Table:
        return self._one(f"INSERT INTO EDGES (entity, relation, target) VALUES ({_q(entity)}, {_q(relation)}, {_q(target)})" +
                         (f" AT LAYER {int(layer)}" if layer is not None else "") +
                         (" MODE KNN" if mode.lower() == "knn" else ""))

    def patches(self) -> Table:
        return self._one("SHOW PATCHES")

    def compile(self, path, into: str = "VINDEX") -> Table:
        return self._one(f"COMPILE CURRENT INTO {into.upper()} {_q(_path(path))}")
