// The TypeScript SDK's wire types against the server's committed OpenAPI document
// (crates/pandastack-api/openapi.json), offline.
//
// For each response schema the SDK models (PAIRS): the interface in src/types.ts (parsed with the
// TypeScript compiler) has exactly the schema's fields in camelCase, each of a compatible type; a
// field the server may send as null admits null (or is optional); and the SDK's `…FromWire` of a
// sample built from the schema reads every field from the right key. A field whose schema is
// another modelled schema (`AppInfo.git` is an `AppGit`) is that schema's interface, read with its
// decoder. A tagged union (`ScheduleInfo.target` is a `ScheduleTarget`) is a type alias of
// src/types.ts read with its decoder (UNIONS), sampled as its first variant with its `type`. A
// field of any JSON (`unknown`) fits every wire type. Every other schema must be named in
// NOT_MODELLED with the reason, so a new schema is a decision, not a gap. A type of src/types.ts
// that is the generated schema itself (`export type PortUrl = Schemas["PortUrl"]`, from
// src/generated/openapi.ts) has the schema's fields by construction: it must alias the schema it
// is paired with, and its decoder is still checked.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

import * as types from "../dist/types.js";

const here = dirname(fileURLToPath(import.meta.url));
const DOC = JSON.parse(readFileSync(join(here, "../../../crates/pandastack-api/openapi.json"), "utf8"));
const SCHEMAS = DOC.components.schemas;
const TYPES_TS = join(here, "../src/types.ts");

/** Response schema → [interface in src/types.ts, its decoder in dist/types.js (or null)]. */
const PAIRS = {
  Sandbox: ["SandboxInfo", "sandboxFromWire"],
  ExecResult: ["ExecResult", "execResultFromWire"],
  FileInfo: ["FileInfo", "fileInfoFromWire"],
  FileUrl: ["FileUrl", "fileUrlFromWire"],
  Snapshot: ["SnapshotInfo", "snapshotFromWire"],
  Template: ["TemplateInfo", "templateFromWire"],
  CodeContext: ["CodeContext", "codeContextFromWire"],
  PortUrl: ["PortUrl", "portUrlFromWire"],
  PortUpdate: ["PortUpdate", null],
  Volume: ["VolumeInfo", "volumeFromWire"],
  VolumeAttachment: ["VolumeAttachment", "volumeAttachmentFromWire"],
  VolumeSnapshot: ["VolumeSnapshotInfo", "volumeSnapshotFromWire"],
  VolumeBackup: ["VolumeBackupInfo", "volumeBackupFromWire"],
  // Also the `volumes` entries of a create request (volumeMountsToWire).
  SandboxVolume: ["VolumeMount", "volumeMountFromWire"],
  Database: ["DatabaseInfo", "databaseFromWire"],
  QueryField: ["QueryField", "queryFieldFromWire"],
  QueryResponse: ["QueryResult", "queryResultFromWire"],
  DatabaseExtension: ["DatabaseExtension", "databaseExtensionFromWire"],
  DatabaseExtensions: ["DatabaseExtensions", "databaseExtensionsFromWire"],
  App: ["AppInfo", "appFromWire"],
  // Also the `git`, `build` and `start` of create and update requests (gitToWire, configToWire).
  AppGit: ["AppGit", "appGitFromWire"],
  AppBuild: ["AppBuild", "appBuildFromWire"],
  AppStart: ["AppStart", "appStartFromWire"],
  AppDomain: ["AppDomain", "appDomainFromWire"],
  Deploy: ["DeployInfo", "deployFromWire"],
  Function: ["FunctionInfo", "functionFromWire"],
  FunctionVersion: ["FunctionVersionInfo", "functionVersionFromWire"],
  Invocation: ["Invocation", "invocationFromWire"],
  InvocationError: ["InvocationError", "invocationErrorFromWire"],
  Schedule: ["ScheduleInfo", "scheduleFromWire"],
  ScheduleRun: ["ScheduleRunInfo", "scheduleRunFromWire"],
  // The variants of ScheduleTarget; also the `target` of schedule requests (targetToWire).
  SandboxExecTarget: ["SandboxExecTarget", "sandboxExecTargetFromWire"],
  FunctionTarget: ["FunctionTarget", "functionTargetFromWire"],
  // The operator routes (/v1/hosts, admin keys).
  Host: ["HostInfo", "hostFromWire"],
  HostCapacity: ["HostCapacity", "hostCapacityFromWire"],
  // GET /v1/{sandboxes,databases,apps,functions}/{id}/metrics.
  Metrics: ["SandboxMetrics", "metricsFromWire"],
  MetricPoint: ["MetricPoint", "metricPointFromWire"],
  InstanceMetrics: ["InstanceMetrics", "instanceMetricsFromWire"],
  // client.events, client.webhooks, client.keys.
  Event: ["EventInfo", "eventFromWire"],
  EventResource: ["EventResource", "eventResourceFromWire"],
  // Also what webhooks.create resolves with (with `secret`, which listings leave out).
  Webhook: ["Webhook", "webhookFromWire"],
  WebhookDelivery: ["WebhookDelivery", "webhookDeliveryFromWire"],
  Key: ["Key", "keyFromWire"],
  // client.members, client.audit.
  Member: ["Member", "memberFromWire"],
  AuditEntry: ["AuditEntry", "auditEntryFromWire"],
};

