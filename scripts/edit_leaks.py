"""Which inserted features disturb an edit-eval set's neighbourhood prompts (docs/BENCHMARKS.md
"MODE SUBJECT": how the layer-1 gates and the shared name endings were found).

Applies a patch (`larql edit-eval --patch-out`) in an LQL session and asks INFER for every distinct
neighbourhood prompt of the set; for each whose top-1 is no longer the set's answer it prints the
appended features active on it: each insert op's activation, act(gate . x) * (up . x) (the model's
FFN activation: GELU-tanh for Gemma), at every position, x the base model's FFN input at the op's
layer (Model.trace), ranked by |activation| x |down column|. Run from the repository root with the
project's venv, after `make build` (the Python module under build/python):

    .venv/bin/python scripts/edit_leaks.py build/edit-eval.vindex data/edit_eval/full.jsonl edits.vlp
"""
from __future__ import annotations

import argparse
import base64
import collections
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "build" / "python"))
import larql  # noqa: E402


def vec(b64: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype=np.float32)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vindex")
    ap.add_argument("set", help="an edit-eval set (data/edit_eval/*.jsonl)")
    ap.add_argument("patch", help="a .vlp of insert ops with vectors (edit-eval --patch-out)")
    ap.add_argument("--top", type=int, default=6, help="features shown per changed prompt")
    ap.add_argument("--min-activation", type=float, default=0.02)
    ap.add_argument("-t", "--threads", type=int, default=0)
    a = ap.parse_args()

    by_layer = collections.defaultdict(list)
    for o in json.loads(Path(a.patch).read_text())["operations"]:
        if o.get("op") == "insert" and "gate_vector_b64" in o:
            by_layer[o["layer"]].append((o, vec(o["gate_vector_b64"]), vec(o["up_vector_b64"]),
                                         float(np.linalg.norm(vec(o["down_vector_b64"])))))
    neighbours = {}
    for rec in (json.loads(x) for x in Path(a.set).read_text().splitlines() if x.strip()):
        if rec.get("type") == "fact":
            for n in rec["neighbourhood"]:
                neighbours[n["prompt"]] = (n["answer_id"], rec["relation"])
    v = larql.Vindex(a.vindex, a.threads)
    v.lql(f"APPLY PATCH {json.dumps(str(Path(a.patch).resolve()))}")
    changed = []
    for prompt, (answer, relation) in neighbours.items():
        row = v.lql(f"INFER {json.dumps(prompt)} TOP 1")[-1][0]
        if row["token_id"] != answer:
            changed.append((prompt, answer, relation, row))
    print(f"{len(changed)} of {len(neighbours)} distinct neighbourhood prompts changed their answer "
          f"({', '.join(f'{len(ops)} ops at L{layer}' for layer, ops in sorted(by_layer.items()))})")
    m = larql.Model(a.vindex, a.threads)
    strongest = collections.Counter()
    for prompt, answer, relation, row in changed:
        tr = m.trace(prompt, layers=sorted(by_layer))
        hits = []
        for li, layer in enumerate(sorted(by_layer)):
            x = tr.ffn_in[li]
            for o, g, u, dn in by_layer[layer]:
                act = gelu_tanh(x @ g) * (x @ u)
                for pos in np.nonzero(np.abs(act) > a.min_activation)[0]:
                    hits.append((abs(act[pos]) * dn, layer, int(pos), m.detokenize([tr.ids[pos]]), float(act[pos]), o))
        hits.sort(key=lambda h: -h[0])
        print(f"\n{prompt!r} [{relation}]: {m.detokenize([answer])!r} -> {row['token']!r}")
        strongest[f"L{hits[0][1]}" if hits else "none"] += 1
        for w, layer, pos, tok, act, o in hits[: a.top]:
            print(f"   |act| |down| {w:7.2f}  L{layer} position {pos} {tok!r}: activation {act:.3f}  <- "
                  f"{o['entity']} -[{o['relation']}]-> {o['target']}")
    print(f"\nthe strongest feature's layer, per changed prompt: {dict(strongest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
