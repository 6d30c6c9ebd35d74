// Apps: every page of GET /v1/apps with each app's newest deploy, kept live by `deploy.*`
// events (an event re-reads that one app and its deploys). New app: name, git URL and ref,
// environment and secrets as KEY=VALUE lines, scaling and memory; its first deploy is queued
// at once and the app's page shows it. Delete asks first.

import { api } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, dataTable, actionButton, field, input, select, textarea, formCard, link,
  when, stateBadge, path, rowRefresher,
} from "../ui.js";
import { parseEnv, listEnriched } from "./appkit.js";

/** An app with its newest deploys (`deploys`, newest first). */
async function readApp(name) {
  const [app, deploys] = await Promise.all([
    api("GET", path("/v1/apps", name)),
    api("GET", path("/v1/apps", name, "deploys") + "?limit=10"),
  ]);
  return { ...app, deploys: deploys.data };
}

/** What the app is doing, in a word: its newest deploy while one is under way, else its live
 * VM's state, else why there is none. */
export function appState(app) {
  const newest = app.deploys?.[0];
  if (newest && ["queued", "cloning", "building", "baking", "checking"].includes(newest.state)) return "deploying";
  if (app.live_deploy) return app.instance_state || "live";
  if (newest?.state === "failed") return "failed";
  return newest ? newest.state : "no deploy";
}

function deployLabel(app, id) {
  if (!id) return "";
  const d = app.deploys?.find((x) => x.id === id);
  return d ? `#${d.number} (${d.ref})` : id;
}

export function render(main) {
  const { body, errors } = page(main, "Apps");
  const table = dataTable({
    caption: "Apps of this workspace",
    empty: "No apps yet.",
    key: (a) => a.name,
    columns: [
      { label: "Name", cell: (a) => link(`#/apps/${encodeURIComponent(a.name)}`, a.name) },
      { label: "URL", class: "meta", cell: (a) => h("a", { href: a.url, target: "_blank", rel: "noopener noreferrer" }, a.url) },
      { label: "State", cell: (a) => stateBadge(appState(a)) },
      { label: "Live deploy", cell: (a) => (a.live_deploy ? deployLabel(a, a.live_deploy) : h("span", { class: "muted" }, "none")) },
      {
        label: "Newest deploy",
        cell: (a) => {
          const d = a.deploys?.[0];
          return d ? h("span", {}, `#${d.number} `, stateBadge(d.state)) : "";
        },
      },
      { label: "Created", cell: (a) => when(a.created_at) },
      {
        label: "Actions",
        cell: (a) =>
          actionButton(
            "Delete",
            async () => {
              await api("DELETE", path("/v1/apps", a.name));
              table.remove(a.name);
              announce(`App ${a.name} deleted`);
            },
            { errors, danger: true, confirm: `Delete app ${a.name}, every version's VM and its deploys? This cannot be undone.`, ariaLabel: `Delete app ${a.name}` },
          ),
      },
    ],
  });
  body.append(newAppForm(errors), h("h2", { class: "section" }, "All apps"), table.el);

  const refresh = rowRefresher(table, readApp, errors);
  const off = onEvents(["deploy.*"], (e) => {
    if (e.resource?.kind === "app") refresh(e.resource.id);
  });
  listEnriched(
    "/v1/apps",
    table,
    async (a) => {
      // Each app's newest deploys.
      a.deploys = (await api("GET", path("/v1/apps", a.name, "deploys") + "?limit=10")).data;
    },
    errors,
    "apps",
  ).catch((e) => errors.show(e));
  return off;
}

function newAppForm(errors) {
  const name = input({ name: "name", required: true, pattern: "[a-z]([a-z0-9\\-]{0,38}[a-z0-9])?", maxlength: "40", autocomplete: "off", spellcheck: "false" });
  const url = input({ name: "git-url", required: true, placeholder: "https://github.com/you/site.git", autocomplete: "off", spellcheck: "false" });
  const ref = input({ name: "git-ref", placeholder: "main", autocomplete: "off", spellcheck: "false" });
  const env = textarea({ name: "env", rows: 3, placeholder: "NODE_ENV=production", spellcheck: "false", class: "mono" });
  const secrets = textarea({ name: "secrets", rows: 3, placeholder: "DATABASE_URL=postgres://…", spellcheck: "false", autocomplete: "off", class: "mono secret-input" });
  const minInstances = select([
    { value: "0", label: "0: hibernate when idle, wake on a request" },
    { value: "1", label: "1: always running" },
  ], { name: "min-instances" });
  const idle = input({ type: "number", name: "idle-seconds", min: "1", max: "604800", step: "1", inputmode: "numeric", placeholder: "300" });
  const memory = select(
    [256, 512, 1024, 2048, 4096, 8192].map((m) => ({ value: String(m), label: `${m} MiB` })),
    { name: "memory" },
  );
  memory.value = "1024";
  const form = formCard(
    "New app",
    [
      h("div", { class: "form-row" },
        field("Name (its host name)", name, "1-40 of a-z, 0-9 and -, starting with a letter"),
        field("Git repository URL", url, "https://, git://, ssh:// or git@host:path"),
        field("Branch, tag or commit", ref, "default: main")),
      h("div", { class: "form-row" },
        field("Environment (KEY=VALUE lines)", env),
        field("Secrets (KEY=VALUE lines)", secrets, "Only their names are shown afterwards")),
      h("div", { class: "form-row" },
        field("Minimum instances", minInstances),
        field("Idle seconds before hibernating", idle),
        field("Memory", memory)),
    ],
    async () => {
      const req = {
        name: name.value.trim(),
        git: { url: url.value.trim() },
        env: parseEnv(env.value, "Environment"),
        secrets: parseEnv(secrets.value, "Secrets"),
        min_instances: Number(minInstances.value),
        memory_mb: Number(memory.value),
      };
      if (ref.value.trim()) req.git.ref = ref.value.trim();
      if (idle.value) req.idle_seconds = Number(idle.value);
      const app = await api("POST", "/v1/apps", req);
      secrets.value = "";
      announce(`App ${app.name} created; its first deploy is queued`);
      location.hash = `#/apps/${encodeURIComponent(app.name)}`;
    },
    { errors, inline: false, submitLabel: "Create and deploy" },
  );
  return form;
}
