// Edit: INSERT a fact into this page's server session and see INFER before and after, side by
// side. With "record into a patch" the edits are recorded (BEGIN PATCH before the first insert)
// and can be saved (SAVE PATCH) or removed from the session (REMOVE PATCH); statements that name
// files need a server started with --lql-allow-files (docs/server.md), else it refuses them.
import { lql, newSessionId, type LqlDoc } from "./api";
import { el, errorBox, renderDoc } from "./table";

const q = (s: string) => JSON.stringify(s);

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
  const buttons: HTMLButtonElement[] = [];
  const busy = (b: boolean) => buttons.forEach((x) => (x.disabled = b));

  const insert = async () => {
    busy(true);
    status.textContent = "inferring before the edit…";
    try {
      const infer = `INFER ${q(prompt.input.value)} TOP 5`;
      const b = (await lql(infer, session))[0];
      before.replaceChildren(el("h3", {}, "Before"), renderDoc(b));
      status.textContent = "inserting…";
      const begin = recording || !record.checked ? "" : `BEGIN PATCH ${q(patch.input.value)}; `;
      const ins = `INSERT INTO EDGES (entity, relation, target) VALUES (${q(entity.input.value)}, ${q(relation.input.value)}, ${q(target.input.value)})`;
      const docs = await lql(`${begin}${ins}; ${infer}`, session);
      recording ||= record.checked;
      const a = docs[docs.length - 1];
      const sec = renderDoc(a);
      markChanges(b, a, sec);
      after.replaceChildren(el("h3", {}, "After"), sec, ...docs.slice(0, -1).filter((d) => d.statement === "INSERT").map(renderDoc));
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
      after.append(...docs.slice(1).map(renderDoc));
    } catch (e) {
      status.replaceChildren(errorBox(e));
    } finally {
      busy(false);
    }
  };
  const remove = async () => {
    busy(true);
    try {
      await lql(`REMOVE PATCH ${q(patch.input.value)}`, session);
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
  );
  return page;
}
