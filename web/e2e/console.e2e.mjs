// End-to-end test of the web console in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core; no browser download) against real `larql serve` processes that
// tests/python/test_console.py starts. One browser, every check in one run (docs/console.md):
//   LARQL_URL      a server without a key (on the default model's vindex: chat and LQL)
//   LARQL_KEY_URL  a server started with --api-key LARQL_KEY
//   LARQL_ALLOW_FILES=1  LARQL_URL's server has --lql-allow-files (the Edit page saves a patch)
//   SHOTS_DIR      where the screenshots go; RESULTS  the JSON file of check results
// Each check records {name, ok, detail} or {name, skipped, detail}; the pytest asserts them.
import { chromium } from "playwright-core";
import fs from "node:fs";
import path from "node:path";

const URL0 = process.env.LARQL_URL;
const KEY_URL = process.env.LARQL_KEY_URL;
const KEY = process.env.LARQL_KEY ?? "";
const ALLOW_FILES = process.env.LARQL_ALLOW_FILES === "1";  // LARQL_URL's server runs with --lql-allow-files
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
// f returns the check's detail; a detail {skipped: why} records the check as skipped.
async function check(name, f) {
  try {
    const d = await f();
    if (d && d.skipped) skip(name, d.skipped);
    else record(name, true, d ?? "");
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

// Type `text` into the LQL editor (replacing what it holds), run it, and return the error shown.
async function lqlError(text) {
  await page.click("#lql-editor");
  await page.keyboard.press("Control+A");
  await page.keyboard.press("Delete");
  await page.keyboard.type(text);
  await page.keyboard.press("Escape");
  await page.evaluate(() => document.querySelectorAll("#lql-results .error").forEach((e) => e.remove()));
  await page.keyboard.press("Control+Enter");
  await page.waitForSelector("#lql-results .error", { timeout: 60000 });
  return page.textContent("#lql-results .error");
}

// Where the editor's selection is, as the page shows it: its line (1-based), the text of that line
// before it, and the selected text.
function editorCursor() {
  return page.evaluate(() => {
    const sel = window.getSelection();
    if (!sel || !sel.rangeCount) return null;
    const r = sel.getRangeAt(0);
    const node = r.startContainer.nodeType === 1 ? r.startContainer : r.startContainer.parentElement;
    const lineEl = node && node.closest(".cm-line");
    if (!lineEl) return { line: 0, before: "", selected: sel.toString() };
    const pre = document.createRange();
    pre.setStart(lineEl, 0);
    pre.setEnd(r.startContainer, r.startOffset);
    const lines = [...document.querySelectorAll("#lql-editor .cm-line")];
    return { line: lines.indexOf(lineEl) + 1, before: pre.toString(), selected: sel.toString() };
  });
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
    const err = await lqlError('DESCRIBE "France"\n  AT LAYR 3');
    const cursor = await editorCursor();
    // Leading blank lines are sent as typed: the error is on line 3, and so is the cursor.
    const err3 = await lqlError('\n\nDESCRIBE "France" AT LAYR 3');
    const cursor3 = await editorCursor();
    await page.click("#lql-editor");
    await page.keyboard.press("Control+A");
    await page.keyboard.type('DESCRIBE "France";');
    await page.keyboard.press("Escape");
    await page.keyboard.press("Control+Enter");
    await page.waitForSelector("#lql-results table tbody tr", { timeout: 120000 });
    await shot("lql");
    assert(rows > 0, "no rows");
    assert(sorted === "ascending", `sort state ${sorted}`);
    // The server's message says "at 2:COL"; the page shows the place once, not again as "(line 2, column COL)".
    assert(/ at 2:\d+/.test(err ?? ""), `the error does not point at line:column: ${err}`);
    assert(!/\(line \d+/.test(err ?? ""), `the place is shown twice: ${err}`);
    assert(cursor.line === 2 && cursor.selected === "L" && cursor.before === "  AT ", `the cursor is not on LAYR: ${JSON.stringify(cursor)}`);
    assert(/ at 3:\d+/.test(err3 ?? ""), `leading blank lines: the error is not on line 3: ${err3}`);
    assert(cursor3.line === 3 && cursor3.selected === "L" && cursor3.before === 'DESCRIBE "France" AT ',
           `leading blank lines: the cursor is not on LAYR of line 3: ${JSON.stringify(cursor3)}`);
    return { rows, first, error: err, cursor, error_line3: err3, cursor_line3: cursor3 };
  });

  // The server's column counts code points (COL = 1 + the code points before the token); the
  // editor's offsets are UTF-16 units: with an emoji (2 units) and an é (1 unit, 2 UTF-8 bytes)
  // before the error the cursor must still land on the token. The answer is the contract's,
  // given by the test (page.route), so this checks the console whatever the server build counts.
  const astral = 'DESCRIBE "😀é" AT LAYR 3';
  const astralBefore = 'DESCRIBE "😀é" AT ';
  const astralCol = 1 + [...astralBefore].length;
  if (!haveLql) skip("lql_error_cursor_code_points", noLql);
  else await check("lql_error_cursor_code_points", async () => {
    await page.route("**/v1/lql", (route) => route.fulfill({
      status: 400, contentType: "application/json",
      body: JSON.stringify({ error: { message: `expected LAYER at 1:${astralCol}, found "LAYR"`, type: "invalid_request_error",
                                      param: "query", code: "lql_syntax", line: 1, column: astralCol }, results: [] }),
    }), { times: 1 });
    const err = await lqlError(astral);
    const cursor = await editorCursor();
    await page.unroute("**/v1/lql");
    assert(cursor.line === 1 && cursor.selected === "L" && cursor.before === astralBefore,
           `column ${astralCol} (code points) is not LAYR: ${JSON.stringify(cursor)}`);
    return { column: astralCol, error: err, cursor };
  });

  // The same on the real server, once its columns count code points (until then it counts bytes:
  // skipped, saying so).
  if (!haveLql) skip("lql_error_cursor_code_points_server", noLql);
  else await check("lql_error_cursor_code_points_server", async () => {
    const r = await fetch(`${URL0}/v1/lql`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ query: astral }) });
    const e = (await r.json()).error ?? {};
    const bytesCol = 1 + Buffer.byteLength(astralBefore);
    if (e.column === bytesCol && bytesCol !== astralCol) return { skipped: `this server counts columns in bytes (${e.column}), not code points (${astralCol})` };
    assert(e.line === 1 && e.column === astralCol, `the server's place: ${e.line}:${e.column}, want 1:${astralCol}`);
    await lqlError(astral);
    const cursor = await editorCursor();
    assert(cursor.selected === "L" && cursor.before === astralBefore, `the cursor is not on LAYR: ${JSON.stringify(cursor)}`);
    return { column: e.column, cursor };
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

  // The logit lens plots TRACE's rank as TRACE gives it (1-based: 1 = the lens's top token), under
  // its own title: the tooltip of the last layer says the rank TRACE's last row says.
  if (!haveLql) skip("logit_lens_rank_is_traces", noLql);
  else await check("logit_lens_rank_is_traces", async () => {
    const prompt = await page.inputValue("#pic-prompt");
    const r = await fetch(`${URL0}/v1/lql`, { method: "POST", headers: { "Content-Type": "application/json" },
                                              body: JSON.stringify({ query: `TRACE ${JSON.stringify(prompt)}` }) });
    const doc = (await r.json()).results[0];
    const c = (n) => doc.columns.findIndex((x) => x.name === n);
    const last = doc.rows[doc.rows.length - 1];
    const layer = `L${last[c("layer")]}`, rank = last[c("rank")];
    if ((await page.getAttribute("#pic-chart", "data-kind")) !== "lens") {
      await page.click("#pic-lens");
      await page.waitForFunction(() => document.getElementById("pic-chart").dataset.kind === "lens", null, { timeout: 120000 });
      await sleep(800);
    }
    const title = await page.getAttribute("#pic-chart", "aria-label");
    // Hover from the plot's right edge leftwards until the tooltip is the last layer's.
    const box = await page.locator("#pic-chart").boundingBox();
    let tip = "";
    for (let x = box.x + box.width - 20; x > box.x + box.width / 2 && !tip.startsWith(layer); x -= 8) {
      await page.mouse.move(x, box.y + box.height / 2);
      await sleep(60);
      // ECharts' tooltip: the page's class for it, else its own z-index.
      tip = await page.evaluate(() => document.querySelector("#pic-chart .chart-tooltip, #pic-chart div[style*='z-index: 9999999']")?.innerText ?? "");
    }
    await page.mouse.move(0, 0);
    const m = /rank:?\s+([\d,]+)/.exec(tip);
    assert(tip.startsWith(layer) && m, `no tooltip for ${layer}: ${JSON.stringify(tip)}`);
    const plotted = Number(m[1].replace(/,/g, ""));
    assert(plotted === rank, `the lens plots rank ${plotted} at ${layer}; TRACE says ${rank}`);
    assert(!/attn \/ ffn/.test(title ?? ""), `the lens has TRACE's title: ${title}`);
    assert(/logit lens/i.test(title ?? ""), `the lens's title: ${title}`);
    return { layer, trace_rank: rank, plotted, title };
  });

  // Inputs are quoted as LQL strings (only \\ \" \n \t \r escapes): a tab and quotes go through;
  // a control character LQL cannot carry is refused by the page, naming the field (JSON.stringify
  // wrote it as \u0001, which the server refused with "unknown escape \u").
  if (!haveLql) skip("inputs_quoted_as_lql", noLql);
  else await check("inputs_quoted_as_lql", async () => {
    await page.fill("#pic-entity", 'Fr"an\\ce\tx');
    await page.click("#pic-describe");
    await page.waitForFunction(() => !document.getElementById("pic-describe").disabled && /rows|error/i.test(document.getElementById("pic-status").textContent), null, { timeout: 120000 });
    const ok = await page.textContent("#pic-status");
    assert(!(await page.locator("#pic-status .error").count()), `a tab, a quote and a backslash: ${ok}`);
    await page.fill("#pic-entity", "Fran\u0001ce");
    await page.click("#pic-describe");
    await page.waitForSelector("#pic-status .error", { timeout: 60000 });
    const pic = await page.textContent("#pic-status .error");
    await page.fill("#pic-entity", "France");
    assert(/^entity: .*U\+0001/.test(pic ?? "") && !/unknown escape/.test(pic ?? ""), `Pictures: ${pic}`);
    await page.goto(`${URL0}/#edit`);
    await page.fill("#edit-target", "Poseidonia\u0002");
    await page.click("#edit-insert");
    await page.waitForSelector("#edit-status .error", { timeout: 60000 });
    const edit = await page.textContent("#edit-status .error");
    await page.fill("#edit-target", "Poseidonia");
    assert(/^target: .*U\+0002/.test(edit ?? "") && !/unknown escape/.test(edit ?? ""), `Edit: ${edit}`);
    return { accepted: ok, pictures: pic, edit };
  });

  // 5. INSERT a fact and see INFER change (before / after side by side).
  if (!haveLql) skip("insert_changes_infer", noLql);
  else await check("insert_changes_infer", async () => {
    await page.goto(`${URL0}/#edit`);
    await page.fill("#edit-patch", `console-e2e-${Date.now()}.vlp`);
    // Recorded into a patch and saved where the server allows files (test_console.py gives it a
    // directory): SHOW PATCHES' table then shows too.
    if (ALLOW_FILES) await page.check("#edit-record");
    await page.click("#edit-insert");
    await page.waitForSelector("#edit-after table tbody tr", { timeout: 180000 });
    const before = await page.textContent("#edit-before table tbody tr >> nth=0 >> td >> nth=1");
    const after = await page.textContent("#edit-after table tbody tr >> nth=0 >> td >> nth=1");
    const changed = await page.locator("#edit-after tr.changed").count();
    if (ALLOW_FILES) {
      await page.click("#edit-save");
      await page.waitForFunction(() => !document.getElementById("edit-save").disabled, null, { timeout: 60000 });
      const saved = await page.textContent("#edit-status");
      assert(/^saved /.test(saved ?? ""), `Save patch: ${saved}`);
      await page.waitForSelector("#edit-log section:has(h3:text-matches('^Patches'))", { timeout: 10000 });
    }
    await shot("edit");
    assert(before !== after, `INFER's top token did not change: ${before}`);
    assert(changed > 0, "no row marked changed");
    return { before, after, changed_rows: changed };
  });

  // Every page, with what the checks above left on it (a chart, result tables), fits a 380 px
  // window: no horizontal scroll (the layout folds to one column below 700 px; wide tables scroll
  // inside their box).
  await check("narrow_window_every_page", async () => {
    const out = {};
    await page.setViewportSize({ width: 380, height: 800 });
    try {
      for (const name of ["chat", "lql", "pictures", "edit"]) {
        await page.goto(`${URL0}/#${name}`);
        await sleep(300);  // the chart's resize
        out[name] = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        await shot(`${name}-narrow`);
      }
    } finally {
      await page.setViewportSize({ width: 1200, height: 900 });
    }
    const wide = Object.entries(out).filter(([, px]) => px > 1);
    assert(!wide.length, `pages wider than a 380px window: ${wide.map(([n, px]) => `${n} by ${px}px`).join(", ")}`);
    return { overflow_px: out };
  });

  // At 1200 px nothing on the Edit page is cut off: the predictions, the INSERT's row and SHOW
  // PATCHES (after Save patch) each lie whole inside their box; and a table wider than its box
  // (a narrow window) scrolls inside it.
  if (!haveLql) skip("edit_tables_fit_their_box", noLql);
  else await check("edit_tables_fit_their_box", async () => {
    await page.goto(`${URL0}/#edit`);
    const measure = () => page.evaluate(() => [...document.querySelectorAll("#page-edit .table-wrap")].map((w) => {
      const a = w.getBoundingClientRect(), t = w.querySelector("table").getBoundingClientRect();
      return { title: w.parentElement.querySelector("h3")?.textContent.slice(0, 40), right: Math.round(a.right),
               table_right: Math.round(t.right), overflow_x: getComputedStyle(w).overflowX, window: window.innerWidth };
    }));
    const boxes = await measure();
    const cut = boxes.filter((b) => b.table_right > b.right + 1 || b.right > b.window);
    await page.setViewportSize({ width: 380, height: 800 });
    const narrow = await measure();
    await page.setViewportSize({ width: 1200, height: 900 });
    assert(boxes.length >= 3, `tables on the Edit page (predictions, INSERT): ${JSON.stringify(boxes)}`);
    assert(!cut.length, `tables cut off at 1200 px: ${JSON.stringify(cut)}`);
    const stuck = narrow.filter((b) => b.table_right > b.right + 1 && b.overflow_x !== "auto" && b.overflow_x !== "scroll");
    assert(!stuck.length, `wide tables that do not scroll in their box: ${JSON.stringify(stuck)}`);
    return { tables: boxes.map((b) => b.title), patches_shown: boxes.some((b) => /^Patches/.test(b.title ?? "")) };
  });

  // No page load logs a console error or gets a 4xx / 5xx (the favicon was a 404 on every load).
  await check("page_loads_cleanly", async () => {
    const fresh = await browser.newContext({ viewport: { width: 1200, height: 900 } });  // nothing cached
    const p = await fresh.newPage();
    const errors = [], failed = [];
    p.on("console", (m) => m.type() === "error" && errors.push(m.text()));
    p.on("response", (r) => r.status() >= 400 && failed.push(`${r.status()} ${new URL(r.url()).pathname}`));
    try {
      for (const name of ["chat", "lql", "pictures", "edit"]) {
        await p.goto("about:blank");  // each a whole load, not a change of hash
        await p.goto(`${URL0}/#${name}`);
        await p.waitForSelector("body[data-ready='1']", { timeout: 30000 });
        await sleep(1500);  // the browser asks for the icon after the load
      }
    } finally {
      await fresh.close();
    }
    assert(!errors.length && !failed.length, `console errors ${JSON.stringify(errors)}, failed requests ${JSON.stringify(failed)}`);
    return { pages: 4 };
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
