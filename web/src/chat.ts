// Chat: streamed tokens (each with its probability and alternatives on hover or focus), stop
// (aborts the fetch: the server frees the slot within one decode step), sampling settings,
// the KV engine (any spec string) with its memory per token, multi-turn history.
import { getJson, streamChat, type StreamToken } from "./api";
import { el, errorBox } from "./table";

interface EngineEntry {
  id: string;
  aliases: string[];
  examples: string[];
}
interface Footprint {
  id: string;
  tokens: number;
  hot_bytes: number;
  cold_bytes: number;
  bytes_per_token: number;
}

/** Context length the picker measures an engine at (GET /v1/engines?spec=S&tokens=N). */
const MEASURE_TOKENS = 512;

/**
 * What engine `spec` keeps per token on the server's model, measured there by running it over
 * MEASURE_TOKENS tokens (docs/server.md "Engines"); a bad spec gives the server's message.
 */
async function memoryOf(spec: string): Promise<string> {
  const s = spec.trim() || "standard";
  try {
    const f = await getJson<Footprint>(`/v1/engines?spec=${encodeURIComponent(s)}&tokens=${MEASURE_TOKENS}`);
    const kib = (f.hot_bytes + f.cold_bytes) / 1024;
    return `${Math.round(f.bytes_per_token).toLocaleString()} B/token (${f.id}: ${kib.toLocaleString(undefined, { maximumFractionDigits: 0 })} KiB at ${f.tokens} tokens)`;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
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
  void getJson<{ data: EngineEntry[] }>("/v1/engines")
    .then((r) => {
      for (const e of r.data) for (const v of [e.id, ...e.examples]) list.append(el("option", { value: v }));
    })
    .catch(() => undefined);
  const mem = el("span", { class: "muted", id: "chat-engine-memory", "aria-live": "polite" }, "…");
  let asked = 0;
  const refresh = () => {
    const mine = ++asked;
    void memoryOf(engine.value).then((text) => {
      if (mine === asked) mem.textContent = text;  // only the latest spec's answer
    });
  };
  let timer: ReturnType<typeof setTimeout> | undefined;
  engine.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 300);
  });
  refresh();
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