/** Fields of an interface that only the SDK has (not the schema's), and why. */
const SDK_ONLY = {
  SandboxMetrics: { raw: "every field as sent, including ones this SDK version does not know" },
};

/** Tagged unions (`oneOf` of `allOf: [variant, {type}]`) → [type alias in src/types.ts, its decoder]. */
const UNIONS = {
  ScheduleTarget: ["ScheduleTarget", "scheduleTargetFromWire"],
};

const REQUEST = "request body: built from options (typed by the generated schema, WireBody of src/wire.ts)";
const FRAME = "WebSocket frame";
/** Schemas the SDK does not model as a type, and why. */
const NOT_MODELLED = {
  CodeContextRequest: REQUEST,
  CodeRequest: REQUEST,
  CreateKeyRequest: REQUEST,
  CreatedKey: "CreatedKey = Key + secret (allOf; createdKeyFromWire)",
  List_Key: "unwrapped into arrays",
  CreateMemberRequest: REQUEST,
  UpdateMemberRequest: REQUEST,
  List_Member: "unwrapped into arrays",
  List_AuditEntry: "unwrapped into arrays / Paginator",
  Role: "a string union type (Role)",
  CreateWebhookRequest: REQUEST,
  List_Event: "unwrapped into arrays / Paginator",
  List_Webhook: "unwrapped into arrays / Paginator",
  List_WebhookDelivery: "unwrapped into arrays / Paginator",
  DeliveryState: "a string union type (DeliveryState)",
  CreateSandboxRequest: REQUEST,
  CreateTemplateRequest: REQUEST,
  ExecRequest: REQUEST,
  ForkRequest: REQUEST,
  MigrateRequest: REQUEST,
  MkdirRequest: REQUEST,
  FileUrlRequest: REQUEST,
  FileUrlMethod: "a string enum (the `method` of FileUrl and FileUrlRequest)",
  PatchSandboxRequest: REQUEST,
  RenameRequest: REQUEST,
  CreateVolumeRequest: REQUEST,
  PatchVolumeRequest: REQUEST,
  CreateDatabaseRequest: REQUEST,
  CreateBranchRequest: REQUEST,
  RestoreDatabaseRequest: REQUEST,
  QueryRequest: REQUEST,
  SqlRequest: "request body of the Neon-compatible /sql endpoint (Neon's drivers)",
  SqlQuery: "request body of the Neon-compatible /sql endpoint (Neon's drivers)",
  CreateAppRequest: REQUEST,
  UpdateAppRequest: REQUEST,
  CreateDeployRequest: REQUEST,
  RollbackRequest: REQUEST,
  CreateFunctionRequest: REQUEST,
  CreateVersionRequest: REQUEST,
  UpdateFunctionRequest: REQUEST,
  FunctionRollbackRequest: REQUEST,
  CreateScheduleRequest: REQUEST,
  UpdateScheduleRequest: REQUEST,
  WebhookResult: "answer to git hosts' webhooks, not to SDK calls",
  ErrorBody: "thrown as PandaStackError subclasses",
  ErrorEnvelope: "thrown as PandaStackError subclasses",
  ErrorCode: "PandaStackError.code is the string",
  List_FileInfo: "unwrapped into arrays / Paginator",
  List_Sandbox: "unwrapped into arrays / Paginator",
  List_Snapshot: "unwrapped into arrays / Paginator",
  List_Template: "unwrapped into arrays / Paginator",
  List_Volume: "unwrapped into arrays / Paginator",
  List_VolumeSnapshot: "unwrapped into arrays / Paginator",
  List_VolumeBackup: "unwrapped into arrays / Paginator",
  List_Database: "unwrapped into arrays / Paginator",
  List_App: "unwrapped into arrays / Paginator",
  List_Deploy: "unwrapped into arrays / Paginator",
  List_Function: "unwrapped into arrays / Paginator",
  List_FunctionVersion: "unwrapped into arrays / Paginator",
  List_Schedule: "unwrapped into arrays / Paginator",
  List_ScheduleRun: "unwrapped into arrays / Paginator",
  ForkResponse: "unwrapped into Sandbox objects (ForkResult)",
  List_Host: "unwrapped into arrays",
  Usage: "client.usage() returns the wire object (WireBody<\"Usage\">)",
  SandboxUsage: "part of the wire object client.usage() returns",
  VolumeUsage: "part of the wire object client.usage() returns",
  SnapshotUsage: "part of the wire object client.usage() returns",
  TemplateUsage: "part of the wire object client.usage() returns",
  StorageUsage: "part of the wire object client.usage() returns",
  MeteredUsage: "part of the wire object client.usage() returns",
  UsageFigures: "part of the wire object client.usage() returns",
  UsageGroup: "part of the wire object client.usage() returns",
  CodeResult: "decoded into Execution",
  CodeOutput: "decoded into Result",
  CodeError: "decoded into ExecutionError",
  ExecClientFrame: FRAME,
  ExecServerFrame: FRAME,
  ExecExitFrame: FRAME,
  ExecIdFrame: FRAME,
  ExecOutputFrame: FRAME,
  ExecStartFrame: FRAME,
  ExecStdinFrame: FRAME,
  PtyClientFrame: FRAME,
  PtyServerFrame: FRAME,
  StreamErrorFrame: FRAME,
  LogChunk: "SSE event of logs streams",
  LogEnd: "SSE event of logs streams",
  WatchFrame: "SSE event of files.watch, decoded into WatchEvent (an error thrown)",
  OnTimeout: "a string union type (OnTimeout)",
  OnHostLoss: "a string union type (OnHostLoss)",
  VolumeState: "a string union type (VolumeState)",
  SandboxState: "a string union type (SandboxState)",
  BackupState: "a string union type (BackupState)",
  DatabaseState: "a string union type (DatabaseState)",
  DeployState: "a string union type (DeployState)",
  DomainTls: "a string union type (DomainTls)",
  FunctionRuntime: "a string union type (FunctionRuntime)",
  InvocationStatus: "a string union type (InvocationStatus)",
  ConcurrencyPolicy: "a string union type (ConcurrencyPolicy)",
  RunState: "a string union type (RunState)",
  RunTrigger: "a string union type (RunTrigger)",
  HostState: "a string union type (HostState)",
};

