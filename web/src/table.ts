// A result table that sorts by a column on click (or Enter/Space on the header's button).
import type { LqlDoc } from "./api";
import { errorText } from "./lqltext";

export function cellText(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (Array.isArray(v)) return v.join(", ");
  if (typeof v === "number") {
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    return a >= 1000 ? v.toFixed(0) : a >= 1e-3 || a === 0 ? String(Number(v.toPrecision(4))) : v.toExponential(2);
  }
  return String(v);
}

function compare(a: unknown, b: unknown): number {
  if (typeof a === "number" && typeof b === "number") return a - b;
  return cellText(a).localeCompare(cellText(b));
}

/** A `<section>` with the document's title, its table (sortable), notes and time. */
export function renderDoc(doc: LqlDoc): HTMLElement {
  const sec = document.createElement("section");
  sec.className = "result";
  const h = document.createElement("h3");
  h.textContent = doc.title || doc.statement;
  sec.append(h);
  const wrap = document.createElement("div");
  wrap.className = "table-wrap";
  const table = document.createElement("table");
  const thead = table.createTHead();
  const tbody = table.createTBody();
  let rows = doc.rows.slice();
  let sortCol = -1;
  let asc = true;
  const fill = () => {
    tbody.replaceChildren();
    for (const r of rows) {
      const tr = tbody.insertRow();
      r.forEach((v, i) => {
        const td = tr.insertCell();
        td.textContent = cellText(v);
        const t = doc.columns[i]?.type;
        if (t === "int" || t === "float") td.className = "num";
      });
    }
  };
  const hr = thead.insertRow();
  doc.columns.forEach((c, i) => {
    const th = document.createElement("th");
    th.scope = "col";
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = c.name;
    b.title = `sort by ${c.name}`;
    b.addEventListener("click", () => {
      asc = sortCol === i ? !asc : true;
      sortCol = i;
      rows = doc.rows.slice().sort((x, y) => (asc ? 1 : -1) * compare(x[i], y[i]));
      hr.querySelectorAll("th").forEach((e) => e.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      fill();
    });
    th.append(b);
    hr.append(th);
  });
  fill();
  wrap.append(table);
  sec.append(wrap);
  const foot = document.createElement("p");
  foot.className = "muted";
  foot.textContent = [...doc.notes, `${doc.rows.length} rows, ${doc.elapsed_ms.toFixed(1)} ms`].join(" · ");
  sec.append(foot);
  return sec;
}

/** A small helper to build elements: el("div", {class: "x"}, child, "text"). */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  e.append(...children);
  return e;
}

/** An error box; with line:column when the server gave them and its message does not say them. */
export function errorBox(e: unknown): HTMLElement {
  const p = el("p", { class: "error", role: "alert" });
  const err = e as { message?: string; line?: number; column?: number };
  p.textContent = errorText(err.message ?? String(e), err.line, err.column);
  return p;
}
