// The larql console: a single-page app served by `larql serve` at / (docs/console.md).
// Pages are hash routes (#chat, #lql, #pictures, #edit); each is built once and kept.
import "./style.css";
import { getJson, installKeyDialog } from "./api";
import { chatPage } from "./chat";
import { lqlPage } from "./lql";
import { picturesPage } from "./pictures";
import { editPage } from "./edit";

const builders: Record<string, () => HTMLElement> = {
  chat: chatPage,
  lql: lqlPage,
  pictures: picturesPage,
  edit: editPage,
};
const built: Record<string, HTMLElement> = {};

function show(): void {
  const name = location.hash.slice(1) in builders ? location.hash.slice(1) : "chat";
  const app = document.getElementById("app") as HTMLElement;
  if (!built[name]) {
    built[name] = builders[name]();
    built[name].id = `page-${name}`;
    app.append(built[name]);
  }
  for (const [k, e] of Object.entries(built)) e.hidden = k !== name;
  document.querySelectorAll<HTMLAnchorElement>("nav a").forEach((a) => {
    a.setAttribute("aria-selected", String(a.dataset.page === name));
  });
  document.title = `larql · ${name}`;
}

installKeyDialog();
window.addEventListener("hashchange", show);
show();
getJson<{ data: { id: string }[] }>("/v1/models")
  .then((m) => {
    (document.getElementById("model-name") as HTMLElement).textContent = m.data[0]?.id ?? "";
    document.body.dataset.ready = "1";
  })
  .catch(() => undefined);
