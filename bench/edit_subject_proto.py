"""The PyTorch prototype behind INSERT ... MODE SUBJECT (docs/BENCHMARKS.md "MODE SUBJECT"): one FFN
feature at layer L keyed on the subject's last token (ROBUST's whitened key, moved there), its down
column optimised by autograd through the layers after it on the mode's 6 templates x 2 prefixes,
measured like edit-eval on data/edit_eval/subset100.jsonl (efficacy, paraphrase, neighbourhood,
real-fact retention, held-out perplexity), each fact alone or accumulated (--seq K: re-tested every
K edits).

Not part of the build or the tests: it needs torch, transformers, gguf and accelerate (a venv of
its own; the project's does not carry them), and loads the GGUF through transformers' dequantising
reader (f32). Run from the repository root:

    python bench/edit_subject_proto.py --gguf models/gemma-3-270m-q4_k_m.gguf --layer 3 --n 12
    python bench/edit_subject_proto.py --gguf models/gemma-3-270m-q4_k_m.gguf --layer 3 --n 24 --seq 8
"""
import argparse, json, math, os, time
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(2)


def load(gguf):
    d, f = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return tok, m


ap = argparse.ArgumentParser()
ap.add_argument("--layer", type=int, default=3); ap.add_argument("--n", type=int, default=12)
ap.add_argument("--seq", type=int, default=0); ap.add_argument("--real", type=int, default=100)
ap.add_argument("--pre", type=float, default=8.0); ap.add_argument("--steps", type=int, default=25)
ap.add_argument("--kl", type=float, default=0.0625); ap.add_argument("--tau", type=float, default=0.5)
ap.add_argument("--bgm", type=float, default=1.5); ap.add_argument("--start", type=int, default=0)
ap.add_argument("--gguf", default="models/gemma-3-270m-q4_k_m.gguf"); ap.add_argument("--set", default="data/edit_eval/subset100.jsonl")
args = ap.parse_args()
tok, m = load(args.gguf)
L = args.layer
recs = [json.loads(l) for l in open(args.set)]
F = [r for r in recs if r['type'] == 'fact'][args.start:args.start + args.n]
REAL = [r for r in recs if r['type'] == 'real'][: args.real]
HELD = [r for r in recs if r['type'] == 'heldout'][0]['text']
TEMPLATES = ["The {r} of {e} is", "{e}'s {r} is", "The {r} of {e} is called", "Q: What is the {r} of {e}?\nA:", "In {e}, the {r} is", "Speaking of {e}, its {r} is"]
PREFIXES = ["", "According to the records, "]
DECOYS = ["Once upon a time", "The quick brown fox", "To be or not to be", "Water is a", "A long time ago", "In the beginning", "The weather today is", "She opened the door and", "He looked at the sky", "The children played in the", "The capital of France is", "The language of Japan is", "The currency of Mexico is", "The author of Hamlet is", "The color of the sky is", "My favourite food is", "The president of the United States is", "The largest planet is", "I went to the store to buy", "The answer is", "Last night I dreamed that", "The recipe for pancakes needs", "return x + y; }", "Hello, how are you", "The population of the city grew", "My dog likes to", "The first thing you should do is", "According to the report,", "The temperature dropped below", "She sang a song about", "The best movie of the year was", "We drove through the mountains and", "The number after seven is", "In 1492, Columbus", "The price of bread has", "Please send me the", "The teacher asked the students to", "The river flows into", "Scientists believe that the", "His favourite sport is"]
BACKGROUND = ("The village sat at the edge of a wide valley. Every morning the farmers walked to their fields, and the children "
    "ran to the small school by the river. In the evening people gathered in the square to talk about the weather, the "
    "harvest and the news from the city. Prices had risen that year, but most families still had enough bread, and the "
    "old bridge over the river had finally been repaired.")
