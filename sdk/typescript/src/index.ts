/**
 * `@pandastack/sdk`: the TypeScript client of PandaStack, the self-hosted microVM sandbox
 * platform.
 *
 * ```ts
 * import { PandaStack } from "@pandastack/sdk";
 * const client = new PandaStack();                       // PANDASTACK_API_KEY, PANDASTACK_BASE_URL
 * await using sandbox = await client.sandboxes.create({ template: "base", ttlSeconds: 600 });
 * const r = await sandbox.exec("python3 -c 'print(2 ** 10)'", { timeoutSeconds: 30 });
 * ```
 */

import "./dispose.js";

export {
  PandaStack,
  Sandboxes,
  Snapshots,
  Templates,
  isBuilding,
  DEFAULT_BASE_URL,
  DEFAULT_MAX_RETRIES,
  DEFAULT_TIMEOUT_MS,
  type CreateSandboxOptions,
  type BuildTemplateOptions,
  type ListSandboxesOptions,
  type PandaStackOptions,
  type TarballSource,
  type TemplateLogsOptions,
  type UsageOptions,
} from "./client.js";
export {
  Sandbox,
  DEFAULT_EXEC_TIMEOUT_SECONDS,
  type CallOptions,
  type CodeContextOptions,
  type CodeLanguage,
  type ExecOptions,
  type ExecRunOptions,
  type ForkOptions,
  type ForkResult,
  type MetricsOptions,
  type RunCodeOptions,
} from "./sandbox.js";
export {
  Volumes,
  type BackupOptions,
  type CreateVolumeOptions,
  type ListVolumesOptions,
  type WaitBackupOptions,
} from "./volumes.js";
export {
  Databases,
  DATABASE_CREATE_TIMEOUT_MS,
  type BranchDatabaseOptions,
  type CreateDatabaseOptions,
  type ListDatabasesOptions,
  type QueryOptions,
  type RestoreDatabaseOptions,
} from "./databases.js";
export {
  Apps,
  isDeployActive,
  type AppConfigOptions,
  type AppLogsOptions,
  type CreateAppOptions,
  type DeployDirectoryOptions,
  type DeployOptions,
  type ListAppsOptions,
  type RollbackOptions,
  type UpdateAppOptions,
  type WaitDeployOptions,
} from "./apps.js";
export {
  Functions,
  INVOKE_TIMEOUT_MS,
  isVersionBuilding,
  type CreateFunctionOptions,
  type CreateVersionOptions,
  type FunctionLimitOptions,
  type FunctionSourceOptions,
  type ListFunctionsOptions,
  type RollbackFunctionOptions,
  type SubmitOptions,
  type UpdateFunctionOptions,
  type WaitVersionOptions,
} from "./functions.js";
export {
  Schedules,
  type CreateScheduleOptions,
  type ListSchedulesOptions,
  type ScheduleConfigOptions,
  type ScheduleTargetInput,
  type UpdateScheduleOptions,
} from "./schedules.js";
export { Hosts } from "./hosts.js";
export {
  Events,
  EVENT_STREAM_MAX_FAILURES,
  type EventFilterOptions,
  type ListEventsOptions,
  type StreamEventsOptions,
} from "./events.js";
export { Webhooks, type CreateWebhookOptions, type ListWebhooksOptions } from "./webhooks.js";
export { Keys, type CreateKeyOptions } from "./keys.js";
export { Members, type CreateMemberOptions, type UpdateMemberOptions } from "./members.js";
export { Audit, type ListAuditOptions } from "./audit.js";
export type { LogCallback } from "./follow.js";
export {
  Git,
  GIT_DEFAULT_AUTHOR,
  GIT_DEFAULT_USERNAME,
  GIT_NETWORK_TIMEOUT_SECONDS,
  type GitAuthOptions,
  type GitBranches,
  type GitCloneOptions,
  type GitCommitOptions,
  type GitCreateBranchOptions,
  type GitFileStatus,
  type GitPullOptions,
  type GitPushOptions,
  type GitStatus,
} from "./git.js";
export { Filesystem, type FileCallOptions, type FileContent, type WriteInfo } from "./filesystem.js";
export { Paginator, type Page } from "./pagination.js";
export {
  PandaStackError,
  AuthenticationError,
  PermissionDeniedError,
  NotFoundError,
  DatabaseNotFoundError,
  AppNotFoundError,
  ConflictError,
  VolumeBusyError,
  QuotaExceededError,
  QueryError,
  InvalidArgumentError,
  LimitReachedError,
  RateLimitError,
  ServerError,
  APIConnectionError,
  RequestTimeoutError,
  CommandTimeoutError,
  CommandExitError,
  TemplateBuildError,
  TemplateBuildTimeoutError,
  VolumeBackupError,
  VolumeBackupTimeoutError,
  DeployTimeoutError,
  FunctionVersionTimeoutError,
  GitError,
  GitAuthError,
  GitConflictError,
  type GitErrorOptions,
  type PandaStackErrorOptions,
} from "./errors.js";
export { Execution, Result, ACCESS_TOKEN_HEADER } from "./types.js";
export type {
  AppBuild,
  AppDomain,
  AppGit,
  AppInfo,
  AppStart,
  AuditEntry,
  BackupState,
  CodeContext,
  ConcurrencyPolicy,
  CreatedKey,
  DatabaseExtension,
  DatabaseExtensions,
  DatabaseInfo,
  DatabaseState,
  DeliveryState,
  DeployInfo,
  DeployState,
  DomainTls,
  EventInfo,
  EventResource,
  ExecEvent,
  ExecResult,
  ExecutionError,
  FileInfo,
  FileUrl,
  WatchEvent,
  FunctionInfo,
  FunctionRuntime,
  FunctionTarget,
  FunctionVersionInfo,
  HostCapacity,
  HostInfo,
  HostState,
  Invocation,
  InvocationError,
  InvocationStatus,
  InstanceMetrics,
  Key,
  Member,
  MetricPoint,
  OnHostLoss,
  VolumeState,
  OnTimeout,
  PortUpdate,
  PortUrl,
  QueryField,
  QueryResult,
  Role,
  RunState,
  RunTrigger,
  SandboxExecTarget,
  SandboxInfo,
  SandboxMetrics,
  SandboxState,
  ScheduleInfo,
  ScheduleRunInfo,
  ScheduleTarget,
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
export type { FetchLike } from "./http.js";
export { VERSION } from "./version.js";
