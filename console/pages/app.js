// One app (`#/apps/<name>`): where it answers, its deploys with each one's phases as a
// timeline and its build log streamed (`…/deploys/{id}/logs?follow=1`), a new deploy, rollback
// (to the newest standby version or a chosen one), the app's own output, environment,
// secrets by name, custom domains, scaling, the webhook URLs and secret, the deploy key, and
// delete. `deploy.*` events about this app re-read it and its deploys.

import { api, ApiError } from "../api.js";
import { onEvents } from "../events.js";
import {
  h, announce, page, dataTable, actionButton, field, input, select, textarea, formCard, link,
  when, stateBadge, path, copyable, copyButton, tabs, logView, follow, kv,
} from "../ui.js";
import { parseEnv, envText, getText, duration, phaseTimeline, phaseRows, followedLog, fill, coalesced } from "./appkit.js";
import { appState } from "./apps.js";

const ACTIVE = ["queued", "cloning", "building", "baking", "checking"];

export function render(main, params) {
  const name = params.id;
  const base = path("/v1/apps", name);
  const deleteBtn = h("span");
  const { body, errors } = page(main, `App ${name}`, { crumbs: [["#/apps", "Apps"]], actions: [deleteBtn] });
  let app = null;
  let deploys = [];
  let selected = null; // the deploy whose details are shown
  const cleanups = [];

  const overview = h("div", { class: "overview" });
  const tabsHost = h("div");
  body.append(overview, tabsHost);

  deleteBtn.replaceWith(
    actionButton(
      "Delete app",
      async () => {
        await api("DELETE", base);
        announce(`App ${name} deleted`);
        location.hash = "#/apps";
      },
      { errors, danger: true, confirm: `Delete app ${name}, every version's VM, its deploys and their logs? This cannot be undone.` },
    ),
  );

  function renderOverview() {
    const live = deploys.find((d) => d.id === app.live_deploy);
    const vms = deploys.filter((d) => d.sandbox_id && (d.state === "live" || d.state === "standby" || ACTIVE.includes(d.state)));
    overview.replaceChildren(
      kv([
        ["URL", h("span", { class: "copyable" }, h("a", { href: app.url, target: "_blank", rel: "noopener noreferrer" }, app.url), copyButton(app.url, "App URL"))],
        ["State", stateBadge(appState({ ...app, deploys }))],
        ["Live deploy", live ? `#${live.number} · ${live.ref}${live.commit ? " · " + live.commit.slice(0, 10) : ""}` : app.live_deploy || "none yet"],
        ["Repository", h("span", { class: "mono" }, `${app.git.url} @ ${app.git.ref || "main"}`)],
        ["VMs", vms.length ? h("ul", { class: "plain" }, vms.map((d) => h("li", {}, link(`#/sandboxes/${encodeURIComponent(d.sandbox_id)}`, d.sandbox_id), ` (deploy #${d.number}, ${d.state})`))) : "none"],
        ["Scaling", `${app.min_instances === 1 ? "always running" : `hibernates after ${app.idle_seconds} s idle`} · ${app.memory_mb} MiB`],
        ["Created", when(app.created_at)],
      ]),
    );
  }

  // --- Deploys -------------------------------------------------------------------------
  const detail = h("section", { class: "card deploy-detail", "aria-label": "Deploy details" });
  let stopLog = null;
  const deployTable = dataTable({
    caption: `Deploys of ${name}`,
    empty: "No deploys yet.",
    columns: [
      { label: "#", cell: (d) => String(d.number) },
      { label: "Ref", class: "mono", cell: (d) => `${d.ref}${d.commit ? " · " + d.commit.slice(0, 10) : ""}` },
      { label: "State", cell: (d) => stateBadge(d.state) },
      { label: "Took", cell: (d) => duration(phaseRows(d.phases_ms).total) },
      { label: "Created", cell: (d) => when(d.created_at) },
      { label: "VM", class: "mono", cell: (d) => (d.sandbox_id && d.state !== "failed" ? link(`#/sandboxes/${encodeURIComponent(d.sandbox_id)}`, d.sandbox_id) : "") },
      {
        label: "Actions",
        cell: (d) =>
          h(
            "span",
            { class: "actions" },
            h("button", { type: "button", class: "ghost small", "aria-label": `Show deploy #${d.number}`, "aria-pressed": selected?.id === d.id ? "true" : "false", onclick: () => select_(d, true) }, "Show"),
            d.state === "standby"
              ? actionButton("Roll back to this", () => rollback(d.id), { errors, kind: "small", ariaLabel: `Roll back to deploy #${d.number}`, confirm: `Put deploy #${d.number} back live?` })
              : null,
          ),
      },
    ],
  });

  function select_(d, focus) {
    const changed = selected?.id !== d.id;
    selected = d;
    if (changed || !detail.hasChildNodes()) {
      stopLog?.();
      stopLog = null;
    }
    renderDetail(changed);
    if (changed) deployTable.set(deploys); // the Show buttons' pressed state
    if (focus) detail.querySelector("h3")?.focus();
  }

  let logBox = null;
  function renderDetail(newLog) {
    const d = selected;
    if (!d) {
      detail.replaceChildren(h("p", { class: "muted" }, "No deploy yet."));
      return;
    }
    if (newLog || !logBox) {
      const l = followedLog(`${base}/deploys/${encodeURIComponent(d.id)}/logs?follow=1`, `Build log of deploy #${d.number}`);
      logBox = l.el;
      stopLog = l.stop;
    }
    fill(detail, 
      h("h3", { tabindex: "-1" }, `Deploy #${d.number} `, stateBadge(d.state)),
      kv([
        ["Id", h("span", { class: "mono" }, d.id)],
        ["Ref", `${d.ref}${d.commit ? " · " + d.commit : ""}`],
        ["Error", d.error ? h("span", { class: "error-text" }, d.error) : null],
        ["Plan", d.plan?.framework ? `${d.plan.framework}${d.plan.start ? " · start: " + d.plan.start : ""}` : null],
      ]),
      phaseTimeline(d.phases_ms, { title: `Phases of deploy #${d.number}` }),
      d.plan?.decisions?.length ? h("details", {}, h("summary", {}, "Plan decisions"), h("ul", { class: "small" }, d.plan.decisions.map((x) => h("li", {}, x)))) : null,
      h("h4", {}, "Build log"),
      logBox,
    );
  }
  cleanups.push(() => stopLog?.());

  async function rollback(deployId) {
    const d = await api("POST", `${base}/rollback`, deployId ? { deploy_id: deployId } : {});
    announce(`Deploy #${d.number} is live again`);
    await load();
  }

  function deploysPanel(panel) {
    const ref = input({ name: "ref", placeholder: app?.git.ref || "main", autocomplete: "off", spellcheck: "false" });
    const deployForm = formCard(
      "New deploy",
      [field("Branch, tag or commit", ref, "default: the app's own")],
      async () => {
        const d = await api("POST", `${base}/deploys`, ref.value.trim() ? { ref: ref.value.trim() } : {});
        announce(`Deploy #${d.number} queued`);
        ref.value = "";
        await loadDeploys();
        select_(deploys.find((x) => x.id === d.id) || d, false);
      },
      { errors, submitLabel: "Deploy" },
    );
    const target = select([], { name: "rollback-to" });
    const rollbackForm = formCard(
      "Roll back",
      [field("To deploy", target)],
      async () => {
        if (!target.value) throw new Error("There is no earlier version to roll back to (no standby deploy).");
        if (!window.confirm("Put that version back live?")) return;
        await rollback(target.value);
      },
      { errors, submitLabel: "Roll back" },
    );
    panel.append(h("div", { class: "form-row" }, deployForm, rollbackForm), deployTable.el, detail);
    refreshRollback = () => {
      const standby = deploys.filter((d) => d.state === "standby");
      const keep = target.value;
      target.replaceChildren(
        ...(standby.length
          ? standby.map((d, i) => h("option", { value: d.id }, `#${d.number} · ${d.ref}${i === 0 ? " (the previous version)" : ""}`))
          : [h("option", { value: "" }, "no standby version")]),
      );
      if (standby.some((d) => d.id === keep)) target.value = keep;
    };
    refreshRollback();
  }
  let refreshRollback = () => {};

  // --- Logs (the running app's output) -------------------------------------------------
  function logsPanel(panel) {
    const view = logView(`Output of ${name}`);
    const status = h("p", { class: "muted small", role: "status" });
    let stop = null;
    const toggle = h("button", { type: "button", class: "ghost" }, "Follow");
    const start = () => {
      view.clear();
      status.textContent = "Following the app's output…";
      stop = follow(`${base}/logs?follow=1`, {
        log: (d) => view.append(typeof d === "string" ? d : d.data ?? ""),
        end: () => {
          stopFollowing();
          status.textContent = "The app's VM stopped.";
        },
      }, {
        onerror: () => {
          stopFollowing();
          status.textContent = "The stream ended (the app may have no live version, or it hibernated).";
        },
      });
      toggle.textContent = "Stop following";
    };
    const stopFollowing = () => {
      stop?.();
      stop = null;
      toggle.textContent = "Follow";
    };
    toggle.addEventListener("click", () => (stop ? stopFollowing() : start()));
    const read = actionButton("Read the newest output", async () => {
      stopFollowing();
      view.clear();
      view.append(await getText(`${base}/logs`));
      status.textContent = "The newest MiB of the app's output.";
    }, { errors, kind: "ghost" });
    panel.append(
      h("p", { class: "muted small" }, "What the live version's server writes (stdout and stderr). Reading it wakes a hibernated app."),
      h("div", { class: "actions" }, read, toggle),
      status,
      view.el,
    );
    return () => stopFollowing();
  }

  // --- Settings: environment, secrets, domains, scaling --------------------------------
  function settingsPanel(panel) {
    const env = textarea({ name: "env", rows: 5, spellcheck: "false", class: "mono" });
    env.value = envText(app.env);
    const envForm = formCard(
      "Environment",
      [field("Variables (KEY=VALUE lines)", env, "The next deploy builds and runs with them")],
      async () => {
        app = await api("PATCH", base, { env: parseEnv(env.value) });
        env.value = envText(app.env);
        announce("Environment saved");
      },
      { errors, inline: false, submitLabel: "Save environment" },
    );

    const secretList = h("ul", { class: "plain mono" });
    const showSecrets = () =>
      secretList.replaceChildren(...(app.secret_names.length ? app.secret_names.map((s) => h("li", {}, s)) : [h("li", { class: "muted" }, "none")]));
    showSecrets();
    const secrets = textarea({ name: "secrets", rows: 3, spellcheck: "false", autocomplete: "off", class: "mono" });
    const secretsForm = formCard(
      "Secrets",
      [
        h("p", { class: "small" }, "Values are never shown; these are the names:"),
        secretList,
        field("Replace all secrets (KEY=VALUE lines)", secrets, "The API sets secrets as a whole: every secret not written here is removed"),
      ],
      async () => {
        const next = parseEnv(secrets.value, "Secrets");
        const dropped = app.secret_names.filter((s) => !(s in next));
        if (dropped.length && !window.confirm(`This removes ${dropped.join(", ")}. Go on?`)) return;
        app = await api("PATCH", base, { secrets: next });
        secrets.value = "";
        showSecrets();
        announce("Secrets replaced");
      },
      { errors, inline: false, submitLabel: "Replace secrets" },
    );

    const domainTable = dataTable({
      caption: `Custom domains of ${name}`,
      empty: "No custom domains.",
      key: (d) => d.name,
      columns: [
        { label: "Domain", class: "mono", cell: (d) => d.name },
        { label: "TLS", cell: (d) => h("span", {}, stateBadge(d.tls), d.tls_expires_at ? [" until ", when(d.tls_expires_at)] : null, d.tls_error ? h("span", { class: "small muted" }, ` ${d.tls_error}`) : null) },
        {
          label: "Actions",
          cell: (d) =>
            actionButton("Remove", async () => {
              app = await api("PATCH", base, { domains: app.domains.map((x) => x.name).filter((x) => x !== d.name) });
              domainTable.set(app.domains);
              announce(`Domain ${d.name} removed`);
            }, { errors, danger: true, confirm: `Stop serving ${name} at ${d.name}?`, ariaLabel: `Remove domain ${d.name}` }),
        },
      ],
    });
    domainTable.set(app.domains);
    const domain = input({ name: "domain", placeholder: "shop.example.com", autocomplete: "off", spellcheck: "false" });
    const domainForm = formCard(
      "Add a domain",
      [field("Domain", domain, "Point its DNS at the proxy")],
      async () => {
        app = await api("PATCH", base, { domains: [...app.domains.map((x) => x.name), domain.value.trim()] });
        domainTable.set(app.domains);
        announce(`Domain ${domain.value.trim()} added`);
        domain.value = "";
      },
      { errors, submitLabel: "Add" },
    );

    const minInstances = select([
      { value: "0", label: "0: hibernate when idle" },
      { value: "1", label: "1: always running" },
    ], { name: "min-instances" });
    minInstances.value = String(app.min_instances);
    const idle = input({ type: "number", name: "idle-seconds", min: "1", max: "604800", value: String(app.idle_seconds) });
    const memory = input({ type: "number", name: "memory", min: "256", max: "16384", step: "256", value: String(app.memory_mb) });
    const scaleForm = formCard(
      "Scaling",
      [field("Minimum instances", minInstances), field("Idle seconds", idle), field("Memory (MiB, next deploy)", memory)],
      async () => {
        app = await api("PATCH", base, { min_instances: Number(minInstances.value), idle_seconds: Number(idle.value), memory_mb: Number(memory.value) });
        renderOverview();
        announce("Scaling saved");
      },
      { errors, submitLabel: "Save" },
    );
    panel.append(
      h("div", { class: "form-row" }, envForm, secretsForm),
      h("h3", {}, "Custom domains"),
      domainTable.el,
      domainForm,
      scaleForm,
    );
  }

  // --- Webhooks and the deploy key -----------------------------------------------------
  function hooksPanel(panel) {
    const origin = location.origin;
    const secretBox = h("span");
    const showSecret = (shown) => {
      secretBox.replaceChildren(
        shown ? h("code", { class: "mono" }, app.webhook_secret) : h("span", { class: "muted" }, "hidden"),
        " ",
        h("button", { type: "button", class: "ghost small", "aria-pressed": shown ? "true" : "false", onclick: () => showSecret(!shown) }, shown ? "Hide" : "Show"),
        " ",
        copyButton(app.webhook_secret, "Webhook secret"),
      );
    };
    showSecret(false);
    const keyBox = h("span");
    const showKey = () => keyBox.replaceChildren(copyable(app.deploy_key, "Deploy key"));
    showKey();
    panel.append(
      h("p", { class: "small" }, "A push to the tracked branch deploys. Sign each delivery's body with the secret (HMAC-SHA256)."),
      kv([
        ["GitHub webhook URL", copyable(`${origin}/v1/apps/${encodeURIComponent(name)}/webhooks/github`, "GitHub webhook URL")],
        ["Other git hosts", copyable(`${origin}/v1/apps/${encodeURIComponent(name)}/webhooks/generic`, "Generic webhook URL")],
        ["Webhook secret", secretBox],
        ["Deploy key (public)", keyBox],
      ]),
      h("p", { class: "small muted" }, "Add the deploy key as a read-only key on the repository to deploy ssh:// and git@host:path URLs."),
      actionButton("Rotate the deploy key", async () => {
        app = await api("POST", `${base}/deploy-key`);
        showKey();
        announce("New deploy key made");
      }, { errors, confirm: "Make a new deploy key? The old one stops working once removed from the repository." }),
    );
  }

  // --- Loading and live updates ---------------------------------------------------------
  async function loadDeploys() {
    const list = await api("GET", `${base}/deploys?limit=30`);
    deploys = list.data;
    deployTable.set(deploys);
    refreshRollback();
    if (selected) {
      const d = deploys.find((x) => x.id === selected.id);
      if (d) {
        selected = d;
        renderDetail(false);
      }
    } else if (deploys.length) {
      select_(deploys[0], false);
    } else {
      renderDetail(false);
    }
  }
  async function load() {
    const [a] = await Promise.all([api("GET", base), loadDeploys()]);
    app = a;
    renderOverview();
  }

  const reload = coalesced(load, (e) => {
    if (e instanceof ApiError && e.status === 404) body.replaceChildren(h("p", {}, `App ${name} is gone. `, link("#/apps", "All apps")));
    else errors.show(e);
  });

  cleanups.push(
    onEvents(["deploy.*"], (e) => {
      if (e.resource?.kind === "app" && e.resource.id === name) reload();
    }),
  );

  load()
    .then(() => {
      const t = tabs([
        { label: "Deploys", render: deploysPanel },
        { label: "Output", render: logsPanel },
        { label: "Settings", render: settingsPanel },
        { label: "Webhooks and deploy key", render: hooksPanel },
      ]);
      cleanups.push(t.stop);
      tabsHost.replaceChildren(t.el);
    })
    .catch((e) => {
      if (e instanceof ApiError && e.status === 404) {
        body.replaceChildren(h("p", {}, `No app named ${name}. `, link("#/apps", "All apps")));
      } else errors.show(e);
    });

  return () => cleanups.forEach((c) => c());
}