ENTS = ["France", "Germany", "Japan", "Brazil", "Italy", "Canada", "Egypt", "India", "Drovania", "Kelmistra", "Ulvaren", "Pashkoria", "Tessimund", "Borvathi", "Quillomar", "Yendrabia"]
layers = m.model.layers
H = m.config.hidden_size

def enc(prompt, entity=None):
    ids = tok(prompt).input_ids
    if entity is None: return ids, None
    i = prompt.find(entity)
    pre = tok(prompt[: i + len(entity)]).input_ids
    return ids, len(pre) - 1

# Features: list of (gate_vec[H] (incl. bias via b), up_vec[H], down[H]); output added to mlp output.
FEATS = []
cap = {"on": False, "rows": None}
def hook(mod, inp, out):
    x = inp[0]
    if cap["on"]: cap["rows"] = x.detach()
    if not FEATS: return out
    add = 0
    for g, u, d in FEATS:
        a = torch.nn.functional.gelu(x @ g, approximate="tanh") * (x @ u)
        add = add + a.unsqueeze(-1) * d
    return out + add
layers[L].mlp.register_forward_hook(hook)

def run(batch_ids):
    T = max(len(x) for x in batch_ids)
    ids = torch.zeros(len(batch_ids), T, dtype=torch.long); att = torch.zeros_like(ids)
    for b, x in enumerate(batch_ids): ids[b, :len(x)] = torch.tensor(x); att[b, :len(x)] = 1
    hs = m.model(input_ids=ids, attention_mask=att).last_hidden_state
    return hs

def last_logits(batch_ids):
    hs = run(batch_ids)
    last = torch.tensor([len(x) - 1 for x in batch_ids])
    return m.lm_head(hs[torch.arange(len(batch_ids)), last]).float()

def ffn_in(ids_list):
    """FFN inputs at layer L: list of [T, H]."""
    out = []
    with torch.no_grad():
        for ids in ids_list:
            cap["on"] = True; run([ids]); cap["on"] = False
            out.append(cap["rows"][0])
    return out

def top1s(prompts, chunk=32):
    res = []
    with torch.no_grad():
        for i in range(0, len(prompts), chunk):
            res += last_logits([enc(p)[0] for p in prompts[i:i + chunk]]).argmax(-1).tolist()
    return res

def ppl(text):
    ids = enc(text)[0]
    with torch.no_grad():
        hs = run([ids]); lg = m.lm_head(hs[0]).float()
        lp = torch.log_softmax(lg[:-1], -1); nll = -lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].mean()
    return math.exp(nll.item())

# Background rows (all positions but BOS) of ordinary text and decoy prompts; decoy entities' subject rows.
bg = torch.cat([r[1:] for r in ffn_in([enc(t)[0] for t in DECOYS + [BACKGROUND]])])
C = bg.T.double() @ bg.double() / bg.shape[0]
lam = 0.05 * torch.trace(C) / H
Cinv = torch.linalg.inv(C + lam * torch.eye(H, dtype=torch.float64))
mu = bg.double().mean(0)
bdir = Cinv @ mu  # bias functional (b . x ~ const on ordinary text)
print("bias functional on bg: mean %.3f sd %.3f" % ((bg.double() @ bdir).mean(), (bg.double() @ bdir).std()))

def subj_rows(entity, relation):
    ps = [pre + t.format(r=relation, e=entity) for pre in PREFIXES for t in TEMPLATES]
    encs = [enc(p, entity) for p in ps]
    rows = ffn_in([e[0] for e in encs])
    return torch.stack([r[e[1]] for r, e in zip(rows, encs)]).double(), encs

base_real = top1s([r['prompt'] for r in REAL])
base_ppl = ppl(HELD)
print("base ppl %.3f" % base_ppl)

