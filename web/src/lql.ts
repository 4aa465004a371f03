// LQL: an editor (CodeMirror 6) with highlighting and keyword completion, history (this
// browser's localStorage), results as sortable tables, errors placed at their line:column.
import { EditorView, basicSetup } from "codemirror";
import { keymap } from "@codemirror/view";
import { StreamLanguage, HighlightStyle, syntaxHighlighting } from "@codemirror/language";
import { autocompletion, type CompletionContext } from "@codemirror/autocomplete";
import { EditorSelection } from "@codemirror/state";
import { tags } from "@lezer/highlight";
import { lql, newSessionId } from "./api";
import { codePointLengthAt, utf16OffsetOfColumn } from "./lqltext";
import { el, errorBox, renderDoc } from "./table";

/** The language's keywords, as src/lql/parser.cc lists them. */
export const KEYWORDS = (
  "ALL ALPHA AND APPLY ASC AT ATTENTION BEGIN BETWEEN BRIEF BY COMPARE COMPILE CONFIDENCE CURRENT DECOMPOSE " +
  "DELETE DESC DESCRIBE DIFF EDGES ENTITIES EXAMPLES EXPLAIN FEATURES FOR FROM IN INFER INSERT INTO KNOWLEDGE " +
  "LAYER LAYERS LIKE LIMIT MODEL MODELS NEAREST NOT ONLY OR ORDER OUTPUT PATCH PATCHES POSITIONS RAW RELATION " +
  "RELATIONS REMOVE SAVE SELECT SET SHOW STATS SYNTAX TO TOP TRACE UPDATE USE VALUES VERBOSE VINDEX WALK WHERE " +
  "WITH LAST MODE KNN COMPOSE ROBUST VERIFY ON OFF"
).split(" ");
const KW = new Set(KEYWORDS);

/** LQL's lexical rules (docs/lql.md "Lexical"): -- comments, '...' / "..." strings, numbers, |>. */
const lqlLanguage = StreamLanguage.define<null>({
  token(stream) {
    if (stream.eatSpace()) return null;
    if (stream.match("--")) {
      stream.skipToEnd();
      return "comment";
    }
    const q = stream.peek();
    if (q === '"' || q === "'") {
      stream.next();
      let esc = false;
      let ch: string | void;
      while ((ch = stream.next()) !== undefined) {
        if (!esc && ch === q) break;
        esc = !esc && ch === "\\";
      }
      return "string";
    }
    if (stream.match(/^\d+(\.\d+)?/)) return "number";
    if (stream.match(/^[A-Za-z_][A-Za-z_0-9]*/)) {
      return KW.has(stream.current().toUpperCase()) ? "keyword" : "variableName";
    }
    if (stream.match("|>")) return "operator";
    stream.next();
    return "punctuation";
  },
});

const style = HighlightStyle.define([
  { tag: tags.keyword, color: "var(--kw)", fontWeight: "600" },
  { tag: tags.string, color: "var(--str)" },
  { tag: tags.number, color: "var(--num)" },
  { tag: tags.comment, color: "var(--muted)", fontStyle: "italic" },
  { tag: tags.operator, color: "var(--kw)" },
]);

function complete(ctx: CompletionContext) {
  const w = ctx.matchBefore(/[A-Za-z]+/);
  if (!w || (w.from === w.to && !ctx.explicit)) return null;
  return { from: w.from, options: KEYWORDS.map((k) => ({ label: k, type: "keyword" })) };
}

const HISTORY_ITEM = "larql-lql-history";

export function lqlPage(): HTMLElement {
  const page = el("div", { class: "page lql" });
  const session = newSessionId("lql");
  const results = el("div", { id: "lql-results", "aria-live": "polite" });
  const runBtn = el("button", { type: "button", id: "lql-run" }, "Run (Ctrl+Enter)");
  const hist = el("select", { id: "lql-history", "aria-label": "History" });
  const status = el("span", { class: "muted", id: "lql-status" });
  let history: string[] = JSON.parse(localStorage.getItem(HISTORY_ITEM) ?? "[]");
  const fillHistory = () => {
    hist.replaceChildren(el("option", { value: "" }, `History (${history.length})`));
    history.forEach((q, i) => hist.append(el("option", { value: String(i) }, q.slice(0, 80))));
  };
  fillHistory();

  const run = async () => {
    // Sent as typed, blank lines included: the server's LINE:COL are then the editor's lines.
    const query = view.state.doc.toString();
    if (!query.trim()) return;
    history = [query, ...history.filter((h) => h !== query)].slice(0, 50);
    localStorage.setItem(HISTORY_ITEM, JSON.stringify(history));
    fillHistory();
    status.textContent = "running…";
    runBtn.disabled = true;
    results.replaceChildren();
    try {
      const docs = await lql(query, session);
      results.replaceChildren(...docs.map(renderDoc));
      status.textContent = `${docs.length} statement(s)`;
    } catch (e) {
      results.replaceChildren(errorBox(e));
      status.textContent = "";
      const err = e as { line?: number; column?: number };
      if (err.line && err.line <= view.state.doc.lines) {
        // The server's column counts code points; CodeMirror's offsets are UTF-16 units.
        const line = view.state.doc.line(err.line);
        const off = utf16OffsetOfColumn(line.text, err.column ?? 1);
        const pos = line.from + off;
        view.dispatch({ selection: EditorSelection.range(pos, pos + codePointLengthAt(line.text, off)), scrollIntoView: true });
        view.focus();
      }
    } finally {
      runBtn.disabled = false;
    }
  };

  const view = new EditorView({
    doc: 'DESCRIBE "France";',
    extensions: [
      keymap.of([{ key: "Mod-Enter", run: () => (void run(), true) }]),
      basicSetup,
      lqlLanguage,
      syntaxHighlighting(style),
      autocompletion({ override: [complete] }),
      EditorView.lineWrapping,
      EditorView.contentAttributes.of({ "aria-label": "LQL statements", id: "lql-editor" }),
    ],
  });
  hist.addEventListener("change", () => {
    const q = history[Number(hist.value)];
    if (q !== undefined) view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: q } });
    hist.value = "";
    view.focus();
  });
  runBtn.addEventListener("click", () => void run());
  page.append(
    el("div", { class: "editor" }, view.dom),
    el("div", { class: "row wrap" }, runBtn, hist, status),
    results,
  );
  return page;
}
