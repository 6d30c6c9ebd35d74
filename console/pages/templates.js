// Templates: the catalog (specs on the server) and the workspace's own builds (GET
// /v1/templates), kept live by `template.*` events (a build or first bake ended: that one is
// re-read). "Build from a spec" writes a spec in the catalog's TOML format from a form (Debian
// suite and packages, pip and npm packages, setup commands, VM shape), shows it, and sends it
// (POST /v1/templates {name, spec}); the build runs in the background and its log is followed
// (GET …/logs?follow=1, Server-Sent Events). Re-bake, delete (built ones), a build's log by
// version, and "New sandbox" (created here, then its page).

import { api, ApiError } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, dataTable, actionButton, field, input, select, textarea, formCard, when,
  stateBadge, path, errorArea, bytes, logView, follow, kv, newId,
} from "../ui.js";

const ACTIVE = new Set(["queued", "building", "baking"]);

function small(button) {
  button.classList.add("small");
  return button;
}

function seconds(ms) {
  return ms === null || ms === undefined ? "" : `${(ms / 1000).toFixed(1)} s`;
}

function versionText(t) {
  if (!t.version) return "";
  if (t.ready_version && t.ready_version !== t.version) return `v${t.version} (v${t.ready_version} in use)`;
  return `v${t.version}`;
}

export function render(main) {
  const { body, errors } = page(main, "Templates");
  const detailEl = h("div", { class: "detail" });
  let detail = null;

  const table = dataTable({
    caption: "Templates: the catalog and this workspace's own",
    key: (t) => t.name,
    empty: "No templates.",
    columns: [
      { label: "Name", class: "mono", cell: (t) => t.name },
      { label: "Description", class: "meta", cell: (t) => t.description || "" },
      { label: "Shape", cell: (t) => `${t.cpu} vCPU, ${t.memory_mb} MiB, ${t.disk_mb} MiB disk` },
      { label: "State", cell: (t) => [stateBadge(t.state), t.error ? h("span", { class: "small error-text" }, ` ${t.error}`) : null] },
      { label: "Version", cell: versionText },
      { label: "Source", cell: (t) => t.source },
      { label: "Build / bake", cell: (t) => [t.build_ms ? `built in ${seconds(t.build_ms)}` : "", t.build_ms && t.bake_ms ? ", " : "", t.bake_ms ? `baked in ${seconds(t.bake_ms)}` : ""] },
      { label: "Image", cell: (t) => (t.image_bytes ? bytes(t.image_bytes) : "") },
      {
        label: "Actions",
        cell: (t) =>
          h(
            "div",
            { class: "actions" },
            actionButton(
              "New sandbox",
              async () => {
                const sb = await api("POST", "/v1/sandboxes", { template: t.name });
                announce(`Sandbox ${sb.id} created`);
                location.hash = `#/sandboxes/${encodeURIComponent(sb.id)}`;
              },
              { errors, kind: "ghost small", ariaLabel: `New sandbox from template ${t.name}` },
            ),
            h("button", { type: "button", class: "ghost small", "aria-label": `Details and builds of template ${t.name}`, onclick: () => open(t.name) }, "Details"),
            actionButton(
              "Re-bake",
              async () => {
                announce(`Baking ${t.name}…`);
                table.upsert(await api("POST", path("/v1/templates", t.name, "bake")));
                announce(`Template ${t.name} baked`);
              },
              { errors, kind: "ghost small", ariaLabel: `Re-bake template ${t.name}` },
            ),
            t.source === "catalog"
              ? null
              : small(actionButton(
                  "Delete",
                  async () => {
                    await api("DELETE", path("/v1/templates", t.name));
                    table.remove(t.name);
                    if (detail?.name === t.name) close();
                    announce(`Template ${t.name} deleted`);
                  },
                  { errors, danger: true, confirm: `Delete template ${t.name}, every version? Sandboxes made from it keep running.`, ariaLabel: `Delete template ${t.name}` },
                )),
          ),
      },
    ],
  });

  async function refresh(name) {
    try {
      const t = await api("GET", path("/v1/templates", name));
      table.upsert(t);
      detail?.update(t);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) table.remove(name);
      else errors.show(e);
    }
  }
  function close() {
    detail?.stop();
    detail = null;
    detailEl.replaceChildren();
  }
  function open(name) {
    close();
    detail = templateDetail(name, detailEl, { closed: close, changed: (t) => table.upsert(t) });
    detailEl.querySelector("h2")?.focus();
  }

  body.append(
    buildForm(errors, (t) => {
      table.upsert(t);
      open(t.name);
    }),
    table.el,
    detailEl,
  );
  const off = onEvents(["template.*"], (e) => {
    if (e.resource?.id) refresh(e.resource.id);
  });
  api("GET", "/v1/templates")
    .then((list) => {
      table.set(list.data);
      announce(`${list.data.length} templates`);
    })
    .catch((e) => errors.show(e));
  return () => {
    off();
    close();
  };
}

