// Pictures of what the model does, drawn with ECharts (canvas): EXPLAIN INFER and WALK as a layer ×
// feature heat map of gate scores (each cell labelled with the token the feature writes), TRACE
// as per-layer bars of attention vs FFN contribution to a target's logit, DESCRIBE as edges
// grouped by band, and a logit lens (the final prediction's probability and rank per layer).
import * as echarts from "echarts/core";
import { HeatmapChart, BarChart, LineChart } from "echarts/charts";
import { GridComponent, TooltipComponent, VisualMapComponent, LegendComponent, TitleComponent } from "echarts/components";
import { CanvasRenderer } from "echarts/renderers";
import { lql, type LqlDoc } from "./api";
import { lqlQuote } from "./lqltext";
import { el, errorBox } from "./table";

echarts.use([HeatmapChart, BarChart, LineChart, GridComponent, TooltipComponent, VisualMapComponent, LegendComponent, TitleComponent, CanvasRenderer]);

const col = (doc: LqlDoc, name: string) => doc.columns.findIndex((c) => c.name === name);
// Axis names beside the middle of their axis, outside its labels (at an axis' end they were cut
// off by the chart's edge, or ran into the labels); the grids contain their labels.
const AXIS_NAME_BELOW = { nameLocation: "middle", nameGap: 28 } as const;
const AXIS_NAME_LEFT = { nameLocation: "middle", nameGap: 40 } as const;

/** EXPLAIN INFER or WALK rows (same columns) → heat map: y = layer, x = the feature's rank in its layer, value = gate. */
export function heatmapOption(doc: LqlDoc): echarts.EChartsCoreOption {
  const L = col(doc, "layer"), F = col(doc, "feature"), G = col(doc, "gate"), T = col(doc, "token");
  const rank = new Map<number, number>();
  const data: { value: [number, number, number]; feature: number; token: string }[] = [];
  const layers = [...new Set(doc.rows.map((r) => r[L] as number))].sort((a, b) => a - b);
  for (const r of doc.rows) {
    const layer = r[L] as number;
    const k = rank.get(layer) ?? 0;
    rank.set(layer, k + 1);
    data.push({ value: [k, layers.indexOf(layer), r[G] as number], feature: r[F] as number, token: String(r[T] ?? "") });
  }
  const top = Math.max(1, ...rank.values());
  const gates = data.map((d) => d.value[2]);
  const m = Math.max(1e-6, ...gates.map(Math.abs));
  return {
    title: { text: doc.title, textStyle: { fontSize: 12 } },
    tooltip: {
      formatter: (p: { data: (typeof data)[number] }) =>
        `L${layers[p.data.value[1]]} feature ${p.data.feature}<br>gate ${p.data.value[2].toFixed(3)}<br>writes ${echarts.format.encodeHTML(JSON.stringify(p.data.token))}`,
    },
    grid: { left: 30, right: 20, top: 20, bottom: 80, containLabel: true },
    xAxis: { type: "category", name: "feature rank in its layer", ...AXIS_NAME_BELOW, data: Array.from({ length: top }, (_, i) => `#${i + 1}`) },
    yAxis: { type: "category", name: "layer", ...AXIS_NAME_LEFT, data: layers.map((l) => `L${l}`) },
    visualMap: { min: -m, max: m, calculable: true, orient: "horizontal", left: "center", bottom: 0, inRange: { color: ["#3b6fd4", "#f4f4f4", "#d4493b"] } },
    series: [{ type: "heatmap", data, label: { show: true, fontSize: 10, formatter: (p: { data: (typeof data)[number] }) => p.data.token.slice(0, 10) } }],
  };
}

/** TRACE rows → per-layer bars of the attention and FFN change of the target's lens logit. */
export function traceOption(doc: LqlDoc): echarts.EChartsCoreOption {
  const L = col(doc, "layer"), A = col(doc, "attn"), F = col(doc, "ffn");
  return {
    title: { text: doc.title, textStyle: { fontSize: 12 } },
    tooltip: { trigger: "axis" },
    legend: { top: 6 },
    grid: { left: 40, right: 20, top: 44, bottom: 40, containLabel: true },
    xAxis: { type: "category", name: "layer", ...AXIS_NAME_BELOW, data: doc.rows.map((r) => `L${r[L]}`) },
    yAxis: { type: "value", name: "Δ logit", ...AXIS_NAME_LEFT },
    series: [
      { name: "attention", type: "bar", data: doc.rows.map((r) => r[A] as number) },
      { name: "FFN", type: "bar", data: doc.rows.map((r) => r[F] as number) },
    ],
  };
}