/** Type aliases of src/types.ts that stand for a JSON string. */
const STRING_ALIASES = new Set([
  "SandboxState",
  "OnTimeout",
  "OnHostLoss",
  "VolumeState",
  "BackupState",
  "DatabaseState",
  "DeployState",
  "DomainTls",
  "FunctionRuntime",
  "InvocationStatus",
  "ConcurrencyPolicy",
  "RunState",
  "RunTrigger",
  "HostState",
  "DeliveryState",
  "Role",
]);

const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

function resolve(s) {
  return s.$ref ? SCHEMAS[s.$ref.split("/").pop()] : s;
}

/** [JSON type, may be null] of a schema property. */
function kind(prop) {
  let p = { ...prop };
  let nullable = false;
  for (const key of ["oneOf", "anyOf"]) {
    if (p[key]) {
      const alts = p[key].filter((a) => a.type !== "null");
      nullable ||= alts.length < p[key].length;
      p = alts.length ? resolve(alts[0]) : { type: "null" };
    }
  }
  if (p.allOf) p = resolve(p.allOf[0]);
  p = resolve(p);
  let t = p.type ?? (p.properties || p.additionalProperties ? "object" : "string");
  if (Array.isArray(t)) {
    nullable ||= t.includes("null");
    t = t.filter((x) => x !== "null")[0];
  }
  if (p.enum) t = "string";
  return [t, nullable];
}