/** Words of a list field: split on commas, spaces and new lines. */
function words(s) {
  return s.split(/[\s,]+/).map((w) => w.trim()).filter(Boolean);
}

/** A TOML basic string (JSON's escapes are TOML's, for the characters this form takes). */
const tomlString = (s) => JSON.stringify(s);
const tomlArray = (list) => `[${list.map(tomlString).join(", ")}]`;

/** The spec's TOML from the form's values; throws an Error naming the field that is wrong. */
export function specToml(v) {
  if (!/^[a-z0-9-]{1,40}$/.test(v.name)) throw new Error("Name: 1-40 of a-z, 0-9 and -.");
  const num = (label, x, lo, hi) => {
    if (x === "") return null;
    const n = Number(x);
    if (!Number.isInteger(n) || n < lo || n > hi) throw new Error(`${label}: a whole number from ${lo} to ${hi}.`);
    return n;
  };
  const vcpus = num("vCPUs", v.vcpus, 1, 16);
  const memory = num("Memory", v.memory_mb, 128, 65536);
  const disk = num("Disk", v.disk_mb, 256, 1048576);
  const apt = words(v.packages);
  const pip = words(v.pip);
  const npm = words(v.npm);
  if (pip.length && !apt.some((p) => p.startsWith("python3-pip"))) throw new Error("pip packages need python3-pip among the Debian packages.");
  if (npm.length && !apt.some((p) => p === "npm" || p.startsWith("npm="))) throw new Error("npm packages need npm among the Debian packages.");
  const setup = v.setup.split("\n").map((l) => l.trim()).filter(Boolean);
  const out = [`name = ${tomlString(v.name)}`];
  if (v.description.trim()) out.push(`description = ${tomlString(v.description.trim())}`);
  if (setup.length) out.push(`setup = [\n${setup.map((c) => `  ${tomlString(c)},`).join("\n")}\n]`);
  out.push("", "[debian]", `suite = ${tomlString(v.suite)}`, `variant = ${tomlString(v.variant)}`);
  if (apt.length) out.push(`packages = ${tomlArray(apt)}`);
  if (pip.length) out.push("", "[pip]", `packages = ${tomlArray(pip)}`);
  if (npm.length) out.push("", "[npm]", `packages = ${tomlArray(npm)}`);
  const vm = [];
  if (vcpus !== null) vm.push(`vcpus = ${vcpus}`);
  if (memory !== null) vm.push(`memory_mb = ${memory}`);
  if (disk !== null) vm.push(`disk_mb = ${disk}`);
  if (vm.length) out.push("", "[vm]", ...vm);
  return out.join("\n") + "\n";
}

function buildForm(errors, queued) {
  const name = input({ name: "name", required: true, pattern: "[a-z0-9\\-]{1,40}", autocomplete: "off", value: "my-tools" });
  const description = input({ name: "description", value: "Debian with jq and curl" });
  const suite = select(["bookworm", "trixie"], { name: "suite" });
  const variant = select(["minbase", "essential", "apt", "buildd", "required", "important", "standard"], { name: "variant" });
  const packages = input({ name: "packages", value: "python3 jq curl ca-certificates", autocomplete: "off" });
  const pip = input({ name: "pip", autocomplete: "off", placeholder: "requests>=2" });
  const npm = input({ name: "npm", autocomplete: "off", placeholder: "typescript" });
  const setup = textarea({ name: "setup", rows: 3, placeholder: "useradd -m user" });
  const vcpus = input({ type: "number", name: "vcpus", min: "1", max: "16", step: "1", value: "1", inputmode: "numeric" });
  const memory = input({ type: "number", name: "memory_mb", min: "128", max: "65536", step: "128", value: "512", inputmode: "numeric" });
  const disk = input({ type: "number", name: "disk_mb", min: "256", step: "256", value: "1024", inputmode: "numeric" });
  const preview = h("pre", { class: "log", tabindex: "0", "aria-label": "The spec that will be sent (TOML)" });
  const problem = h("p", { class: "small error-text", role: "status" });
  const values = () => ({
    name: name.value.trim(), description: description.value, suite: suite.value, variant: variant.value,
    packages: packages.value, pip: pip.value, npm: npm.value, setup: setup.value,
    vcpus: vcpus.value, memory_mb: memory.value, disk_mb: disk.value,
  });
  function update() {
    try {
      preview.textContent = specToml(values());
      problem.textContent = "";
    } catch (e) {
      problem.textContent = e.message;
    }
  }
  const form = formCard(
    "Build from a spec",
    [
      h("div", { class: "inline" },
        field("Name", name, "a-z, 0-9 and -"),
        field("Description", description),
        field("Debian suite", suite),
        field("Variant", variant),
      ),
      field("Debian packages", packages, "separated by spaces or commas; python3 runs the code interpreter"),
      h("div", { class: "inline" },
        field("pip packages", pip, "need python3-pip"),
        field("npm packages (global)", npm, "need npm"),
      ),
      field("Setup commands", setup, "one per line, run as root with bash -euo pipefail"),
      h("div", { class: "inline" },
        field("vCPUs", vcpus),
        field("Memory (MiB)", memory),
        field("Disk (MiB)", disk),
      ),
      h("details", {}, h("summary", {}, "Spec (TOML)"), preview),
      problem,
    ],
    async () => {
      const spec = specToml(values());
      const t = await api("POST", "/v1/templates", { name: values().name, spec });
      announce(`Template ${t.name} v${t.version} queued`);
      queued(t);
    },
    { errors, submitLabel: "Build", inline: false },
  );
  form.addEventListener("input", update);
  form.addEventListener("change", update);
  update();
  const wrap = h("details", { class: "card builder" }, h("summary", {}, "Build a template from a spec"), form);
  return wrap;
}