/** DESCRIBE rows → horizontal bars of gate per token, one series (colour) per band. */
export function describeOption(doc: LqlDoc): echarts.EChartsCoreOption {
  const B = col(doc, "band"), T = col(doc, "token"), G = col(doc, "gate"), L = col(doc, "layer");
  const bands = [...new Set(doc.rows.map((r) => String(r[B])))];
  const labels = doc.rows.map((r) => `${r[T]} (L${r[L]})`);
  return {
    title: { text: doc.title, textStyle: { fontSize: 12 } },
    tooltip: { trigger: "item" },
    legend: { top: 6 },
    grid: { left: 10, right: 20, top: 44, bottom: 40, containLabel: true },
    yAxis: { type: "category", data: labels, inverse: true },
    xAxis: { type: "value", name: "gate", ...AXIS_NAME_BELOW },
    series: bands.map((b) => ({
      name: b,
      type: "bar",
      stack: "band",
      data: doc.rows.map((r) => (String(r[B]) === b ? (r[G] as number) : null)),
    })),
  };
}

/**
 * TRACE without FOR → the logit lens of the last position: per layer the lens's own top token
 * (labelled on its bar, with its probability) and the final prediction's probability and rank.
 * TRACE's rank is already 1-based (1 = the lens's top token), so it is plotted as it comes.
 * The title is the lens's own (TRACE's speaks of attn / ffn, which this picture does not show).
 */
export function lensOption(doc: LqlDoc, prompt?: string): echarts.EChartsCoreOption {
  const L = col(doc, "layer"), P = col(doc, "prob"), R = col(doc, "rank");
  const T = col(doc, "top_token"), TP = col(doc, "top_prob");
  // Without FOR, TRACE follows the final prediction: the last layer's own top token.
  const last = doc.rows[doc.rows.length - 1];
  const final = last ? JSON.stringify(String(last[T])) : "";
  const of = prompt === undefined ? "" : ` of ${JSON.stringify(prompt)}`;
  const num = (v: unknown) => (typeof v === "number" ? (Number.isInteger(v) ? v.toLocaleString("en-US") : v.toPrecision(3)) : String(v));
  type P = { seriesIndex: number; seriesName: string; name: string; value: unknown; marker: string; axisValueLabel: string };
  return {
    title: { text: `Logit lens${of}: the final prediction ${final} by layer`, textStyle: { fontSize: 12 } },
    tooltip: {
      trigger: "axis",
      className: "chart-tooltip",
      formatter: (ps: P | P[]) => {
        const a = Array.isArray(ps) ? ps : [ps];
        const enc = echarts.format.encodeHTML;
        return [
          enc(a[0]?.axisValueLabel ?? ""),
          ...a.map((p) =>
            p.seriesIndex === 0
              ? `${p.marker}top token ${enc(JSON.stringify(p.name))}: ${num(p.value)}`
              : `${p.marker}${enc(p.seriesName)}: ${num(p.value)}`,
          ),
        ].join("<br>");
      },
    },
    legend: { top: 6 },
    grid: { left: 40, right: 40, top: 64, bottom: 40, containLabel: true },
    xAxis: { type: "category", name: "layer", ...AXIS_NAME_BELOW, data: doc.rows.map((r) => `L${r[L]}`) },
    yAxis: [
      { type: "value", name: "probability", ...AXIS_NAME_LEFT, min: 0, max: 1 },
      { type: "log", name: "rank (log scale)", nameLocation: "middle", nameGap: 52, nameRotate: -90, inverse: true, min: 1, axisLabel: { formatter: (v: number) => num(v) } },
    ],
    series: [
      {
        name: "top token (its probability)",
        type: "bar",
        data: doc.rows.map((r) => ({ value: r[TP] as number, name: String(r[T]) })),
        label: { show: true, position: "top", rotate: 60, fontSize: 10, formatter: (p: { name: string }) => JSON.stringify(p.name) },
      },
      // Short names (the title names the final prediction): the legend fits two lines in a narrow window.
      { name: `${final}: probability`, type: "bar", data: doc.rows.map((r) => r[P] as number) },
      { name: `${final}: rank`, type: "line", yAxisIndex: 1, data: doc.rows.map((r) => r[R] as number) },
    ],
  };
}

