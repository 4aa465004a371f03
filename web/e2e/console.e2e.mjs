// End-to-end test of the web console in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core; no browser download) against real `larql serve` processes that
// tests/python/test_console.py starts. One browser, every check in one run (docs/console.md):
//   LARQL_URL      a server without a key (on the default model's vindex: chat and LQL)
//   LARQL_KEY_URL  a server started with --api-key LARQL_KEY
//   SHOTS_DIR      where the screenshots go; RESULTS  the JSON file of check results
// Each check records {name, ok, detail} or {name, skipped, detail}; the pytest asserts them.
import { chromium } from "playwright-core";
import fs from "node:fs";
import path from "node:path";

const URL0 = process.env.LARQL_URL;
const KEY_URL = process.env.LARQL_KEY_URL;
const KEY = process.env.LARQL_KEY ?? "";
const SHOTS = process.env.SHOTS_DIR ?? "build/console-screenshots";
const RESULTS = process.env.RESULTS ?? path.join(SHOTS, "results.json");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
fs.mkdirSync(SHOTS, { recursive: true });

const results = [];
const record = (name, ok, detail) => {
  results.push({ name, ok, detail });
  console.log(`${ok ? "ok  " : "FAIL"} ${name}: ${JSON.stringify(detail)}`);
};
const skip = (name, detail) => {
  results.push({ name, skipped: true, detail });
  console.log(`skip ${name}: ${detail}`);
};
async function check(name, f) {
  try {
    const d = await f();
    record(name, true, d ?? "");
  } catch (e) {
    record(name, false, String(e && e.stack ? e.stack : e));
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function metrics(base) {
  const t = await (await fetch(`${base}/metrics`)).text();
  const out = {};
  for (const line of t.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const [k, v] = line.split(" ");
    out[k] = Number(v);
  }
  return out;
}

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const ctx = await browser.newContext({ viewport: { width: 1200, height: 900 } });
const page = await ctx.newPage();
page.on("pageerror", (e) => console.log("page error:", e.message));
const shot = (name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

try {
  await page.goto(`${URL0}/#chat`);
  await page.waitForSelector("body[data-ready='1']", { timeout: 30000 });

  // 1. Streamed tokens appear one by one: the times at which the count of token spans grows.
  // The engine picker shows what the server measures for the typed spec. Standard keeps f32 K
  // and V for every layer: 18 layers x 2 x 256 (one K/V head of 256) x 4 B = 36,864 B/token on
  // Gemma 3 270M (all 512 rows fit every sliding window).
  await check("engine_memory_measured", async () => {
    const mem = () => page.textContent("#chat-engine-memory");
    await page.waitForFunction(() => /B\/token/.test(document.getElementById("chat-engine-memory").textContent), null, { timeout: 30000 });
    const std = await mem();
    assert(std.startsWith("36,864 B/token"), `standard: ${std}`);
    await page.fill("#chat-engine", "tq3");
    await page.waitForFunction(() => /turbo-quant:bits=3/.test(document.getElementById("chat-engine-memory").textContent), null, { timeout: 30000 });
    const tq = await mem();
    assert(parseInt(tq.replace(/,/g, "")) < 36864, `tq3 not smaller: ${tq}`);
    await page.fill("#chat-engine", "no-such-engine");
    await page.waitForFunction(() => /unknown engine/.test(document.getElementById("chat-engine-memory").textContent), null, { timeout: 30000 });
    await page.fill("#chat-engine", "standard");
    await page.waitForFunction(() => /^36,864 B\/token/.test(document.getElementById("chat-engine-memory").textContent), null, { timeout: 30000 });
    return { standard: std, tq3: tq };
  });

  await check("chat_streams_tokens_one_by_one", async () => {
    await page.fill("#chat-temperature", "0");
    await page.fill("#chat-max-tokens", "24");
    await page.evaluate(() => {
      window.__tokTimes = [];
      const log = document.getElementById("chat-log");
      new MutationObserver(() => {
        const n = log.querySelectorAll(".tok").length;
        const last = window.__tokTimes[window.__tokTimes.length - 1];
        if (!last || last.n !== n) window.__tokTimes.push({ n, t: performance.now() });
      }).observe(log, { childList: true, subtree: true });
    });
    await page.fill("#chat-input", "Write a short poem about the sea.");
    await page.press("#chat-input", "Enter");
    await page.waitForFunction(() => !document.getElementById("chat-stop").disabled, null, { timeout: 30000 });
    await page.waitForFunction(() => document.getElementById("chat-stop").disabled, null, { timeout: 120000 });
    const times = await page.evaluate(() => window.__tokTimes);
    const n = times.length ? times[times.length - 1].n : 0;
    const distinct = new Set(times.map((x) => Math.round(x.t))).size;
    assert(n >= 3, `only ${n} tokens arrived`);
    assert(distinct >= 3, `tokens arrived in ${distinct} batches, not one by one`);
    const spread = times[times.length - 1].t - times[0].t;
    // Hover a token: its probability and the alternatives are shown.
    await page.hover("#chat-log .assistant .tok >> nth=1");
    const tip = await page.textContent("#chat-log .assistant .tok >> nth=1 >> .tip");
    assert(/%/.test(tip ?? ""), `no probability on hover: ${tip}`);
    await shot("chat");
    return { tokens: n, updates: distinct, spread_ms: Math.round(spread), tip: (tip ?? "").split("\n").slice(0, 3) };
  });

  // 2. Stop mid-stream: generation ends and /metrics shows the slot free.
  await check("chat_stop_frees_the_slot", async () => {
    await page.fill("#chat-max-tokens", "400");
    const before = await metrics(URL0);
    await page.fill("#chat-input", "Tell me a long story about a dragon.");
    await page.press("#chat-input", "Enter");
    await page.waitForFunction(() => document.querySelectorAll("#chat-log .assistant:last-child .tok").length >= 3, null, { timeout: 60000 });
    const during = await metrics(URL0);
    await page.click("#chat-stop");
    await page.waitForFunction(() => /stopped/.test(document.getElementById("chat-status").textContent), null, { timeout: 10000 });
    const nStop = await page.locator("#chat-log .assistant:last-child .tok").count();
    let m = await metrics(URL0);
    const t0 = Date.now();
    while ((m.larql_active_sequences ?? 1) !== 0 && Date.now() - t0 < 10000) {
      await sleep(100);
      m = await metrics(URL0);
    }
    const freedMs = Date.now() - t0;
    await sleep(500);
    const nLater = await page.locator("#chat-log .assistant:last-child .tok").count();
    assert(during.larql_active_sequences >= 1, `no active sequence while streaming: ${during.larql_active_sequences}`);
    assert(m.larql_active_sequences === 0, `slot still busy: active_sequences ${m.larql_active_sequences}`);
    assert(m.larql_jobs_cancelled_total > (before.larql_jobs_cancelled_total ?? 0), "the job was not cancelled");
    assert(nLater === nStop && nStop < 400, `tokens kept coming after stop: ${nStop} -> ${nLater}`);
    return { tokens_at_stop: nStop, active_during: during.larql_active_sequences, slot_free_after_ms: freedMs,
             cancelled: m.larql_jobs_cancelled_total - (before.larql_jobs_cancelled_total ?? 0) };
  });

  // Narrow window: the chat page still lays out (a screenshot to look at; no horizontal scroll).
  await check("narrow_window_readable", async () => {
    await page.setViewportSize({ width: 380, height: 800 });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    await shot("chat-narrow");
    await page.setViewportSize({ width: 1200, height: 900 });
    assert(overflow <= 1, `the page is ${overflow}px wider than a 380px window`);
    return { overflow_px: overflow };
  });

  const probe = await fetch(`${URL0}/v1/lql`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ query: "STATS" }) });
  const haveLql = probe.status !== 404;
  const noLql = `POST /v1/lql answers ${probe.status} on this server`;

  // 3. LQL: DESCRIBE "France" gives a table with rows; a syntax error points at line:column.
  if (!haveLql) skip("lql_describe_table", noLql);
  else await check("lql_describe_table", async () => {
    await page.goto(`${URL0}/#lql`);
    await page.click("#lql-editor");
    await page.keyboard.press("Control+A");
    await page.keyboard.type('DESCRIBE "France";');
    await page.keyboard.press("Control+Enter");
    await page.waitForSelector("#lql-results table tbody tr", { timeout: 120000 });
    const rows = await page.locator("#lql-results table tbody tr").count();
    const first = await page.textContent("#lql-results table tbody tr >> nth=0");
    // Sort by gate: the header button toggles aria-sort.
    await page.click("#lql-results th button:text-is('gate')");
    const sorted = await page.getAttribute("#lql-results th:has(button:text-is('gate'))", "aria-sort");
    await page.click("#lql-editor");
    await page.keyboard.press("Control+A");
    await page.keyboard.type('DESCRIBE "France"\n  AT LAYR 3');
    await page.keyboard.press("Escape");
    await page.keyboard.press("Control+Enter");
    await page.waitForSelector("#lql-results .error", { timeout: 60000 });
    const err = await page.textContent("#lql-results .error");
    await page.click("#lql-editor");
    await page.keyboard.press("Control+A");
    await page.keyboard.type('DESCRIBE "France";');
    await page.keyboard.press("Escape");
    await page.keyboard.press("Control+Enter");
    await page.waitForSelector("#lql-results table tbody tr", { timeout: 120000 });
    await shot("lql");
    assert(rows > 0, "no rows");
    assert(sorted === "ascending", `sort state ${sorted}`);
    assert(/line 2, column \d+/.test(err ?? ""), `the error does not point at line:column: ${err}`);
    return { rows, first, error: err };
  });

  // 4. EXPLAIN INFER's heat map is drawn: the canvas has non-background pixels.
  if (!haveLql) skip("explain_infer_heatmap_drawn", noLql);
  else await check("explain_infer_heatmap_drawn", async () => {
    await page.goto(`${URL0}/#pictures`);
    await page.click("#pic-explain");
    await page.waitForFunction(() => document.getElementById("pic-chart").dataset.kind === "heatmap", null, { timeout: 120000 });
    await sleep(800);  // the chart's entry animation
    const painted = await page.evaluate(() => {
      const c = document.querySelector("#pic-chart canvas");
      const g = c.getContext("2d");
      const d = g.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) n++;
      return { coloured: n, total: d.length / 4, points: Number(document.getElementById("pic-chart").dataset.points) };
    });
    await shot("pictures-heatmap");
    assert(painted.points > 0, "no rows in EXPLAIN INFER");
    assert(painted.coloured > 0.02 * painted.total, `the heat map is (nearly) empty: ${JSON.stringify(painted)}`);
    for (const [id, name] of [["#pic-walk", "walk"], ["#pic-trace", "trace"], ["#pic-describe", "describe"], ["#pic-lens", "lens"]]) {
      await page.click(id);
      await page.waitForFunction((k) => document.getElementById("pic-chart").dataset.kind === k, name, { timeout: 120000 });
      await sleep(800);
      await shot(`pictures-${name}`);
    }
    return painted;
  });

  // 5. INSERT a fact and see INFER change (before / after side by side).
  if (!haveLql) skip("insert_changes_infer", noLql);
  else await check("insert_changes_infer", async () => {
    await page.goto(`${URL0}/#edit`);
    await page.fill("#edit-patch", `console-e2e-${Date.now()}.vlp`);
    await page.click("#edit-insert");
    await page.waitForSelector("#edit-after table tbody tr", { timeout: 180000 });
    const before = await page.textContent("#edit-before table tbody tr >> nth=0 >> td >> nth=1");
    const after = await page.textContent("#edit-after table tbody tr >> nth=0 >> td >> nth=1");
    const changed = await page.locator("#edit-after tr.changed").count();
    await shot("edit");
    assert(before !== after, `INFER's top token did not change: ${before}`);
    assert(changed > 0, "no row marked changed");
    return { before, after, changed_rows: changed };
  });

  // 6. With --api-key: every API call without the key is 401; the console asks for it, then works.
  if (!KEY_URL) skip("api_key_prompt", "LARQL_KEY_URL not given");
  else await check("api_key_prompt", async () => {
    const noKey = await Promise.all(["/v1/models", "/metrics", "/v1/lql", "/v1/chat/completions"].map(async (p) =>
      (await fetch(`${KEY_URL}${p}`, { method: p.includes("models") || p.includes("metrics") ? "GET" : "POST", body: p.includes("models") || p.includes("metrics") ? undefined : "{}" })).status));
    const pageStatus = (await fetch(`${KEY_URL}/`)).status;
    const p2 = await ctx.newPage();
    await p2.goto(`${KEY_URL}/#chat`);
    await p2.waitForSelector("#key-dialog[open]", { timeout: 20000 });
    await p2.screenshot({ path: path.join(SHOTS, "api-key.png") });
    await p2.fill("#key-input", "wrong-key");
    await p2.press("#key-input", "Enter");
    await p2.waitForFunction(() => /refused/.test(document.getElementById("key-error").textContent), null, { timeout: 20000 });
    await p2.fill("#key-input", KEY);
    await p2.press("#key-input", "Enter");
    await p2.waitForSelector("body[data-ready='1']", { timeout: 20000 });
    const model = await p2.textContent("#model-name");
    await p2.fill("#chat-max-tokens", "4");
    await p2.fill("#chat-input", "Hi");
    await p2.press("#chat-input", "Enter");
    await p2.waitForFunction(() => /tokens/.test(document.getElementById("chat-status").textContent), null, { timeout: 60000 });
    const status = await p2.textContent("#chat-status");
    const stored = await p2.evaluate(() => sessionStorage.getItem("larql-api-key"));
    await p2.close();
    assert(noKey.every((s) => s === 401), `calls without the key: ${noKey}`);
    assert(pageStatus === 200, `the page itself: ${pageStatus}`);
    assert(model, "no model name after the key");
    assert(stored === KEY, "the key is not in sessionStorage");
    return { without_key: noKey, page: pageStatus, model, chat: status };
  });
} finally {
  await browser.close();
  fs.writeFileSync(RESULTS, JSON.stringify(results, null, 1));
}
process.exit(results.every((r) => r.ok || r.skipped) ? 0 : 1);