/** The name of the schema a property is (`$ref`, also as the one non-null alternative of `oneOf`/`anyOf` or the first of `allOf`). */
function refName(prop) {
  let p = prop;
  for (const key of ["oneOf", "anyOf", "allOf"]) {
    const alts = (p[key] ?? []).filter((a) => a.type !== "null");
    if (alts.length) p = alts[0];
  }
  return p.$ref ? p.$ref.split("/").pop() : undefined;
}

/** The modelled schema (in PAIRS) an object property is, else undefined. */
function modelled(prop) {
  const name = refName(prop);
  return name in PAIRS && kind(prop)[0] === "object" ? name : undefined;
}

/** The union (in UNIONS) a property is, else undefined. */
function union(prop) {
  const name = refName(prop);
  return name in UNIONS ? name : undefined;
}

/** A wire object of a tagged union: its first variant's sample with the variant's `type`. */
function unionSample(name) {
  const [variant] = SCHEMAS[name].oneOf;
  const [ref, tag] = variant.allOf;
  return { ...sampleOf(ref.$ref.split("/").pop()), type: tag.properties.type.enum[0] };
}

function sample(name, t, i) {
  return {
    string: `${name}-value`,
    integer: 1000 + i,
    number: 1000.5 + i,
    boolean: true,
    array: [],
    object: { k: `${name}-v` },
  }[t];
}

/**
 * A wire object of the schema with every property set, each to a value of its own: a modelled
 * schema's property to a sample of that schema, a map's to `{ k: <a value of the map's value type> }`.
 */
function sampleOf(schemaName) {
  const props = resolve(SCHEMAS[schemaName]).properties ?? {};
  const out = {};
  Object.keys(props)
    .sort()
    .forEach((name, i) => {
      const [t] = kind(props[name]);
      const nested = modelled(props[name]);
      const u = union(props[name]);
      const extra = resolve(props[name]).additionalProperties;
      if (nested) out[name] = sampleOf(nested);
      else if (u) out[name] = unionSample(u);
      else if (t === "object" && extra && typeof extra === "object" && Object.keys(extra).length) out[name] = { k: sample(name, kind(extra)[0], i) };
      else out[name] = sample(name, t, i);
    });
  return out;
}

/** Marks a type of src/types.ts that is a generated schema: its value is the schema's name. */
const GENERATED = Symbol("generated schema");

/**
 * Properties of each exported interface of src/types.ts: name → { type text, optional }; for a
 * type alias of a generated schema (`Schemas["PortUrl"]`), name → { [GENERATED]: schema name }.
 */
function interfaces(path = TYPES_TS) {
  const src = ts.createSourceFile(path, readFileSync(path, "utf8"), ts.ScriptTarget.Latest, true);
  const out = {};
  for (const st of src.statements) {
    if (
      ts.isTypeAliasDeclaration(st) &&
      ts.isIndexedAccessTypeNode(st.type) &&
      st.type.objectType.getText(src) === "Schemas" &&
      ts.isLiteralTypeNode(st.type.indexType) &&
      ts.isStringLiteral(st.type.indexType.literal)
    ) {
      out[st.name.text] = { [GENERATED]: st.type.indexType.literal.text };
      continue;
    }
    if (!ts.isInterfaceDeclaration(st)) continue;
    const props = {};
    for (const m of st.members) {
      if (!ts.isPropertySignature(m) || !m.type) continue;
      props[m.name.getText(src)] = { type: m.type.getText(src), optional: !!m.questionToken };
    }
    out[st.name.text] = props;
  }
  return out;
}

