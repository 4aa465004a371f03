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
larql.NotFound also a FileNotFoundError, ...); an argument of the wrong type is a TypeError.
The GIL is released while the engine computes, and Ctrl-C stops it (KeyboardInterrupt).
"""
from __future__ import annotations

import json
import math
import numbers
import operator
import os
import re
import sys
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

# --- argument checks: every message names the Python parameter and what it takes -----------------

_INT32_MAX = 2**31 - 1


def _type_name(v) -> str:
    return type(v).__name__


def _int(name: str, v, lo: int, hi: int) -> int:
    """An int (or numpy integer; not a bool, float or str) in [lo, hi]."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {_type_name(v)} {v!r}")
    v = operator.index(v)
    if not lo <= v <= hi:
        raise InvalidArgument(f"{name} must be an int in [{lo}, {hi}], got {v}")
    return v


def _float(name: str, v) -> float:
    """A real number (int, float or numpy scalar; not a bool or str), as float."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a number (int or float), got {_type_name(v)} {v!r}")
    return float(v)


def _bool(name: str, v) -> bool:
    """True or False (or a numpy bool): not 0/1, not "yes"."""
    if isinstance(v, bool):
        return v
    if type(v).__module__ == "numpy" and type(v).__name__ in ("bool_", "bool"):
        return bool(v)
    raise TypeError(f"{name} must be True or False, got {_type_name(v)} {v!r}")


def _text(name: str, v) -> str:
    """A str that is valid Unicode (encodable as UTF-8: no lone surrogate such as '\\ud800')."""
    if not isinstance(v, str):
        raise TypeError(f"{name} must be a str, got {_type_name(v)} {v!r}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = v[e.start]
        raise InvalidArgument(f"{name} is not valid Unicode text: it holds the lone surrogate U+{ord(bad):04X} at index "
                              f"{e.start}, which has no UTF-8 encoding") from None
    return v


def _path(name: str, p) -> str:
    if not isinstance(p, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {_type_name(p)} {p!r}")
    p = os.fspath(p)
    if not isinstance(p, str):
        raise TypeError(f"{name} must be a str path, got {_type_name(p)}")
    return _text(name, p)


def _opt_str(name: str, v) -> str:
    return "" if v is None else _text(name, v)


def _choice(name: str, v, choices: Sequence[str]) -> str:
    """One of `choices` (case-insensitive); returned as listed."""
    if not isinstance(v, str):
        raise TypeError(f"{name} must be a str, one of {', '.join(map(repr, choices))}; got {_type_name(v)} {v!r}")
    for c in choices:
        if v.lower() == c.lower():
            return c
    raise InvalidArgument(f"{name} must be one of {', '.join(map(repr, choices))}, got {v!r}")


def _ids(name: str, v, vocab: int) -> list[int]:
    """A sequence of token ids (ints, or a 1-D numpy integer array), each in [0, vocab)."""
    if isinstance(v, (str, bytes, bytearray)) or v is None:
        raise TypeError(f"{name} must be a sequence of int token ids, got {_type_name(v)}")
    np = sys.modules.get("numpy")
    if np is not None and isinstance(v, np.ndarray):
        if v.ndim != 1 or v.dtype.kind not in "iu":
            raise TypeError(f"{name} must be a 1-D array of integer token ids, got {v.ndim}-D {v.dtype}")
        v = v.tolist()
    try:
        items = list(v)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of int token ids, got {_type_name(v)}") from None
    out = []
    for i, t in enumerate(items):
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise TypeError(f"{name}[{i}] must be an int token id, got {_type_name(t)} {t!r}")
        t = operator.index(t)
        if not 0 <= t < vocab:
            raise InvalidArgument(f"{name}[{i}]: token id {t} is outside the vocabulary [0, {vocab})")
        out.append(t)
    return out


def _tokens(name: str, v, vocab: int):
    """Text (a valid Unicode str) or token ids."""
    return _text(name, v) if isinstance(v, str) else _ids(name, v, vocab)


def _made_by(cls: str, maker: str):
    def __init__(self, *args, **kwargs):
        raise TypeError(f"larql.{cls} is not made directly: {maker} returns one")
    __init__.__doc__ = f"Not made directly: {maker} returns a {cls}."
    return __init__


# --- generation --------------------------------------------------------------------------------


class Generation:
    """A streaming generation (Model.generate / Session.generate): iterate it for the text pieces
    as they are produced.

    After the iteration ends, `result` holds {text, ids, prompt_ids, stop_reason, notes,
    prefill_tok_s, decode_tok_s}. `close()` (or leaving a `with` block, or dropping the object)
    cancels a generation still running; so does Ctrl-C while waiting for a piece (the iteration
    raises KeyboardInterrupt, stop_reason "cancelled"; an interrupt that lands in the loop's own
    body leaves it running until it is closed: `with m.generate(...) as g:` closes it on the way
    out). When its model or session is closed while it runs, the iteration raises
    larql.Cancelled after the pieces already made."""

    __init__ = _made_by("Generation", "Model.generate()")

    @classmethod
    def _make(cls, native) -> "Generation":
        g = cls.__new__(cls)
        g._g = native
        g._result = None
        return g

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        try:
            piece = self._g._next()
        except BaseException:  # Ctrl-C (or a SystemExit) landing around the wait: stop the work too
            self._g._close()
            raise
        if piece is None:
            self._result = self._g._result()
            raise StopIteration
        return piece

    @property
    def result(self) -> dict | None:
        """{text, ids, prompt_ids, stop_reason, notes, prefill_tok_s, decode_tok_s} once the
        generation has ended (None while it runs)."""
        if self._result is None:
            self._result = self._g._result()
        return self._result

    def close(self) -> None:
        """Cancel the generation if it still runs (it stops before its next token)."""
        self._g._close()

    def __enter__(self) -> "Generation":
        """`with ... as x:` gives the Generation itself and closes it at the end of the block."""
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def text(self) -> str:
        """Run to the end; the whole generated text."""
        return "".join(self)


# --- trace -------------------------------------------------------------------------------------


class Trace:
    """What Model.trace() recorded, as numpy views of buffers the Trace owns (no copy: the same
    buffer on every read; the arrays keep the Trace alive).

    logits: [positions, vocab]; residual, attn, ffn_in, ffn: [len(layers), positions, hidden];
    ids: the token ids; layers: the captured layers, in the order asked."""

    __slots__ = ("_c", "_model")
    __init__ = _made_by("Trace", "Model.trace()")

    @classmethod
    def _make(cls, native, model: "Model") -> "Trace":
        t = cls.__new__(cls)
        t._c = native
        t._model = model
        return t

    @property
    def ids(self) -> list[int]:
        """The token ids run, one per position."""
        return self._c.ids

    @property
    def layers(self) -> list[int]:
        """The captured layers, in the order asked."""
        return self._c.layers

    @property
    def logits(self):
        """numpy float32 [positions, vocab]: the logits of every position."""
        return self._c.logits

    @property
    def residual(self):
        """numpy float32 [len(layers), positions, hidden]: the residual leaving each layer."""
        return self._c._rows("residual")

    @property
    def attn(self):
        """numpy float32 [len(layers), positions, hidden]: what attention added to the residual."""
        return self._c._rows("attn")

    @property
    def ffn_in(self):
        """numpy float32 [len(layers), positions, hidden]: the FFN's input (ffn_norm of the residual)."""
        return self._c._rows("ffn_in")

    @property
    def ffn(self):
        """numpy float32 [len(layers), positions, hidden]: what the FFN added to the residual."""
        return self._c._rows("ffn")

    def logit_lens(self, top: int = 5, position: int = -1) -> list[dict]:
        """Per captured layer, the `top` tokens of lm_head . final_norm(residual) at `position`
        (the logit lens: what the model would say if it stopped after that layer), as
        {layer, ids, tokens, logits}."""
        import numpy as np
        top = _int("top", top, 1, _INT32_MAX)
        n = len(self.ids)
        position = _int("position", position, -n, n - 1)
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

    def __repr__(self) -> str:
        return f"<larql.Trace {len(self.ids)} positions, layers {self.layers}>"