/** The card of one template: its facts and its builds' logs (by version; the newest one
 * followed while it runs). Returns `{name, update(t), stop()}`. */
function templateDetail(name, el, { closed, changed }) {
  const errors = errorArea();
  const headingId = newId("tpl");
  const facts = h("div", {});
  const version = select([], { name: "version" });
  const log = logView(`Build log of template ${name}`);
  const logState = h("p", { class: "muted small", role: "status" });
  const builds = h("div", {});
  let stopFollow = null;
  let tpl = null;

  function endFollow() {
    stopFollow?.();
    stopFollow = null;
  }
  async function showLog() {
    endFollow();
    log.clear();
    const v = Number(version.value);
    const newest = v === tpl.version;
    const url = `${path("/v1/templates", name, "logs")}?version=${v}`;
    if (newest && ACTIVE.has(tpl.state)) {
      logState.textContent = `Following the build of v${v}…`;
      stopFollow = follow(`${url}&follow=1`, {
        log: (d) => log.append(typeof d === "object" ? d.data ?? "" : String(d)),
        end: async (d) => {
          endFollow();
          logState.textContent = `Build v${v} ended: ${d?.reason ?? "done"}.`;
          announce(logState.textContent);
          try {
            update(await api("GET", path("/v1/templates", name)));
          } catch (e) {
            errors.show(e);
          }
        },
      }, {
        onerror: () => {
          if (stopFollow) logState.textContent = "The log stream was interrupted; reconnecting…";
        },
      });
      return;
    }
    logState.textContent = `Log of build v${v} (${newest ? tpl.state : "an older version"}).`;
    const resp = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    const text = await resp.text();
    if (!resp.ok) {
      let msg = `HTTP ${resp.status}`;
      try {
        msg = JSON.parse(text).error.message;
      } catch {
        /* not JSON */
      }
      throw new ApiError(resp.status, `http_${resp.status}`, msg);
    }
    log.append(text || "(empty)");
  }
  version.addEventListener("change", () => showLog().catch((e) => errors.show(e)));

  function update(t) {
    const was = tpl;
    tpl = t;
    changed(t);
    facts.replaceChildren(
      kv([
        ["State", stateBadge(t.state)],
        ["Source", t.source],
        ["Shape", `${t.cpu} vCPU, ${t.memory_mb} MiB memory, ${t.disk_mb} MiB disk`],
        ["Newest version", t.version ? `v${t.version}` : null],
        ["In use", t.ready_version ? `v${t.ready_version}` : null],
        ["Built in", seconds(t.build_ms)],
        ["Baked in", seconds(t.bake_ms)],
        ["Image", t.image_bytes ? bytes(t.image_bytes) : null],
        ["Created", t.created_at ? when(t.created_at) : null],
        ["Error", t.error ? h("span", { class: "error-text" }, t.error) : null],
      ]),
    );
    if (t.source === "catalog" || !t.version) {
      builds.replaceChildren(h("p", { class: "muted" }, "A catalog template: built on the server from its spec, no build log here."));
      return;
    }
    const changedVersion = !was || was.version !== t.version;
    if (changedVersion) {
      const opts = [];
      for (let v = t.version; v >= 1; v -= 1) opts.push(h("option", { value: String(v) }, `v${v}${v === t.ready_version ? " (in use)" : ""}`));
      version.replaceChildren(...opts);
      builds.replaceChildren(h("h3", {}, "Builds"), field("Build", version), logState, log.el);
      showLog().catch((e) => errors.show(e));
    }
  }

  el.replaceChildren(
    h(
      "section",
      { class: "card", "aria-labelledby": headingId },
      h(
        "div",
        { class: "head" },
        h("h2", { id: headingId, tabindex: "-1" }, `Template ${name}`),
        h("div", { class: "actions" }, h("button", { type: "button", class: "ghost small", onclick: closed }, "Close")),
      ),
      errors.el,
      facts,
      builds,
    ),
  );
  api("GET", path("/v1/templates", name))
    .then(update)
    .catch((e) => errors.show(e));
  return {
    name,
    update: (t) => {
      if (!tpl || tpl.version !== t.version || tpl.state !== t.state) update(t);
    },
    stop: endFollow,
  };
}