/** Whether TypeScript type text `text` fits JSON type `t`. */
function fits(text, t) {
  const parts = text.split("|").map((p) => p.trim()).filter((p) => p !== "null" && p !== "undefined");
  return parts.every((p) => {
    if (p === "unknown") return true; // any JSON
    switch (t) {
      case "string":
        return p === "string" || /^"[^"]*"$/.test(p) || STRING_ALIASES.has(p);
      case "integer":
      case "number":
        return p === "number";
      case "boolean":
        return p === "boolean";
      case "array":
        return p.endsWith("[]") || p.startsWith("Array<");
      case "object":
        return p.startsWith("Record<") || p.startsWith("{");
      default:
        return false;
    }
  });
}

/** Every mismatch between schema `schemaName` and interface `iface` (decoded by `decoder`). */
export function check(schemaName, iface, decoder, ifaces = interfaces()) {
  const schema = resolve(SCHEMAS[schemaName]);
  const props = schema.properties ?? {};
  let fields = ifaces[iface];
  const where = `${schemaName} / ${iface}`;
  if (!fields) return [`${where}: no interface ${iface} in src/types.ts`];
  if (fields[GENERATED] !== undefined) {
    if (fields[GENERATED] !== schemaName) return [`${where}: ${iface} is the generated schema ${fields[GENERATED]}, not ${schemaName}`];
    // The schema itself: its fields, under their wire names (a snake_case one would not be the
    // SDK's camelCase, and fails below), each fitting by construction.
    const required = new Set(schema.required ?? []);
    fields = Object.fromEntries(Object.keys(props).map((n) => [n, { type: "unknown", optional: !required.has(n) }]));
  }
  const problems = [];
  const wire = new Set(Object.keys(props).map(camel));
  for (const name of Object.keys(props)) {
    if (!(camel(name) in fields)) problems.push(`${where}: the server sends \`${name}\`, the SDK type has no \`${camel(name)}\``);
  }
  for (const f of Object.keys(fields)) {
    if (!wire.has(f) && !(f in (SDK_ONLY[iface] ?? {}))) problems.push(`${where}: the SDK field \`${f}\` is not in the server's schema`);
  }
  const sampleWire = sampleOf(schemaName);
  const expected = { ...sampleWire };
  Object.keys(props)
    .sort()
    .forEach((name) => {
      const [t, nullable] = kind(props[name]);
      const f = fields[camel(name)];
      if (!f) return;
      const nested = modelled(props[name]);
      const u = union(props[name]);
      const alias = f.type.split("|").map((p) => p.trim()).filter((p) => p !== "null");
      if (nested && alias.length === 1 && alias[0] === PAIRS[nested][0]) {
        expected[name] = types[PAIRS[nested][1]](sampleWire[name]);
      } else if (u && alias.length === 1 && alias[0] === UNIONS[u][0]) {
        expected[name] = types[UNIONS[u][1]](sampleWire[name]);
      } else if (!fits(f.type, t)) {
        problems.push(`${where}: \`${name}\` is ${t} on the wire but \`${f.type}\` in the SDK`);
      }
      if (nullable && !f.optional && !/\bnull\b|^unknown$/.test(f.type)) {
        problems.push(`${where}: \`${name}\` may be null on the wire but \`${camel(name)}: ${f.type}\` does not admit null`);
      }
    });
  if (!problems.length && decoder) {
    const got = decoder(sampleWire);
    for (const [name, value] of Object.entries(expected)) {
      try {
        assert.deepEqual(got[camel(name)], value);
      } catch {
        problems.push(`${where}: ${decoder.name} read \`${name}\` as ${JSON.stringify(got[camel(name)])}, the wire had ${JSON.stringify(value)}`);
      }
    }
  }
  return problems;
}