# --- sessions ----------------------------------------------------------------------------------


class Session:
    """One sequence that successive generate() calls continue (a chat): the engine keeps its
    state between calls. Made by Model.session(); `with model.session() as s:` closes it.

    save_state(path) writes it (a kv state file); Model.session(resume=path) continues it in
    another process. close() stops a generation running on it (which raises larql.Cancelled) and
    releases its engine; a closed session raises larql.InvalidArgument."""

    __init__ = _made_by("Session", "Model.session()")

    @classmethod
    def _make(cls, model: "Model", native) -> "Session":
        s = cls.__new__(cls)
        s._model = model
        s._s = native
        return s

    def generate(self, prompt: str | Sequence[int], max_tokens: int = 128, temperature: float = 0.8, top_k: int = 40,
                 top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0, seed: int | None = None,
                 stop: str | Sequence[str] = (), ignore_eos: bool = False) -> Generation:
        """Continue the sequence with `prompt` (text: BOS only at the start of a new sequence; or
        token ids) and stream the continuation, as Model.generate (same options)."""
        return self._model._generate(prompt, self._s, "", max_tokens, temperature, top_k, top_p, min_p,
                                     repeat_penalty, seed, stop, ignore_eos)

    def restart(self) -> None:
        """The next generate() starts a new sequence."""
        self._s._restart()

    @property
    def context(self) -> int:
        """The positions this session may use."""
        return self._s._context()

    @property
    def closed(self) -> bool:
        """Whether close() (of the session or its model) was called."""
        return self._s._closed

    def save_state(self, path) -> None:
        """Write the sequence (engine state, tokens, sampler) to a state file at `path`."""
        self._s._save_state(_path("path", path))

    def close(self) -> None:
        """Stop a generation running on the session and release its engine (idempotent)."""
        self._s._close()

    def __enter__(self) -> "Session":
        """`with ... as x:` gives the Session itself and closes it at the end of the block."""
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<larql.Session (closed)>" if self.closed else f"<larql.Session context {self.context}>"