export function picturesPage(): HTMLElement {
  const page = el("div", { class: "page pictures" });
  const prompt = el("input", { id: "pic-prompt", value: "The capital of France is", "aria-label": "prompt", size: "40" });
  const target = el("input", { id: "pic-target", value: "Paris", "aria-label": "TRACE target", size: "12" });
  const entity = el("input", { id: "pic-entity", value: "France", "aria-label": "DESCRIBE entity", size: "12" });
  const status = el("p", { class: "muted", id: "pic-status", "aria-live": "polite" });
  // The chart's title as text above the canvas: it wraps in a narrow window (on the canvas it was cut off).
  const caption = el("p", { class: "chart-title", id: "pic-title" });
  const chartBox = el("div", { class: "chart", id: "pic-chart", role: "img", "aria-label": "chart" });
  let chart: echarts.ECharts | null = null;
  // The statement is built inside the try: an input LQL cannot quote is shown as an error.
  const draw = async (kind: string, statement: () => string, option: (d: LqlDoc) => echarts.EChartsCoreOption) => {
    page.querySelectorAll("button").forEach((b) => (b.disabled = true));
    try {
      const query = statement();
      status.textContent = `running ${query}`;
      const docs = await lql(query);
      const doc = docs[docs.length - 1];
      // DESCRIBE lists up to 60 tokens: give each bar room for its label.
      chartBox.style.height = kind === "describe" ? `${Math.max(520, doc.rows.length * 18 + 110)}px` : "";
      chart ??= echarts.init(chartBox, undefined, { renderer: "canvas" });
      chart.clear();
      chart.resize();
      const { title, ...opt } = option(doc) as echarts.EChartsCoreOption & { title?: { text?: string } };
      const text = title?.text ?? doc.title;
      chart.setOption(opt);
      caption.textContent = text;
      chartBox.dataset.kind = kind;
      chartBox.dataset.points = String(doc.rows.length);
      chartBox.setAttribute("aria-label", `${kind}: ${text}`);
      status.textContent = [`${doc.rows.length} rows`, `${doc.elapsed_ms.toFixed(0)} ms`, ...doc.notes].join(" · ");
    } catch (e) {
      status.replaceChildren(errorBox(e));
    } finally {
      page.querySelectorAll("button").forEach((b) => (b.disabled = false));
    }
  };
  const btn = (id: string, label: string, f: () => void) => {
    const b = el("button", { type: "button", id }, label);
    b.addEventListener("click", f);
    return b;
  };
  const p = () => lqlQuote(prompt.value, "prompt");
  page.append(
    el("div", { class: "row wrap" }, el("label", {}, "prompt ", prompt), el("label", {}, "target ", target), el("label", {}, "entity ", entity)),
    el(
      "div",
      { class: "row wrap" },
      btn("pic-explain", "Heat map (EXPLAIN INFER)", () => void draw("heatmap", () => `EXPLAIN INFER ${p()} TOP 8`, heatmapOption)),
      btn("pic-walk", "Heat map (WALK)", () => void draw("walk", () => `WALK ${p()} TOP 8`, heatmapOption)),
      btn("pic-trace", "Attention vs FFN (TRACE)", () => void draw("trace", () => `TRACE ${p()} FOR ${lqlQuote(target.value, "target")}`, traceOption)),
      btn("pic-describe", "DESCRIBE by band", () => void draw("describe", () => `DESCRIBE ${lqlQuote(entity.value, "entity")}`, describeOption)),
      btn("pic-lens", "Logit lens", () => void draw("lens", () => `TRACE ${p()}`, (d) => lensOption(d, prompt.value))),
    ),
    status,
    caption,
    chartBox,
  );
  window.addEventListener("resize", () => chart?.resize());
  return page;
}