for (const [schemaName, [alias, decoderName]] of Object.entries(UNIONS)) {
  test(`${schemaName} is the SDK's ${alias}, one variant per \`type\``, () => {
    const decoder = types[decoderName];
    assert.equal(typeof decoder, "function", `dist/types.js exports ${decoderName}`);
    for (const variant of SCHEMAS[schemaName].oneOf) {
      const [ref, tag] = variant.allOf;
      const name = ref.$ref.split("/").pop();
      const type = tag.properties.type.enum[0];
      assert.ok(name in PAIRS, `the variant ${name} is modelled`);
      const w = { ...sampleOf(name), type };
      assert.deepEqual(decoder(w), { type, ...types[PAIRS[name][1]](w) }, `${type}: read as ${PAIRS[name][0]} with its type`);
    }
    assert.equal(decoder({ type: "a-kind-to-come" }), null, "an unknown kind is null");
  });
}

for (const [schemaName, [iface, decoderName]] of Object.entries(PAIRS)) {
  test(`${schemaName} matches the SDK's ${iface}`, () => {
    const decoder = decoderName ? types[decoderName] : null;
    if (decoderName) assert.equal(typeof decoder, "function", `dist/types.js exports ${decoderName}`);
    const problems = check(schemaName, iface, decoder);
    assert.deepEqual(problems, []);
  });
}

test("every schema is modelled or explained", () => {
  const names = new Set(Object.keys(SCHEMAS));
  const known = new Set([...Object.keys(PAIRS), ...Object.keys(UNIONS), ...Object.keys(NOT_MODELLED)]);
  assert.deepEqual([...names].filter((n) => !known.has(n)).sort(), [], "schemas neither modelled nor explained");
  assert.deepEqual([...known].filter((n) => !names.has(n)).sort(), [], "names the document no longer has");
});

test("the check sees drift (it can fail)", () => {
  const ifaces = interfaces();
  const short = { ...ifaces, SnapshotInfo: { ...ifaces.SnapshotInfo } };
  delete short.SnapshotInfo.sizeBytes;
  assert.ok(check("Snapshot", "SnapshotInfo", null, short).some((p) => p.includes("`sizeBytes`")));
  const long = { ...ifaces, SnapshotInfo: { ...ifaces.SnapshotInfo, extra: { type: "string", optional: false } } };
  assert.ok(check("Snapshot", "SnapshotInfo", null, long).some((p) => p.includes("`extra`")));
  // A generated schema aliased under the wrong pair, and one whose decoder reads the wrong keys.
  assert.ok(check("PortUpdate", "PortUrl", null).some((p) => p.includes("is the generated schema PortUrl")));
  const swapped = (w) => ({ ...types.portUrlFromWire(w), url: w.token, token: w.url });
  assert.ok(check("PortUrl", "PortUrl", swapped).some((p) => p.includes("read `url`")));
  const notNull = { ...ifaces, SandboxInfo: { ...ifaces.SandboxInfo, expiresAt: { type: "string", optional: false } } };
  assert.ok(check("Sandbox", "SandboxInfo", null, notNull).some((p) => p.includes("may be null")));
  const crossed = (w) => types.appFromWire({ ...w, build: w.start, start: w.build });
  assert.ok(check("App", "AppInfo", crossed).some((p) => p.includes("read `build`")), "a nested object from the wrong key");
  const untyped = { ...ifaces, AppInfo: { ...ifaces.AppInfo, git: { type: "string", optional: false } } };
  assert.ok(check("App", "AppInfo", null, untyped).some((p) => p.includes("`git` is object")));
  const untagged = (w) => ({ ...types.scheduleFromWire(w), target: types.sandboxExecTargetFromWire(w.target) });
  assert.ok(check("Schedule", "ScheduleInfo", untagged).some((p) => p.includes("read `target`")), "a union without its type");
});
