// Functions: every page of GET /v1/functions, kept live by `deploy.*` and
// `function.version_live` events (an event re-reads that one function). New function: name,
// runtime, one handler file written in a textarea (a sample per runtime), the handler,
// dependencies, environment and whether its URL is public. Delete asks first.

import { api } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, dataTable, actionButton, field, input, select, textarea, formCard, link,
  when, stateBadge, path, rowRefresher,
} from "../ui.js";
import { parseEnv, listEnriched } from "./appkit.js";

export const SAMPLES = {
  python: {
    handler: "main.handler",
    code: `def handler(event, context=None):
    """Called with the request's JSON body; returns any JSON value."""
    name = (event or {}).get("name", "world") if isinstance(event, dict) else "world"
    print("called with", event)
    return {"greeting": f"hello {name}"}
`,
  },
  node: {
    handler: "index.handler",
    code: `// Called with the request's JSON body; returns any JSON value.
export async function handler(event, context) {
  const name = (event && event.name) || "world";
  console.log("called with", event);
  return { greeting: \`hello \${name}\` };
}
`,
  },
};

/** The file a handler names: `main.handler` → `main.py` (Python), `index.handler` →
 * `index.mjs` (Node.js, an ES module). */
export function handlerFile(runtime, handler) {
  const mod = handler.includes(".") ? handler.slice(0, handler.lastIndexOf(".")) : handler;
  return `${mod}.${runtime === "python" ? "py" : "mjs"}`;
}

/** A function with its newest version (`newest`). */
async function readFunction(name) {
  const [f, v] = await Promise.all([
    api("GET", path("/v1/functions", name)),
    api("GET", path("/v1/functions", name, "versions") + "?limit=1"),
  ]);
  return { ...f, newest: v.data[0] || null };
}

export function render(main) {
  const { body, errors } = page(main, "Functions");
  const table = dataTable({
    caption: "Functions of this workspace",
    empty: "No functions yet.",
    key: (f) => f.name,
    columns: [
      { label: "Name", cell: (f) => link(`#/functions/${encodeURIComponent(f.name)}`, f.name) },
      { label: "Runtime", cell: (f) => f.runtime },
      { label: "Handler", class: "mono", cell: (f) => f.handler },
      { label: "Live version", cell: (f) => (f.live_version ? `v${f.live_version}` : h("span", { class: "muted" }, "none")) },
      { label: "Newest version", cell: (f) => (f.newest ? h("span", {}, `v${f.newest.version} `, stateBadge(f.newest.state)) : "") },
      { label: "Public URL", class: "meta", cell: (f) => (f.public ? h("a", { href: f.url, target: "_blank", rel: "noopener noreferrer" }, f.url) : h("span", { class: "muted" }, "private")) },
      { label: "Warm", cell: (f) => String(f.warm_instances) },
      { label: "Created", cell: (f) => when(f.created_at) },
      {
        label: "Actions",
        cell: (f) =>
          actionButton(
            "Delete",
            async () => {
              await api("DELETE", path("/v1/functions", f.name));
              table.remove(f.name);
              announce(`Function ${f.name} deleted`);
            },
            { errors, danger: true, confirm: `Delete function ${f.name}, its versions and instances? This cannot be undone.`, ariaLabel: `Delete function ${f.name}` },
          ),
      },
    ],
  });
  body.append(newFunctionForm(errors), h("h2", { class: "section" }, "All functions"), table.el);

  const refresh = rowRefresher(table, readFunction, errors);
  const off = onEvents(["deploy.*", "function.version_live"], (e) => {
    if (e.resource?.kind === "function") refresh(e.resource.id);
  });
  listEnriched(
    "/v1/functions",
    table,
    async (f) => {
      f.newest = (await api("GET", path("/v1/functions", f.name, "versions") + "?limit=1")).data[0] || null;
    },
    errors,
    "functions",
  ).catch((e) => errors.show(e));
  return off;
}

function newFunctionForm(errors) {
  const name = input({ name: "name", required: true, pattern: "[a-z]([a-z0-9\\-]{0,35}[a-z0-9])?", maxlength: "37", autocomplete: "off", spellcheck: "false" });
  const runtime = select([
    { value: "python", label: "Python 3" },
    { value: "node", label: "Node.js 20" },
  ], { name: "runtime" });
  const handler = input({ name: "handler", required: true, value: SAMPLES.python.handler, autocomplete: "off", spellcheck: "false", class: "mono" });
  const code = textarea({ name: "code", rows: 10, spellcheck: "false", class: "mono code" });
  code.value = SAMPLES.python.code;
  const fileNote = h("span", { class: "muted small", "aria-live": "polite" });
  const deps = textarea({ name: "dependencies", rows: 2, spellcheck: "false", class: "mono", placeholder: "requests==2.32.3" });
  const env = textarea({ name: "env", rows: 2, spellcheck: "false", class: "mono", placeholder: "GREETING=hello" });
  const isPublic = h("input", { type: "checkbox", name: "public" });
  const showFile = () => (fileNote.textContent = `Saved as ${handlerFile(runtime.value, handler.value.trim() || "main.handler")}`);
  showFile();
  handler.addEventListener("input", showFile);
  runtime.addEventListener("change", () => {
    const other = runtime.value === "python" ? SAMPLES.node : SAMPLES.python;
    const mine = SAMPLES[runtime.value];
    // A sample left as it was follows the runtime; code someone wrote stays.
    if (!code.value.trim() || code.value === other.code) code.value = mine.code;
    if (!handler.value.trim() || handler.value === other.handler) handler.value = mine.handler;
    deps.placeholder = runtime.value === "python" ? "requests==2.32.3" : '{"dependencies": {"lodash": "^4.17.21"}}';
    showFile();
  });
  return formCard(
    "New function",
    [
      h("div", { class: "form-row" },
        field("Name", name, "1-37 of a-z, 0-9 and -, starting with a letter"),
        field("Runtime", runtime),
        field("Handler (module.function)", handler)),
      h("div", { class: "field" }, field("Handler file", code), fileNote),
      h("div", { class: "form-row" },
        field("Dependencies (requirements.txt or package.json)", deps),
        field("Environment (KEY=VALUE lines)", env)),
      h("div", { class: "check" }, isPublic, h("label", { for: isPublic.id || (isPublic.id = "fn-public") }, "Public: anyone may call its URL")),
    ],
    async () => {
      const h_ = handler.value.trim();
      const req = {
        name: name.value.trim(),
        runtime: runtime.value,
        handler: h_,
        files: { [handlerFile(runtime.value, h_)]: code.value },
        env: parseEnv(env.value),
        public: isPublic.checked,
      };
      if (deps.value.trim()) req.dependencies = deps.value;
      const f = await api("POST", "/v1/functions", req);
      announce(`Function ${f.name} created; its first version is building`);
      location.hash = `#/functions/${encodeURIComponent(f.name)}`;
    },
    { errors, inline: false, submitLabel: "Create function" },
  );
}
