/**
 * The wire side of the SDK, from the server's contract: `generated/openapi.ts` is generated from
 * `crates/pandastack-api/openapi.json` (`npm run gen`; `npm run gen:check` fails when it is
 * stale). The public types of `types.ts` are camelCase and normalized (a missing field gets a
 * neutral value), so most cannot be the schemas themselves; this module ties them to the
 * schemas at compile time instead:
 *
 * - {@link WireOf} types the objects the `…FromWire` converters read: only the schema's field
 *   names may be read (a field renamed or removed in the contract fails the build), each value
 *   `unknown` until the converter checks it (a newer or older server must not break the SDK).
 * - {@link WireBody} types the request bodies the resource modules send.
 * - `_Contract` below fails the build when a public type and its schema disagree: a field the
 *   schema has and the public type lacks (or the reverse), or a scalar field whose type differs.
 *
 * Not exported from the package's entry point.
 *
 * @module
 */
import type { components } from "./generated/openapi.js";
import type {
  AppBuild,
  AppDomain,
  AppInfo,
  AuditEntry,
  DatabaseExtension,
  DatabaseExtensions,
  DatabaseInfo,
  DeployInfo,
  EventInfo,
  EventResource,
  ExecResult,
  Execution,
  FileInfo,
  FunctionInfo,
  FunctionVersionInfo,
  HostCapacity,
  HostInfo,
  InstanceMetrics,
  Invocation,
  Key,
  Member,
  MetricPoint,
  QueryField,
  QueryResult,
  Result,
  SandboxExecTarget,
  SandboxInfo,
  SandboxMetrics,
  ScheduleInfo,
  ScheduleRunInfo,
  SnapshotInfo,
  TemplateInfo,
  VolumeAttachment,
  VolumeBackupInfo,
  VolumeInfo,
  VolumeMount,
  VolumeSnapshotInfo,
  Webhook,
  WebhookDelivery,
} from "./types.js";

/** The contract's schemas by name. */
export type Schemas = components["schemas"];

/** A wire object of schema `N` as a converter reads it: the schema's fields, each unchecked. */
export type WireOf<N extends keyof Schemas> = { [K in keyof Schemas[N]]?: unknown };

/** A request body of schema `N` (an object literal of this type may only name the schema's fields). */
export type WireBody<N extends keyof Schemas> = Schemas[N];

/** `memory_mb` → `memoryMb`. */
type Camel<S extends string> = S extends `${infer H}_${infer T}` ? `${H}${Capitalize<Camel<T>>}` : S;

/** A schema's fields under their camelCase names, `null`/`undefined` left out (the SDK normalizes those). */
type Camelize<W> = { [K in keyof W & string as Camel<K>]-?: Exclude<W[K], null | undefined> };

type Equal<A, B> = (<X>() => X extends A ? 1 : 2) extends <X>() => X extends B ? 1 : 2 ? true : false;

/** Data fields of a public type (a class's methods and getters listed in `Skip` left out). */
type Fields<P, Skip extends PropertyKey = never> = Exclude<
  { [K in keyof P]-?: P[K] extends (...args: never[]) => unknown ? never : K }[keyof P],
  Skip
>;

/**
 * What differs between public type `P` and schema `N`: field names one has and the other lacks,
 * and fields of a scalar type (string, number, boolean, a literal union) that differ. `never`
 * when they agree. `Narrowed` lists fields the SDK deliberately types narrower than the schema.
 */
type Drift<P, N extends keyof Schemas, Skip extends PropertyKey = never, Narrowed extends PropertyKey = never> =
  | Exclude<Fields<P, Skip>, keyof Camelize<Schemas[N]>>
  | Exclude<keyof Camelize<Schemas[N]>, Fields<P, Skip>>
  | {
      [C in Fields<P, Skip> & keyof Camelize<Schemas[N]>]: Camelize<Schemas[N]>[C] extends string | number | boolean
        ? C extends Narrowed
          ? Exclude<P[C], null | undefined> extends Camelize<Schemas[N]>[C]
            ? never
            : C
          : Equal<Exclude<P[C], null | undefined>, Camelize<Schemas[N]>[C]> extends true
            ? never
            : C
        : never;
    }[Fields<P, Skip> & keyof Camelize<Schemas[N]>];

/** Fails to compile with the drifting field names when `D` is not `never`. */
type Agree<D extends never> = D;

/** Every public wire-backed type against its schema. @internal */
export type _Contract = [
  Agree<Drift<SandboxInfo, "Sandbox">>,
  Agree<Drift<VolumeMount, "SandboxVolume">>,
  Agree<Drift<VolumeAttachment, "VolumeAttachment">>,
  Agree<Drift<VolumeInfo, "Volume">>,
  Agree<Drift<VolumeSnapshotInfo, "VolumeSnapshot">>,
  Agree<Drift<VolumeBackupInfo, "VolumeBackup">>,
  Agree<Drift<DatabaseInfo, "Database">>,
  Agree<Drift<QueryField, "QueryField">>,
  Agree<Drift<QueryResult, "QueryResponse">>,
  Agree<Drift<DatabaseExtension, "DatabaseExtension">>,
  Agree<Drift<DatabaseExtensions, "DatabaseExtensions">>,
  Agree<Drift<AppBuild, "AppBuild">>,
  Agree<Drift<AppDomain, "AppDomain">>,
  Agree<Drift<AppInfo, "App">>,
  Agree<Drift<DeployInfo, "Deploy">>,
  Agree<Drift<FunctionInfo, "Function">>,
  Agree<Drift<FunctionVersionInfo, "FunctionVersion">>,
  Agree<Drift<Invocation, "Invocation">>,
  Agree<Drift<SandboxExecTarget, "SandboxExecTarget">>,
  Agree<Drift<ScheduleInfo, "Schedule">>,
  Agree<Drift<ScheduleRunInfo, "ScheduleRun">>,
  Agree<Drift<HostCapacity, "HostCapacity">>,
  Agree<Drift<HostInfo, "Host">>,
  Agree<Drift<ExecResult, "ExecResult">>,
  Agree<Drift<SnapshotInfo, "Snapshot">>,
  Agree<Drift<TemplateInfo, "Template">>,
  Agree<Drift<MetricPoint, "MetricPoint">>,
  Agree<Drift<EventResource, "EventResource">>,
  Agree<Drift<EventInfo, "Event">>,
  Agree<Drift<Webhook, "Webhook">>,
  Agree<Drift<WebhookDelivery, "WebhookDelivery">>,
  Agree<Drift<Key, "Key">>,
  Agree<Drift<Member, "Member">>,
  Agree<Drift<AuditEntry, "AuditEntry">>,
  Agree<Drift<InstanceMetrics, "InstanceMetrics">>,
  // `raw` (every field as sent) is the SDK's.
  Agree<Drift<SandboxMetrics, "Metrics", "raw">>,
  // `type`: the SDK narrows the schema's string to the four kinds the server sends.
  Agree<Drift<FileInfo, "FileInfo", never, "type">>,
  // `pngBytes()` is the SDK's.
  Agree<Drift<Result, "CodeOutput", "pngBytes">>,
  // `text` (the last result's) is the SDK's.
  Agree<Drift<Execution, "CodeResult", "text">>,
];
