// Calls to larql serve: the API key (asked for on a 401, kept in sessionStorage, sent as
// Bearer), POST /v1/lql (docs/server.md) and the streamed chat completions.

const KEY_ITEM = "larql-api-key";

/** One statement's result, as `larql lql --json` prints it (docs/lql.md "JSON output"). */
export interface LqlDoc {
  statement: string;
  title: string;
  columns: { name: string; type: "int" | "float" | "text" | "list" }[];
  rows: unknown[][];
  notes: string[];
  elapsed_ms: number;
}

/** A refused call: OpenAI's error envelope, with line/column on LQL syntax errors. */
export class ApiError extends Error {
  status: number;
  line?: number;
  column?: number;
  constructor(status: number, message: string, line?: number, column?: number) {
    super(message);
    this.status = status;
    this.line = line;
    this.column = column;
  }
}

let keyWaiters: ((k: string) => void)[] = [];

export function apiKey(): string {
  return sessionStorage.getItem(KEY_ITEM) ?? "";
}

/** Show the key dialog and resolve once the user gave a key. */
export function askForKey(message = ""): Promise<string> {
  const dlg = document.getElementById("key-dialog") as HTMLDialogElement;
  const err = document.getElementById("key-error") as HTMLElement;
  err.textContent = message;
  if (!dlg.open) dlg.showModal();
  (document.getElementById("key-input") as HTMLInputElement).focus();
  return new Promise((resolve) => keyWaiters.push(resolve));
}

export function installKeyDialog(): void {
  const form = document.getElementById("key-form") as HTMLFormElement;
  form.addEventListener("submit", () => {
    const input = document.getElementById("key-input") as HTMLInputElement;
    sessionStorage.setItem(KEY_ITEM, input.value.trim());
    input.value = "";
    const w = keyWaiters;
    keyWaiters = [];
    w.forEach((f) => f(apiKey()));
  });
}

/** fetch with the key; a 401 asks for the key and retries. */
export async function call(path: string, init: RequestInit = {}): Promise<Response> {
  for (;;) {
    const headers = new Headers(init.headers);
    const key = apiKey();
    if (key) headers.set("Authorization", `Bearer ${key}`);
    const res = await fetch(path, { ...init, headers });
    if (res.status !== 401) return res;
    await askForKey(key ? "That key was refused." : "");
  }
}

async function errorOf(res: Response): Promise<ApiError> {
  const msg = `${res.status} ${res.statusText}`;
  try {
    const j = await res.json();
    const e = j.error ?? {};
    const text = typeof e === "string" ? e : e.message ?? msg;
    return new ApiError(res.status, text, e.line ?? undefined, e.column ?? undefined);
  } catch {
    return new ApiError(res.status, msg);
  }
}

export async function getJson<T>(path: string): Promise<T> {
  const res = await call(path);
  if (!res.ok) throw await errorOf(res);
  return (await res.json()) as T;
}

/** A session id per use (LQL page, Edit page): patches and edits live in the server's session. */
export function newSessionId(prefix: string): string {
  const r = Math.random().toString(36).slice(2, 10);
  return `${prefix}-${Date.now().toString(36)}-${r}`;
}

/** Run LQL statements; one document per statement. */
export async function lql(query: string, session?: string, signal?: AbortSignal): Promise<LqlDoc[]> {
  const headers: Record<string, string> = { "Content-Type": "application/json" };
  if (session) headers["X-Session-Id"] = session;
  const res = await call("/v1/lql", { method: "POST", headers, body: JSON.stringify({ query }), signal });
  if (!res.ok) throw await errorOf(res);
  const j = (await res.json()) as { results: LqlDoc[] };
  return j.results;
}

/** One streamed token with its log-probability and the alternatives (OpenAI's chat logprobs). */
export interface StreamToken {
  text: string;
  logprob?: number;
  top: { token: string; logprob: number }[];
}

export interface ChatRequest {
  messages: { role: string; content: string }[];
  temperature: number;
  top_p: number;
  top_k: number;
  max_tokens: number;
  seed?: number;
  engine?: string;
}

/**
 * POST /v1/chat/completions with stream: true; calls onToken per content delta. Aborting
 * `signal` closes the connection, which frees the server's slot within one decode step.
 * Returns the finish reason ("stop", "length", ... or "aborted").
 */
export async function streamChat(req: ChatRequest, onToken: (t: StreamToken) => void, signal: AbortSignal): Promise<string> {
  const body = { ...req, stream: true, logprobs: true, top_logprobs: 5 };
  const res = await call("/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok || !res.body) throw await errorOf(res);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  let finish = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const line of ev.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return finish;
          const j = JSON.parse(data);
          if (j.error) throw new ApiError(500, j.error.message ?? "stream error");
          const ch = j.choices?.[0];
          if (!ch) continue;
          if (ch.finish_reason) finish = ch.finish_reason;
          const content: string | undefined = ch.delta?.content;
          if (content) {
            const lp = ch.logprobs?.content?.[0];
            onToken({
              text: content,
              logprob: lp?.logprob,
              top: (lp?.top_logprobs ?? []).map((a: { token: string; logprob: number }) => ({ token: a.token, logprob: a.logprob })),
            });
          }
        }
      }
    }
  } catch (e) {
    if (signal.aborted) return "aborted";
    throw e;
  }
  return finish;
}
