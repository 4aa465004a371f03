// Pictures of what the model does, drawn with ECharts (canvas): EXPLAIN INFER and WALK as a layer ×
// feature heat map of gate scores (each cell labelled with the token the feature writes), TRACE
// as per-layer bars of attention vs FFN contribution to a target's logit, DESCRIBE as edges
// grouped by band, and a logit lens (the final prediction's probability and rank per layer).
import * as echarts from "echarts/core";
import { HeatmapChart, BarChart, LineChart } from "echarts/charts";
import { GridComponent, TooltipComponent, VisualMapComponent, LegendComponent, TitleComponent } from "echarts/components";
import { CanvasRenderer } from "echarts/renderers";
import { lql, type LqlDoc } from "./api";
import { el, errorBox } from "./table";

echarts.use([HeatmapChart, BarChart, LineChart, GridComponent, TooltipComponent, VisualMapComponent, LegendComponent, TitleComponent, CanvasRenderer]);

const col = (doc: LqlDoc, name: string) => doc.columns.findIndex((c) => c.name === name);
const q = (s: string) => JSON.stringify(s);

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
    grid: { left: 50, right: 20, top: 40, bottom: 70 },
    xAxis: { type: "category", name: "feature rank", data: Array.from({ length: top }, (_, i) => `#${i + 1}`) },
    yAxis: { type: "category", name: "layer", data: layers.map((l) => `L${l}`) },
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
    legend: { top: 24 },
    grid: { left: 50, right: 20, top: 60, bottom: 30 },
    xAxis: { type: "category", name: "layer", data: doc.rows.map((r) => `L${r[L]}`) },
    yAxis: { type: "value", name: "Δ logit" },
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
    legend: { top: 24 },
    grid: { left: 140, right: 20, top: 60, bottom: 20 },
    yAxis: { type: "category", data: labels, inverse: true },
    xAxis: { type: "value", name: "gate" },
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
 */
export function lensOption(doc: LqlDoc): echarts.EChartsCoreOption {
  const L = col(doc, "layer"), P = col(doc, "prob"), R = col(doc, "rank");
  const T = col(doc, "top_token"), TP = col(doc, "top_prob");
  return {
    title: { text: doc.title, textStyle: { fontSize: 12 } },
    tooltip: { trigger: "axis" },
    legend: { top: 24 },
    grid: { left: 50, right: 60, top: 60, bottom: 30 },
    xAxis: { type: "category", name: "layer", data: doc.rows.map((r) => `L${r[L]}`) },
    yAxis: [
      { type: "value", name: "probability", min: 0, max: 1 },
      { type: "log", name: "rank", inverse: true, min: 1 },
    ],
    series: [
      {
        name: "top token (its probability)",
        type: "bar",
        data: doc.rows.map((r) => ({ value: r[TP] as number, name: String(r[T]) })),
        label: { show: true, position: "top", rotate: 60, fontSize: 10, formatter: (p: { name: string }) => JSON.stringify(p.name) },
      },
      { name: "final prediction's probability", type: "bar", data: doc.rows.map((r) => r[P] as number) },
      { name: "final prediction's rank", type: "line", yAxisIndex: 1, data: doc.rows.map((r) => (r[R] as number) + 1) },
    ],
  };
}

export function picturesPage(): HTMLElement {
  const page = el("div", { class: "page pictures" });
  const prompt = el("input", { id: "pic-prompt", value: "The capital of France is", "aria-label": "prompt", size: "40" });
  const target = el("input", { id: "pic-target", value: "Paris", "aria-label": "TRACE target", size: "12" });
  const entity = el("input", { id: "pic-entity", value: "France", "aria-label": "DESCRIBE entity", size: "12" });
  const status = el("p", { class: "muted", id: "pic-status", "aria-live": "polite" });
  const chartBox = el("div", { class: "chart", id: "pic-chart", role: "img", "aria-label": "chart" });
  let chart: echarts.ECharts | null = null;
  const draw = async (kind: string, query: string, option: (d: LqlDoc) => echarts.EChartsCoreOption) => {
    status.textContent = `running ${query}`;
    page.querySelectorAll("button").forEach((b) => (b.disabled = true));
    try {
      const docs = await lql(query);
      const doc = docs[docs.length - 1];
      // DESCRIBE lists up to 60 tokens: give each bar room for its label.
      chartBox.style.height = kind === "describe" ? `${Math.max(520, doc.rows.length * 18 + 110)}px` : "";
      chart ??= echarts.init(chartBox, undefined, { renderer: "canvas" });
      chart.clear();
      chart.resize();
      chart.setOption(option(doc));
      chartBox.dataset.kind = kind;
      chartBox.dataset.points = String(doc.rows.length);
      chartBox.setAttribute("aria-label", `${kind}: ${doc.title}`);
      status.textContent = `${doc.rows.length} rows · ${doc.elapsed_ms.toFixed(0)} ms · ${doc.notes.join(" · ")}`;
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
  page.append(
    el("div", { class: "row wrap" }, el("label", {}, "prompt ", prompt), el("label", {}, "target ", target), el("label", {}, "entity ", entity)),
    el(
      "div",
      { class: "row wrap" },
      btn("pic-explain", "Heat map (EXPLAIN INFER)", () => void draw("heatmap", `EXPLAIN INFER ${q(prompt.value)} TOP 8`, heatmapOption)),
      btn("pic-walk", "Heat map (WALK)", () => void draw("walk", `WALK ${q(prompt.value)} TOP 8`, heatmapOption)),
      btn("pic-trace", "Attention vs FFN (TRACE)", () => void draw("trace", `TRACE ${q(prompt.value)} FOR ${q(target.value)}`, traceOption)),
      btn("pic-describe", "DESCRIBE by band", () => void draw("describe", `DESCRIBE ${q(entity.value)}`, describeOption)),
      btn("pic-lens", "Logit lens", () => void draw("lens", `TRACE ${q(prompt.value)}`, lensOption)),
    ),
    status,
    chartBox,
  );
  window.addEventListener("resize", () => chart?.resize());
  return page;
}