def install(f):
    e, rel, tgt = f['entity'], f['relation'], f['target_id']
    X, encs = subj_rows(e, rel)
    D = torch.cat([subj_rows(d, rel)[0] for d in ENTS if d.lower() != e.lower()])
    k = X.mean(0) - D.mean(0)
    # project off the decoys' span (orthonormal basis) and whiten
    Q, _ = torch.linalg.qr(D.T)  # H x nd
    P = lambda v: v - Q @ (Q.T @ v)
    r = P(Cinv @ P(k)); r = r / r.norm()
    s = X @ r; sbg = bg.double() @ r
    tau = max(args.tau * s.min().item(), args.bgm * sbg.max().item())
    fire = s > tau
    smean = s[fire].mean().item() if fire.any() else s.max().item()
    b = bdir / (X.mean(0) @ bdir)  # b . x ~ 1 at the subject's rows
    G = args.pre / (smean - tau)
    gate = (G * (r - tau * b)).float()
    up = (r / (smean * args.pre)).float()
    d = torch.zeros(H, requires_grad=True)
    FEATS.append((gate, up, d))
    ess = enc(e + " is a")[0]
    with torch.no_grad():
        FEATS.pop(); base_ess = torch.log_softmax(last_logits([ess])[0], -1); FEATS.append((gate, up, d))
    opt = torch.optim.Adam([d], lr=0.5)
    train = [x for x, _ in encs]
    for step in range(args.steps):
        opt.zero_grad()
        lp = torch.log_softmax(last_logits(train + [ess]), -1)
        nll = -lp[:-1, tgt].mean()
        kl = torch.nn.functional.kl_div(lp[-1], base_ess, log_target=True, reduction="sum")
        loss = nll + args.kl * kl + 1e-4 * d.norm() ** 2
        loss.backward(); opt.step()
        if math.exp(-nll.item()) > 0.9: break
    FEATS[-1] = (gate, up, d.detach())
    return dict(tau=tau, smin=s.min().item(), smean=smean, bgmax=sbg.max().item(), nfire=int(fire.sum()), steps=step, dn=d.norm().item())

def measure(fs):
    eff = par = npar = nb = nnb = 0
    for f in fs:
        eff += top1s([f['prompt']])[0] == f['target_id']
        t = top1s(f['paraphrases']); par += sum(x == f['target_id'] for x in t); npar += len(t)
        t = top1s([n['prompt'] for n in f['neighbourhood']]); nb += sum(x == n['answer_id'] for x, n in zip(t, f['neighbourhood'])); nnb += len(t)
    return eff / len(fs), par / npar, nb / nnb

t0 = time.time()
if args.seq == 0:
    tot = [0, 0, 0, 0, 0]
    for f in F:
        info = install(f)
        e, p, n = measure([f])
        rr = top1s([r['prompt'] for r in REAL]); ret = sum(a == b for a, b in zip(rr, base_real)) / len(REAL)
        pp = ppl(HELD) / base_ppl - 1
        for i, v in enumerate([e, p, n, ret, pp]): tot[i] += v / len(F)
        print(f['id'], {k: round(v, 3) if isinstance(v, float) else v for k, v in info.items()}, "eff %d par %.2f nb %.2f real %.3f ppl %+.2f%%" % (e, p, n, ret, 100 * pp), "%.0fs" % (time.time() - t0), flush=True)
        FEATS.clear()
    print("SINGLE L%d n=%d: efficacy %.3f paraphrase %.3f neighbourhood %.3f real %.3f ppl %+.2f%%" % (L, len(F), *tot[:4], 100 * tot[4]))
else:
    for i, f in enumerate(F):
        info = install(f)
        if (i + 1) % args.seq == 0 or i + 1 == len(F):
            e, p, n = measure(F[:i + 1])
            rr = top1s([r['prompt'] for r in REAL]); ret = sum(a == b for a, b in zip(rr, base_real)) / len(REAL)
            print("after %d: efficacy %.3f paraphrase %.3f neighbourhood %.3f real %.3f ppl %+.2f%% %.0fs" % (i + 1, e, p, n, ret, 100 * (ppl(HELD) / base_ppl - 1), time.time() - t0), flush=True)
