// Chat: streamed tokens (each with its probability and alternatives on hover or focus), stop
// (aborts the fetch: the server frees the slot within one decode step), sampling settings,
// the KV engine (any spec string) with its memory per token, multi-turn history.
import { streamChat, type StreamToken } from "./api";
import { el, errorBox } from "./table";

/**
 * K/V state per token of context for Gemma 3 270M (18 layers, one 256-wide K/V head), from
 * docs/BENCHMARKS.md and docs/engines.md: f32 K+V = 18 × 2 × 256 × 4 B; turbo-quant's packed
 * codes (4,752 / 3,600 B); markov-rs keeps the residual (640 f32 per layer) besides the K/V it derives.
 */
export const ENGINE_MEMORY: Record<string, string> = {
  standard: "36,864 B/token (f32 K/V; sliding layers hold 512 rows)",
  "turbo-quant:bits=4": "4,752 B/token (+ 576 KiB exact window)",
  "turbo-quant:bits=3": "3,600 B/token (+ 576 KiB exact window)",
  "markov-rs": "46,080 B/token residual + derived K/V",
  "markov-rs-codec": "bf16 cold residual: 23,040 B/token beyond the window",
  "unlimited-context": "bounded: the sliding spans + two windows",
  "no-cache": "4 B/token (token ids; re-runs the forward)",
};

function memoryOf(spec: string): string {
  const s = spec.trim() || "standard";
  if (ENGINE_MEMORY[s]) return ENGINE_MEMORY[s];
  const base = s.split(":")[0];
  if (base === "tq4" || (base === "turbo-quant" && !s.includes("bits=3"))) return ENGINE_MEMORY["turbo-quant:bits=4"];
  if (base === "tq3" || base === "turbo-quant") return ENGINE_MEMORY["turbo-quant:bits=3"];
  return ENGINE_MEMORY[base] ?? "see docs/engines.md";
}

function tokenSpan(t: StreamToken): HTMLElement {
  const span = el("span", { class: "tok", tabindex: "0" }, t.text);
  if (t.logprob !== undefined) {
    const p = Math.exp(t.logprob);
    span.style.setProperty("--p", p.toFixed(3));
    const alts = t.top.map((a) => `${JSON.stringify(a.token)} ${(Math.exp(a.logprob) * 100).toFixed(1)}%`).join("\n");
    span.dataset.prob = (p * 100).toFixed(1);
    const tip = el("span", { class: "tip", role: "tooltip" }, `${(p * 100).toFixed(1)}%\n${alts}`);
    span.append(tip);
    span.setAttribute("aria-label", `${t.text} ${(p * 100).toFixed(1)} percent`);
  }
  return span;
}

export function chatPage(): HTMLElement {
  const page = el("div", { class: "page chat" });
  const log = el("div", { class: "chat-log", "aria-live": "polite", id: "chat-log" });
  const input = el("textarea", { id: "chat-input", rows: "2", placeholder: "Message (Enter sends, Shift+Enter: new line)", "aria-label": "Message" });
  const send = el("button", { type: "submit", id: "chat-send" }, "Send");
  const stop = el("button", { type: "button", id: "chat-stop", disabled: "" }, "Stop");
  const clear = el("button", { type: "button", id: "chat-clear" }, "New chat");
  const status = el("span", { class: "muted", id: "chat-status" });

  const num = (id: string, label: string, value: string, step: string) => {
    const i = el("input", { id, type: "number", value, step });
    return { input: i, label: el("label", {}, label, i) };
  };
  const temp = num("chat-temperature", "temperature", "0.7", "0.1");
  const topP = num("chat-top-p", "top_p", "0.95", "0.05");
  const topK = num("chat-top-k", "top_k", "40", "1");
  const maxT = num("chat-max-tokens", "max_tokens", "128", "1");
  const seed = num("chat-seed", "seed (empty: random)", "", "1");
  const engine = el("input", { id: "chat-engine", list: "engine-list", value: "standard", "aria-label": "engine spec" });
  const list = el("datalist", { id: "engine-list" });
  for (const k of Object.keys(ENGINE_MEMORY)) list.append(el("option", { value: k }));
  const mem = el("span", { class: "muted", id: "chat-engine-memory" }, memoryOf("standard"));
  engine.addEventListener("input", () => (mem.textContent = memoryOf(engine.value)));
  const settings = el(
    "details",
    { class: "settings", open: "" },
    el("summary", {}, "Sampling and engine"),
    el("div", { class: "row wrap" }, temp.label, topP.label, topK.label, maxT.label, seed.label),
    el("div", { class: "row wrap" }, el("label", {}, "engine ", engine), list, mem),
  );

  const history: { role: string; content: string }[] = [];
  let ctrl: AbortController | null = null;

  const turn = (role: string, text = "") => {
    const body = el("div", { class: "body" }, text);
    const t = el("div", { class: `turn ${role}` }, el("div", { class: "role" }, role), body);
    log.append(t);
    return body;
  };

  const run = async () => {
    const text = input.value.trim();
    if (!text || ctrl) return;
    input.value = "";
    history.push({ role: "user", content: text });
    turn("user", text);
    const out = turn("assistant");
    out.classList.add("streaming");
    ctrl = new AbortController();
    send.disabled = true;
    stop.disabled = false;
    status.textContent = "generating…";
    let reply = "";
    let n = 0;
    try {
      const finish = await streamChat(
        {
          messages: history,
          temperature: Number(temp.input.value),
          top_p: Number(topP.input.value),
          top_k: Number(topK.input.value),
          max_tokens: Number(maxT.input.value),
          seed: seed.input.value === "" ? undefined : Number(seed.input.value),
          engine: engine.value.trim() || undefined,
        },
        (t) => {
          reply += t.text;
          n++;
          out.append(tokenSpan(t));
          log.scrollTop = log.scrollHeight;
        },
        ctrl.signal,
      );
      status.textContent = `${n} tokens · ${finish === "aborted" ? "stopped" : finish}`;
      history.push({ role: "assistant", content: reply });
    } catch (e) {
      out.append(errorBox(e));
      history.pop();
      status.textContent = "";
    } finally {
      out.classList.remove("streaming");
      ctrl = null;
      send.disabled = false;
      stop.disabled = true;
      input.focus();
    }
  };

  const form = el("form", { class: "chat-form" }, input, el("div", { class: "row" }, send, stop, clear, status));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void run();
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      void run();
    }
  });
  stop.addEventListener("click", () => ctrl?.abort());
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && ctrl) ctrl.abort();
  });
  clear.addEventListener("click", () => {
    ctrl?.abort();
    history.length = 0;
    log.replaceChildren();
  });
  page.append(settings, log, form);
  return page;
}
