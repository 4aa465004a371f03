// Edit: INSERT a fact into this page's server session and see INFER before and after, side by
// side. With "record into a patch" the edits are recorded (BEGIN PATCH before the first insert)
// and can be saved (SAVE PATCH) or removed from the session (REMOVE PATCH); statements that name
// files need a server started with --lql-allow-files (docs/server.md), else it refuses them.
import { lql, newSessionId, type LqlDoc } from "./api";
import { lqlQuote } from "./lqltext";
import { el, errorBox, renderDoc } from "./table";

/**
 * INFER ... COMPARE's one table (rank, base_token, base_token_id, base_prob, edited_token, ...;
 * docs/lql.md) as two INFER-shaped tables: the base vindex's predictions and the edited ones.
 */
export function splitCompare(doc: LqlDoc): [LqlDoc, LqlDoc] {
  const side = (prefix: string, title: string): LqlDoc => {
    const idx = ["rank", `${prefix}_token`, `${prefix}_token_id`, `${prefix}_prob`].map((n) => doc.columns.findIndex((c) => c.name === n));
    return {
      statement: "INFER",
      title,
      columns: [
        { name: "rank", type: "int" },
        { name: "token", type: "text" },
        { name: "token_id", type: "int" },
        { name: "probability", type: "float" },
      ],
      rows: doc.rows.map((r) => idx.map((i) => r[i])),
      notes: [],
      elapsed_ms: doc.elapsed_ms,
    };
  };
  const after = side("edited", `${doc.title} — edited`);
  after.notes = doc.notes;
  return [side("base", `${doc.title} — base`), after];
}

/** Whether the server has INFER ... COMPARE (asked once, in a throwaway session). */
let hasCompare: Promise<boolean> | null = null;
function compareSupported(): Promise<boolean> {
  hasCompare ??= lql('INFER "a" TOP 1 COMPARE').then(
    (d) => d[0]?.columns.some((c) => c.name === "edited_token") ?? false,
    () => false,
  );
  return hasCompare;
}

/** Mark the rows of `after` whose token is not at the same rank in `before`. */
function markChanges(before: LqlDoc, after: LqlDoc, sec: HTMLElement): void {
  const T = after.columns.findIndex((c) => c.name === "token");
  sec.querySelectorAll("tbody tr").forEach((tr, i) => {
    if (before.rows[i]?.[T] !== after.rows[i]?.[T]) tr.classList.add("changed");
  });
}

export function editPage(): HTMLElement {
  const page = el("div", { class: "page edit" });
  let session = newSessionId("edit");
  let recording = false;
  const field = (id: string, label: string, value: string) => {
    const i = el("input", { id, value });
    return { input: i, label: el("label", {}, label + " ", i) };
  };
  const entity = field("edit-entity", "entity", "Atlantis");
  const relation = field("edit-relation", "relation", "capital");
  const target = field("edit-target", "target", "Poseidonia");
  const prompt = field("edit-prompt", "prompt", "The capital of Atlantis is");
  const patch = field("edit-patch", "patch file", "console-edit.vlp");
  const record = el("input", { id: "edit-record", type: "checkbox" });
  const status = el("p", { class: "muted", id: "edit-status", "aria-live": "polite" });
  const before = el("div", { class: "side", id: "edit-before" }, el("h3", {}, "Before"));
  const after = el("div", { class: "side", id: "edit-after" }, el("h3", {}, "After"));
  // The INSERT's own row and SHOW PATCHES: wide tables, so below both sides at the page's width.
  const log = el("div", { class: "edit-log", id: "edit-log" });
  const buttons: HTMLButtonElement[] = [];
  const busy = (b: boolean) => buttons.forEach((x) => (x.disabled = b));

  const insert = async () => {
    busy(true);
    status.textContent = "inferring before the edit…";
    try {
      // With INFER ... COMPARE: one request, base (the vindex as stored) vs edited. Without: an
      // INFER in this session before the INSERT, and one after.
      const compare = await compareSupported();
      const infer = `INFER ${lqlQuote(prompt.input.value, "prompt")} TOP 5`;
      let b: LqlDoc | null = null;
      if (!compare) {
        b = (await lql(infer, session))[0];
        before.replaceChildren(el("h3", {}, "Before"), renderDoc(b));
      }
      status.textContent = "inserting…";
      const begin = recording || !record.checked ? "" : `BEGIN PATCH ${lqlQuote(patch.input.value, "patch file")}; `;
      const ins = `INSERT INTO EDGES (entity, relation, target) VALUES (${lqlQuote(entity.input.value, "entity")}, ${lqlQuote(relation.input.value, "relation")}, ${lqlQuote(target.input.value, "target")})`;
      const docs = await lql(`${begin}${ins}; ${infer}${compare ? " COMPARE" : ""}`, session);
      recording ||= record.checked;
      let a = docs[docs.length - 1];
      if (compare) {
        [b, a] = splitCompare(a);
        before.replaceChildren(el("h3", {}, "Before (base)"), renderDoc(b));
      }
      const sec = renderDoc(a);
      if (b) markChanges(b, a, sec);
      after.replaceChildren(el("h3", {}, "After"), sec);
      log.replaceChildren(...docs.slice(0, -1).filter((d) => d.statement === "INSERT").map(renderDoc));
      status.textContent = recording ? `inserted; recording into ${patch.input.value}` : "inserted into this session";
    } catch (e) {
      status.replaceChildren(errorBox(e));
    } finally {
      busy(false);
    }
  };
  const save = async () => {
    busy(true);
    try {
      const docs = await lql("SAVE PATCH; SHOW PATCHES", session);
      recording = false;
      status.replaceChildren(`saved ${patch.input.value}`);
      log.append(...docs.slice(1).map(renderDoc));
    } catch (e) {
      status.replaceChildren(errorBox(e));
    } finally {
      busy(false);
    }
  };
  const remove = async () => {
    busy(true);
    try {
      await lql(`REMOVE PATCH ${lqlQuote(patch.input.value, "patch file")}`, session);
      status.replaceChildren(`removed ${patch.input.value} from the session`);
    } catch (e) {
      status.replaceChildren(errorBox(e));
    } finally {
      busy(false);
    }
  };
  const reset = () => {
    session = newSessionId("edit");
    recording = false;
    before.replaceChildren(el("h3", {}, "Before"));
    after.replaceChildren(el("h3", {}, "After"));
    log.replaceChildren();
    status.textContent = "a new session: no edits";
  };
  const btn = (id: string, label: string, f: () => void) => {
    const b = el("button", { type: "button", id }, label);
    b.addEventListener("click", f);
    buttons.push(b);
    return b;
  };
  page.append(
    el("div", { class: "row wrap" }, entity.label, relation.label, target.label),
    el("div", { class: "row wrap" }, prompt.label, el("label", {}, record, "record into a patch"), patch.label),
    el(
      "div",
      { class: "row wrap" },
      btn("edit-insert", "Insert and compare", () => void insert()),
      btn("edit-save", "Save patch", () => void save()),
      btn("edit-remove", "Remove patch", () => void remove()),
      btn("edit-reset", "New session", reset),
    ),
    status,
    el("div", { class: "sides" }, before, after),
    log,
  );
  return page;
}
