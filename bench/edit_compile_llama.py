"""Knowledge edits compiled into a GGUF and run by llama.cpp (issue 31: "the compiled GGUF in llama.cpp
answers >= 90% of them"; docs/BENCHMARKS.md "MODE SUBJECT").

The first N facts of an edit-eval set (data/edit_eval/*.jsonl) are INSERTed into one patch on the
vindex by `larql lql`, the session is compiled with `COMPILE CURRENT INTO MODEL`, and llama.cpp
(llama-cpp-python, the project's peer) loads that GGUF and answers each fact's canonical prompt and
paraphrases (top-1 = the target) and its neighbourhood prompts (top-1 = the set's answer, which the
base model gives). The same prompts are scored by larql on the session (INFER in the same script)
for the side-by-side. Run from the repository root with the project's venv:

    .venv/bin/python bench/edit_compile_llama.py build/edit-eval.vindex --set data/edit_eval/subset100.jsonl \\
        --facts 100 --mode subject --json-out build/edit-compile-llama.json

With --patch F.vlp (e.g. what `larql edit-eval --patch-out` wrote for the same set) the patch is
applied instead of INSERTing the facts again: a fact none of its insert operations names is listed
in "refused" (printed as not in the patch) and scored as the model stands.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))
import peer  # noqa: E402


def lql_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vindex")
    ap.add_argument("--set", required=True)
    ap.add_argument("--facts", type=int, default=100)
    ap.add_argument("--mode", default="subject")
    ap.add_argument("--larql", default=str(peer.larql_bin()))
    ap.add_argument("-t", "--threads", type=int, default=peer.THREADS)
    ap.add_argument("--json-out")
    ap.add_argument("--patch", help="apply this patch instead of INSERTing the facts (edit-eval --patch-out)")
    a = ap.parse_args()

    recs = [json.loads(x) for x in Path(a.set).read_text().splitlines() if x.strip()]
    facts = [r for r in recs if r["type"] == "fact"][: a.facts]
    tmp = Path(tempfile.mkdtemp(prefix="edit-compile-"))
    gguf = tmp / "edited.gguf"
    probes = []  # (fact index, kind, prompt, wanted id)
    for i, f in enumerate(facts):
        probes.append((i, "canonical", f["prompt"], f["target_id"]))
        probes += [(i, "paraphrase", p, f["target_id"]) for p in f["paraphrases"]]
        probes += [(i, "neighbourhood", n["prompt"], n["answer_id"]) for n in f["neighbourhood"]]
    if a.patch:
        lines = [f"APPLY PATCH {lql_str(str(Path(a.patch).resolve()))}"]
        ops = json.loads(Path(a.patch).read_text())["operations"]
        named = {(o.get("entity"), o.get("relation")) for o in ops if o.get("op") == "insert"}
        n_ins = 0
    else:
        lines = [f"BEGIN PATCH {lql_str(str(tmp / 'p.vlp'))}"]
        lines += [f"INSERT INTO EDGES (entity, relation, target) VALUES ({lql_str(f['entity'])}, {lql_str(f['relation'])}, "
                  f"{lql_str(f['target'])}) MODE {a.mode.upper()}" for f in facts]
        n_ins = len(facts)
    lines += [f"INFER {lql_str(p)} TOP 1" for _, _, p, _ in probes]
    lines += [f"COMPILE CURRENT INTO MODEL {lql_str(str(gguf))}"]
    script = tmp / "s.lql"
    script.write_text(";\n".join(lines) + ";\n")
    t0 = time.time()
    # --keep-going: an INSERT the mode refuses (nothing installed) is an error document in its
    # place and the script goes on; its fact's prompts are scored as they are (the base model's
    # answer is not the target: not learned, as in edit-eval).
    r = subprocess.run([a.larql, "lql", a.vindex, "--json", "--keep-going", "-t", str(a.threads), "-f", str(script)],
                       capture_output=True, text=True)
    docs = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    inserts = docs[1: 1 + n_ins]
    refusal = ("invalid_argument", "unsupported")  # what edit-eval counts as refused; anything else is a failure
    if (r.returncode not in (0, 1) or len(docs) != len(lines) or any("error" in d for d in [docs[0]] + docs[1 + n_ins:])
            or any("error" in d and d.get("kind") not in refusal for d in inserts)):
        print(r.stderr[-3000:], file=sys.stderr)
        return 1
    if a.patch:
        refused = [f["id"] for f in facts if (f["entity"], f["relation"]) not in named]
    else:
        refused = [f["id"] for f, d in zip(facts, inserts) if "error" in d]
    infer = docs[1 + n_ins: 1 + n_ins + len(probes)]
    larql_top1 = [int(dict(zip([c["name"] for c in d["columns"]], d["rows"][0]))["token_id"]) for d in infer]
    secs_larql = time.time() - t0

    llm = peer.load_llama(n_ctx=128, logits_all=False, model=gguf, threads=a.threads)
    llama_top1 = []
    for _, _, p, _ in probes:
        llm.reset()
        llm.eval(peer.llama_tokenize(llm, p))
        llama_top1.append(int(np.argmax(peer._last_logits(llm))))
    del llm

    def rate(kind, top):
        hits = [t == w for (_, k, _, w), t in zip(probes, top) if k == kind]
        return sum(hits) / len(hits) if hits else float("nan")

    out = {"set": a.set, "facts": len(facts), "mode": a.mode, "patch": a.patch, "refused": refused, "gguf_bytes": gguf.stat().st_size,
           "larql_seconds": round(secs_larql, 1)}
    for who, top in (("llama_cpp", llama_top1), ("larql", larql_top1)):
        out[who] = {k: round(rate(k, top), 4) for k in ("canonical", "paraphrase", "neighbourhood")}
    agree = [x == y for x, y in zip(llama_top1, larql_top1)]
    out["top1_agreement"] = round(sum(agree) / len(agree), 4)
    why = "not in the patch" if a.patch else "refused by INSERT: nothing installed"
    print(f"{len(facts)} facts MODE {a.mode.upper()} in one patch{' (' + a.patch + ')' if a.patch else ''} ({len(refused)} "
          f"{why}, their "
          f"prompts scored as they are), "
          f"compiled to GGUF ({out['gguf_bytes'] / 2**20:.1f} MiB):")
    for who in ("llama_cpp", "larql"):
        m = out[who]
        print(f"  {who:10s} canonical {m['canonical']:.1%}  paraphrase {m['paraphrase']:.1%}  neighbourhood {m['neighbourhood']:.1%}")
    print(f"  top-1 agreement llama.cpp vs larql over {len(agree)} prompts: {out['top1_agreement']:.1%}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