# --- the model ---------------------------------------------------------------------------------


class Model:
    """A model from a GGUF file, a vindex directory (level inference) or a Hugging Face directory.

    Model(path, threads=0, engine="standard"): `threads` 0 = one per core; `engine` the default
    KV engine spec of generate() (`larql engines` lists them). Thread-safe: any number of Python
    threads may generate on one Model at once (each generation has its own session). close() (or
    leaving a `with` block) stops what runs on it and releases the weights."""

    def __init__(self, path, threads: int = 0, engine: str = "standard"):
        """Open `path` (a GGUF file, a vindex directory or a Hugging Face directory) with
        `threads` compute threads (0: one per core) and `engine` as generate()'s default KV engine.
        Errors: larql.NotFound, larql.FormatError, larql.Unsupported, larql.InvalidArgument."""
        path = _path("path", path)
        threads = _int("threads", threads, 0, 1024)
        engine = _text("engine", engine)
        self._native = _larql.Model(path, threads, engine)
        self._vocab = self._native.config["vocab"]
        self._n_layers = self._native.config["n_layers"]

    @property
    def path(self) -> str:
        """The path the model was opened from."""
        return self._native.path

    @property
    def config(self) -> dict:
        """arch, name, n_layers, hidden, ffn, n_heads, n_kv_heads, head_dim, vocab,
        context_length, n_experts, n_experts_used."""
        return self._native.config

    @property
    def threads(self) -> int:
        """Compute threads of the model's pool."""
        return self._native.threads

    @property
    def engine(self) -> str:
        """The default KV engine spec of generate()."""
        return self._native.engine

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._native.closed

    def close(self) -> None:
        """Stop every computation on the model (a generation in another thread raises
        larql.Cancelled; so does a logits() call), wait for them, and release the weights and its
        sessions' engines. Any later use raises larql.InvalidArgument ("the model is closed").
        Idempotent."""
        self._native.close()

    def __enter__(self) -> "Model":
        """`with ... as x:` gives the Model itself and closes it at the end of the block."""
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<larql.Model (closed)>"
        c = self.config
        return f"<larql.Model {self.path!r} {c['arch']} {c['n_layers']} layers, hidden {c['hidden']}>"

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text` (BOS first when add_bos and the vocabulary wants one; special-token
        text such as "<start_of_turn>" parsed when `special`)."""
        return self._native.tokenize(_text("text", text), _bool("add_bos", add_bos), _bool("special", special))

    def detokenize(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """The text of token ids (a lone byte of a multi-byte character shows as U+FFFD)."""
        return self._native.detokenize(_ids("ids", ids, self._vocab), _bool("skip_special", skip_special))

    # -- scoring --
    def logits(self, tokens: str | Sequence[int], add_bos: bool = True):
        """numpy float32 [positions, vocab]: the logits of every position, from one batched
        forward pass — what `larql perplexity --logits-out` writes, bit for bit. `tokens`: text
        (encoded with BOS when add_bos) or token ids."""
        return self._native._logits(_tokens("tokens", tokens, self._vocab), _bool("add_bos", add_bos))

    def perplexity(self, tokens: str | Sequence[int], add_bos: bool = True) -> float:
        """exp(mean NLL) of every token after the first, as `larql perplexity`."""
        return self._native._perplexity(_tokens("tokens", tokens, self._vocab), _bool("add_bos", add_bos))

    def trace(self, tokens: str | Sequence[int], layers: Iterable[int] | None = None, add_bos: bool = True) -> Trace:
        """Run `tokens` and record, at each of `layers` (default: every layer), the residual,
        attention and FFN rows of every position: a Trace of numpy views (no copy)."""
        tokens = _tokens("tokens", tokens, self._vocab)
        if layers is None:
            ls = list(range(self._n_layers))
        else:
            if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
                raise TypeError(f"layers must be an iterable of int layer numbers, got {_type_name(layers)}")
            ls = [_int(f"layers[{i}]", x, 0, self._n_layers - 1) for i, x in enumerate(layers)]
        return Trace._make(self._native._trace(tokens, ls, _bool("add_bos", add_bos)), self)

    # -- generation --
    def generate(self, prompt: str | Sequence[int], max_tokens: int = 128, temperature: float = 0.8, top_k: int = 40,
                 top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0, seed: int | None = None,
                 stop: str | Sequence[str] = (), ignore_eos: bool = False, engine: str | None = None) -> Generation:
        """Stream a continuation of `prompt` (text: BOS added on a new sequence; or token ids):
        an iterator of text pieces, with the sampling options of `larql run` (temperature 0 =
        greedy). Stops at max_tokens, an end-of-generation token (unless ignore_eos), a stop
        string, or the context. `engine`: a KV engine spec for this call (default: the model's).

        max_tokens: int in [0, 2**31 - 1]; temperature: >= 0; top_k: int >= 0 (0: off); top_p in
        (0, 1]; min_p in [0, 1]; repeat_penalty > 0 (1: off); seed: int in [0, 2**64 - 1] or None
        (random); stop: a str or a sequence of str; ignore_eos: bool."""
        return self._generate(prompt, None, _opt_str("engine", engine), max_tokens, temperature, top_k, top_p, min_p,
                              repeat_penalty, seed, stop, ignore_eos)

    def _generate(self, prompt, session, engine, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed,
                  stop, ignore_eos) -> Generation:
        prompt = _tokens("prompt", prompt, self._vocab)
        max_tokens = _int("max_tokens", max_tokens, 0, _INT32_MAX)
        temperature = _float("temperature", temperature)
        if not (temperature >= 0 and math.isfinite(temperature)):
            raise InvalidArgument(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        top_k = _int("top_k", top_k, 0, _INT32_MAX)
        top_p = _float("top_p", top_p)
        if not 0 < top_p <= 1:
            raise InvalidArgument(f"top_p must be in (0, 1], got {top_p}")
        min_p = _float("min_p", min_p)
        if not 0 <= min_p <= 1:
            raise InvalidArgument(f"min_p must be in [0, 1], got {min_p}")
        repeat_penalty = _float("repeat_penalty", repeat_penalty)
        if not (repeat_penalty > 0 and math.isfinite(repeat_penalty)):
            raise InvalidArgument(f"repeat_penalty must be > 0 (1 = off), got {repeat_penalty}")
        if seed is not None:
            seed = _int("seed", seed, 0, 2**64 - 1)
        if isinstance(stop, str):
            stop = [stop]
        elif isinstance(stop, (bytes, bytearray)) or not isinstance(stop, Iterable):
            raise TypeError(f"stop must be a str or a sequence of str, got {_type_name(stop)}")
        stop = [_text(f"stop[{i}]", s) for i, s in enumerate(stop)]
        ignore_eos = _bool("ignore_eos", ignore_eos)
        return Generation._make(self._native._stream(prompt, engine, max_tokens, temperature, top_k, top_p, min_p,
                                                     repeat_penalty, seed, stop, ignore_eos, session))

    def complete(self, prompt: str | Sequence[int], **kw) -> dict:
        """generate() run to the end: {text, ids, prompt_ids, stop_reason, ...}. Takes generate()'s
        options."""
        with self.generate(prompt, **kw) as g:
            for _ in g:
                pass
            return g.result

    def session(self, engine: str | None = None, context: int = 0, resume=None, save_state=None) -> Session:
        """A Session: one sequence continued across generate() calls. `context`: positions it may
        use (0: the model's); `resume`: a state file to continue; `save_state`: written after
        every generate(). `with model.session() as s:` closes it."""
        engine = _opt_str("engine", engine)
        context = _int("context", context, 0, _INT32_MAX)
        resume = "" if resume is None else _path("resume", resume)
        save_state = "" if save_state is None else _path("save_state", save_state)
        return Session._make(self, self._native._session(engine, context, resume, save_state))


# --- the vindex (LQL) --------------------------------------------------------------------------


class Table(list):
    """One LQL result: a list of row dicts, with `.statement`, `.title`, `.columns`, `.notes` and
    `.doc` (the JSON document `larql lql --json` prints). `.df()` gives a pandas DataFrame when
    pandas is installed. Table(doc) makes one from such a document (a dict)."""

    def __init__(self, doc: dict):
        """A Table of one LQL JSON result (`larql lql --json`'s document, as a dict)."""
        if not isinstance(doc, dict):
            raise TypeError(f"doc must be a dict (an LQL JSON result), got {_type_name(doc)}")
        names = [c["name"] for c in doc.get("columns", [])]
        super().__init__(dict(zip(names, r)) for r in doc.get("rows", []))
        self.statement = doc.get("statement", "")
        self.title = doc.get("title", "")
        self.columns = names
        self.notes = doc.get("notes", [])
        self.doc = doc

    def df(self):
        """The rows as a pandas DataFrame (needs pandas)."""
        import pandas as pd
        return pd.DataFrame(list(self), columns=self.columns)

    def __repr__(self) -> str:
        return f"<larql.Table {self.statement} {len(self)} rows: {self.title!r}>"


def _q(name: str, s) -> str:
    """An LQL string literal of the str argument `name`."""
    s = _text(name, s)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Vindex:
    """A vindex directory in an LQL session (docs/lql.md): queries return Tables (lists of row
    dicts); edits (insert, update, delete) live in the session until compile().

    Vindex(path, threads=0). Used by one thread at a time; close() (or leaving a `with` block)
    releases it."""

    def __init__(self, path, threads: int = 0):
        """Open the vindex directory `path` in an LQL session (`threads` 0: one per core)."""
        path = _path("path", path)
        threads = _int("threads", threads, 0, 1024)
        self._native = _larql.Vindex(path, threads)
        self._layers = self._native._info()["num_layers"]

    @property
    def info(self) -> dict:
        """path, model, num_layers, extract_level of the vindex in use."""
        return self._native._info()

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._native.closed

    def close(self) -> None:
        """Stop a statement running on it and release the vindex (idempotent); any later use
        raises larql.InvalidArgument ("the vindex is closed")."""
        self._native.close()

    def __enter__(self) -> "Vindex":
        """`with ... as x:` gives the Vindex itself and closes it at the end of the block."""
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<larql.Vindex (closed)>"
        i = self.info
        return f"<larql.Vindex {i['path']!r} {i['model']} {i['num_layers']} layers, level {i['extract_level']}>"

    def lql(self, text: str) -> list[Table]:
        """Run LQL statements (';'-separated): one Table per statement, as `larql lql --json`.

        The statements run in order and stop at the first that fails: its exception (a
        larql.Error) carries the Tables of the statements before it in `.results`."""
        try:
            docs = self._native._lql(_text("text", text))
        except Error as e:
            done = getattr(e, "_lql_docs", None)
            if done is not None:
                e.results = [Table(json.loads(d)) for d in done]
                del e._lql_docs
            raise
        return [Table(json.loads(d)) for d in docs]

    def _one(self, statement: str) -> Table:
        # The methods below write the LQL themselves: an error names the statement they ran, not
        # a line:column of text the caller never wrote.
        try:
            return self.lql(statement)[-1]
        except Error as e:
            msg = re.sub(r" at \d+:\d+", "", str(e))
            raise type(e)(f"{msg} (in the LQL statement this method ran: {statement})") from None

    def _layer(self, layer) -> str:
        return "" if layer is None else f" AT LAYER {_int('layer', layer, 0, self._layers - 1)}"

    def describe(self, entity: str, layer: int | None = None, raw: bool = False) -> Table:
        """DESCRIBE: the features whose gates fire on `entity` (at `layer`, or every layer), with
        the tokens they write; `raw` without the relation filter."""
        return self._one(f"DESCRIBE {_q('entity', entity)}" + self._layer(layer) + (" RAW" if _bool("raw", raw) else ""))

    def walk(self, prompt: str, top: int = 5) -> Table:
        """WALK: the top features of every layer along the prompt's residual stream."""
        return self._one(f"WALK {_q('prompt', prompt)} TOP {_int('top', top, 1, _INT32_MAX)}")

    def select(self, where: str = "", limit: int = 20, what: str = "FEATURES") -> Table:
        """SELECT * FROM `what` ("FEATURES", "EDGES" or "ENTITIES") [WHERE `where`, an LQL
        condition] LIMIT `limit`."""
        what = _choice("what", what, ("FEATURES", "EDGES", "ENTITIES"))
        where = _text("where", where)
        return self._one(f"SELECT * FROM {what}" + (f" WHERE {where}" if where else "") +
                         f" LIMIT {_int('limit', limit, 0, _INT32_MAX)}")

    def infer(self, prompt: str, top: int = 5) -> Table:
        """INFER: the model's top next tokens after `prompt` (with the session's edits)."""
        return self._one(f"INFER {_q('prompt', prompt)} TOP {_int('top', top, 1, _INT32_MAX)}")

    def trace(self, prompt: str) -> Table:
        """TRACE: per layer, what attention and the FFN add toward the prompt's top token."""
        return self._one(f"TRACE {_q('prompt', prompt)}")

    def insert(self, entity: str, relation: str, target: str, layer: int | None = None, mode: str = "compose") -> Table:
        """INSERT a fact (entity, relation, target) into the session's edits; `mode` "compose"
        (writes a feature), "knn" (a KNN store entry), "robust" (a feature keyed on the entity) or
        "subject" (a feature at the subject's token with a learned value; docs/lql.md "Knowledge
        edits")."""
        mode = _choice("mode", mode, ("compose", "knn", "robust", "subject"))
        return self._one(f"INSERT INTO EDGES (entity, relation, target) VALUES ({_q('entity', entity)}, "
                         f"{_q('relation', relation)}, {_q('target', target)})" + self._layer(layer) +
                         ("" if mode == "compose" else f" MODE {mode.upper()}"))

    def patches(self) -> Table:
        """SHOW PATCHES: the session's edits."""
        return self._one("SHOW PATCHES")

    def compile(self, path, into: str = "VINDEX") -> Table:
        """COMPILE CURRENT INTO `into` ("VINDEX": a vindex directory with the edits baked in;
        "MODEL": a GGUF file) at `path`."""
        into = _choice("into", into, ("VINDEX", "MODEL"))
        return self._one(f"COMPILE CURRENT INTO {into} {_q('path', _path('path', path))}")
