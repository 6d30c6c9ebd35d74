/**
 * Git inside a sandbox (`sandbox.git`): clone, status, add, commit, push, pull and branches,
 * each a `git` command run over exec with an argv (no shell parses what the caller gave).
 *
 * A token never goes on a command line nor to a file: it reaches git in the environment of that
 * one command,
 *
 * ```text
 * GIT_CONFIG_COUNT=1
 * GIT_CONFIG_KEY_0=http.extraHeader
 * GIT_CONFIG_VALUE_0=Authorization: Basic base64(username:token)
 * ```
 *
 * which git (2.31 or later) reads as configuration of that process and the processes it starts,
 * and nothing writes down. `GIT_TERMINAL_PROMPT=0` is always set, so a missing or refused
 * credential fails at once instead of waiting for a prompt no one answers.
 */

import { GitAuthError, GitConflictError, GitError, InvalidArgumentError } from "./errors.js";
import type { ExecRunOptions } from "./sandbox.js";
import type { ExecResult } from "./types.js";

/** The user name sent with a token when the call names none (what GitHub and most hosts accept). */
export const GIT_DEFAULT_USERNAME = "x-access-token";
/** Who commits (and merges) when neither the call nor the repository's configuration says. */
export const GIT_DEFAULT_AUTHOR = { name: "PandaStack", email: "sandbox@pandastack.local" } as const;
/** Command timeout (seconds) of clone, push and pull when the call gives none. */
export const GIT_NETWORK_TIMEOUT_SECONDS = 300;

/** Environment of every git command: no prompts, and git's messages in English (which the errors read). */
const BASE_ENV: Readonly<Record<string, string>> = { GIT_TERMINAL_PROMPT: "0", LC_ALL: "C.UTF-8", LANGUAGE: "" };

/**
 * Runs `git "$@"`, adding `-c user.name=…` / `-c user.email=…` with the default identity for what
 * the configuration lacks (commits and merges need one). The script is a constant: the git
 * arguments are its positional parameters, never part of its text.
 */
const IDENTITY_SCRIPT =
  'git config user.name >/dev/null || set -- -c "user.name=$PANDASTACK_GIT_NAME" "$@"; ' +
  'git config user.email >/dev/null || set -- -c "user.email=$PANDASTACK_GIT_EMAIL" "$@"; ' +
  'exec git "$@"';

const AUTH_FAILED =
  /Authentication failed|could not read (?:Username|Password)|terminal prompts disabled|Invalid username or password|Permission denied \(publickey|(?:returned error|HTTP|status):? 40[13]\b/i;
const CONFLICT = /^CONFLICT \(|^Automatic merge failed/m;
/** The two-letter `XY` codes of an unmerged path (a conflict). */
const UNMERGED = new Set(["DD", "AU", "UD", "UA", "DU", "AA", "UU"]);

const STATUS_ARGS = ["status", "--porcelain=v2", "--branch", "-z"];
const BRANCHES_ARGS = ["for-each-ref", "--format=%(HEAD)%(refname)", "refs/heads", "refs/remotes"];
const CONFLICTS_ARGS = ["diff", "--name-only", "--diff-filter=U", "-z"];

/**
 * A changed path of a git working tree ({@link GitStatus.files}). `index` and `worktree` are
 * git's one-letter codes for the staged and the unstaged side (`git status --porcelain=v2`):
 * `"."` unchanged, `"M"` modified, `"A"` added, `"D"` deleted, `"R"` renamed, `"C"` copied,
 * `"T"` type changed, `"U"` unmerged; an untracked file is `"?"` on both sides.
 */
export interface GitFileStatus {
  path: string;
  index: string;
  worktree: string;
  /** The path a rename or copy came from, else `null`. */
  origPath: string | null;
  /** The index holds a change of this path (what the next commit takes). */
  staged: boolean;
  untracked: boolean;
  /** The path is unmerged: a merge stopped on it. */
  conflicted: boolean;
}

/** What `sandbox.git.status(path)` found (from `git status --porcelain=v2 --branch`). */
export interface GitStatus {
  /** The current branch; `null` when HEAD is detached (a branch without commits has its name). */
  branch: string | null;
  /** The current commit; `null` before the first. */
  commit: string | null;
  /** The branch the current one tracks (`"origin/main"`), else `null`. */
  upstream: string | null;
  /** Commits the branch has that the upstream lacks, as of the last fetch (0 without one). */
  ahead: number;
  /** Commits the upstream has that the branch lacks, as of the last fetch (0 without one). */
  behind: number;
  files: GitFileStatus[];
  /** No staged, unstaged or untracked change (ignored files aside). */
  clean: boolean;
  /** The unmerged paths (a merge stopped on them). */
  conflicts: string[];
}

/** The branches of a repository (`sandbox.git.branches(path)`). */
export interface GitBranches {
  /** The current branch; `null` when HEAD is detached or its branch has no commit yet. */
  current: string | null;
  /** Local branches (`"main"`). */
  local: string[];
  /** Remote-tracking branches (`"origin/main"`), as of the last fetch. */
  remote: string[];
}

/** Credentials of a command that talks to an HTTP(S) remote. */
export interface GitAuthOptions {
  /** A token (or password) for the remote, given to git for this command only. */
  token?: string;
  /** The user name sent with `token` (default `x-access-token`). */
  username?: string;
}

/** Options of {@link Git.clone}. */
export interface GitCloneOptions extends GitAuthOptions {
  /** The repository's URL. Put credentials in `token`, not here (a URL's are written to `.git/config`). */
  url: string;
  /** Where to clone to: an absolute guest path that does not exist or is empty. */
  path: string;
  /** Check out this branch (or tag) instead of the remote's default. */
  branch?: string;
  /** A shallow clone of this many commits. */
  depth?: number;
  /** Bound on the clone in seconds (default 300). */
  timeoutSeconds?: number;
}

/** Options of {@link Git.commit}. */
export interface GitCommitOptions {
  /** Author and committer name of this commit (`git -c user.name=…`). */
  authorName?: string;
  /** Author and committer email of this commit (`git -c user.email=…`). */
  authorEmail?: string;
  /** Commit even when nothing is staged. */
  allowEmpty?: boolean;
}

/** Options of {@link Git.push}. */
export interface GitPushOptions extends GitAuthOptions {
  /** Default `origin`. */
  remote?: string;
  /** The branch to push (default: the current one, to the remote branch of the same name). */
  branch?: string;
  /** Make the remote branch the local one's upstream. */
  setUpstream?: boolean;
  /** Overwrite the remote branch. */
  force?: boolean;
  /** Bound on the push in seconds (default 300). */
  timeoutSeconds?: number;
}

/** Options of {@link Git.pull}. */
export interface GitPullOptions extends GitAuthOptions {
  /** Default `origin`. */
  remote?: string;
  /** The remote branch to merge (default: the current branch's upstream). */
  branch?: string;
  /** Bound on the pull in seconds (default 300). */
  timeoutSeconds?: number;
}

/** Options of {@link Git.createBranch}. */
export interface GitCreateBranchOptions {
  /** A branch, tag or commit to start from (default: the current commit). */
  startPoint?: string;
  /** Switch to the new branch (default `true`). */
  checkout?: boolean;
}

/** What runs the commands: the sandbox's exec. @internal */
export interface GitExec {
  exec(cmd: readonly string[], opts: ExecRunOptions): Promise<ExecResult>;
}

/** A git command ready for exec: its argv, environment, and the secrets to keep out of messages. @internal */
export interface GitCommand {
  argv: string[];
  env: Record<string, string>;
  secrets: string[];
}

function invalid(message: string): InvalidArgumentError {
  return new InvalidArgumentError(message, { code: "invalid_argument" });
}

/** A branch, remote or start point as its own argv element: not empty, not an option. @internal */
export function gitCheckName(kind: string, value: unknown): string {
  if (typeof value !== "string" || value === "") throw invalid(`${kind} must be a non-empty string`);
  if (value.startsWith("-") || value.includes("\0")) throw invalid(`${kind} ${JSON.stringify(value)} is not a valid name`);
  return value;
}

function base64(text: string): string {
  let bin = "";
  for (const b of new TextEncoder().encode(text)) bin += String.fromCharCode(b);
  return btoa(bin);
}

/**
 * The argv and environment of `git args…`: with `token` the environment carries the
 * `Authorization` header (see the module's doc); with `identity` the command runs under the
 * default-identity script. @internal
 */
export function gitCommand(args: readonly string[], auth: GitAuthOptions = {}, identity = false): GitCommand {
  const env: Record<string, string> = { ...BASE_ENV };
  let secrets: string[] = [];
  if (auth.token !== undefined) {
    if (typeof auth.token !== "string" || auth.token === "") throw invalid("token must be a non-empty string");
    const user = auth.username ?? GIT_DEFAULT_USERNAME;
    if (user === "" || user.includes(":")) throw invalid("username must be non-empty and without ':'");
    if (/[\r\n\0]/.test(auth.token + user)) throw invalid("token and username must be one line");
    const basic = base64(`${user}:${auth.token}`);
    env.GIT_CONFIG_COUNT = "1";
    env.GIT_CONFIG_KEY_0 = "http.extraHeader";
    env.GIT_CONFIG_VALUE_0 = `Authorization: Basic ${basic}`;
    secrets = [auth.token, basic];
  } else if (auth.username !== undefined) {
    throw invalid("username needs a token");
  }
  if (identity) {
    env.PANDASTACK_GIT_NAME = GIT_DEFAULT_AUTHOR.name;
    env.PANDASTACK_GIT_EMAIL = GIT_DEFAULT_AUTHOR.email;
    return { argv: ["sh", "-c", IDENTITY_SCRIPT, "git", ...args], env, secrets };
  }
  return { argv: ["git", ...args], env, secrets };
}

function redact(text: string, secrets: readonly string[]): string {
  for (const s of secrets) if (s) text = text.split(s).join("***");
  return text;
}

function detail(result: ExecResult, secrets: readonly string[]): string {
  let text = result.stderr.trim() || result.stdout.trim();
  if (text.length > 4000) text = "…" + text.slice(-4000);
  return redact(text, secrets);
}

/** `git <subcommand>` of `args` (past the `-c key=value` pairs). */
function what(args: readonly string[]): string {
  let i = 0;
  while (i + 1 < args.length && args[i] === "-c") i += 2;
  return i < args.length ? `git ${args[i]}` : "git";
}

/**
 * The error for a git command that did not succeed: {@link GitAuthError} when git says the
 * remote refused or wanted credentials, {@link GitError} with git's message otherwise. @internal
 */
export function gitFailure(args: readonly string[], result: ExecResult, secrets: readonly string[] = []): GitError {
  const command = ["git", ...args];
  const name = what(args);
  if (result.timedOut) {
    return new GitError(`${name} timed out after ${Math.round(result.durationMs / 1000)} s`, { code: "git_timeout", command, result });
  }
  if (result.exitCode === 127 && !result.stdout && (!result.stderr || /not found|No such file/.test(result.stderr))) {
    return new GitError(`${name}: git is not installed in this sandbox (the \`app\` template has it)`, {
      code: "git_not_found",
      command,
      result,
    });
  }
  const text = detail(result, secrets) || `exit code ${result.exitCode}`;
  if (AUTH_FAILED.test(result.stderr)) return new GitAuthError(`${name}: authentication failed: ${text}`, { command, result });
  return new GitError(`${name} failed: ${text}`, { command, result });
}

/** Whether a failed pull stopped on merge conflicts. @internal */
export function gitIsConflict(result: ExecResult): boolean {
  return CONFLICT.test(result.stdout) || CONFLICT.test(result.stderr);
}

function nulList(out: string): string[] {
  return out.split("\0").filter((p) => p !== "");
}

function fileStatus(path: string, xy: string, origPath: string | null = null): GitFileStatus {
  const [index, worktree] = [xy[0] ?? ".", xy[1] ?? "."];
  const conflicted = UNMERGED.has(xy);
  return {
    path,
    index,
    worktree,
    origPath,
    staged: index !== "." && index !== "?" && !conflicted,
    untracked: index === "?",
    conflicted,
  };
}

/**
 * Parses `git status --porcelain=v2 --branch -z`: `# branch.*` headers, then one record per
 * changed path (`1` changed, `2` renamed or copied: its original path is the next record, `u`
 * unmerged, `?` untracked, `!` ignored: left out). Unknown records are skipped. @internal
 */
export function parseGitStatus(out: string): GitStatus {
  const st: GitStatus = { branch: null, commit: null, upstream: null, ahead: 0, behind: 0, files: [], clean: true, conflicts: [] };
  const recs = out.split("\0");
  for (let i = 0; i < recs.length; ) {
    const rec = recs[i++]!;
    if (rec.startsWith("# ")) {
      const sp = rec.indexOf(" ", 2);
      const key = sp < 0 ? rec.slice(2) : rec.slice(2, sp);
      const val = sp < 0 ? "" : rec.slice(sp + 1);
      if (key === "branch.oid") st.commit = val === "(initial)" ? null : val;
      else if (key === "branch.head") st.branch = val === "(detached)" ? null : val;
      else if (key === "branch.upstream") st.upstream = val;
      else if (key === "branch.ab") {
        const m = /^\+(\d+) -(\d+)$/.exec(val);
        if (m) [st.ahead, st.behind] = [Number(m[1]), Number(m[2])];
      }
      continue;
    }
    const kind = rec[0];
    const f = rec.split(" ");
    if (kind === "1" && f.length >= 9) {
      st.files.push(fileStatus(f.slice(8).join(" "), f[1]!));
    } else if (kind === "2" && f.length >= 10) {
      const orig = i < recs.length ? recs[i]! : null;
      i++;
      st.files.push(fileStatus(f.slice(9).join(" "), f[1]!, orig));
    } else if (kind === "u" && f.length >= 11) {
      st.files.push(fileStatus(f.slice(10).join(" "), f[1]!));
    } else if (rec.startsWith("? ")) {
      st.files.push(fileStatus(rec.slice(2), "??"));
    }
  }
  st.clean = st.files.length === 0;
  st.conflicts = st.files.filter((f) => f.conflicted).map((f) => f.path);
  return st;
}

/** Parses `git for-each-ref --format=%(HEAD)%(refname) refs/heads refs/remotes`. @internal */
export function parseGitBranches(out: string): GitBranches {
  const br: GitBranches = { current: null, local: [], remote: [] };
  for (const line of out.split("\n")) {
    if (line.length < 2) continue;
    const ref = line.slice(1);
    if (ref.startsWith("refs/heads/")) {
      const name = ref.slice("refs/heads/".length);
      br.local.push(name);
      if (line[0] === "*") br.current = name;
    } else if (ref.startsWith("refs/remotes/") && !ref.endsWith("/HEAD")) {
      br.remote.push(ref.slice("refs/remotes/".length));
    }
  }
  return br;
}

/**
 * Git in a sandbox (`sandbox.git`): each method runs `git` inside the sandbox (the template needs
 * git 2.31 or later, as `app` has) with an argv, never a shell line. `path` is the repository's
 * working tree, an absolute guest path.
 *
 * Methods that talk to a remote take `token` (and `username`, default `x-access-token`) for
 * HTTP(S) remotes: git gets them as an `Authorization: Basic` header through the environment of
 * that one command, so they appear in no argv, process list, `.git/config` or credential store.
 * Git never prompts (`GIT_TERMINAL_PROMPT=0`).
 *
 * A failing command throws {@link GitError} with git's message; {@link GitAuthError} when the
 * remote refused or wanted credentials; {@link GitConflictError} when a pull stopped on conflicts.
 */
export class Git {
  /** @internal */
  constructor(private readonly sandbox: GitExec) {}

  private async exec(
    path: string | undefined,
    args: readonly string[],
    auth: GitAuthOptions = {},
    identity = false,
    timeoutSeconds?: number,
  ): Promise<{ result: ExecResult; secrets: string[] }> {
    const cmd = gitCommand(args, auth, identity);
    const opts: ExecRunOptions = { env: cmd.env };
    if (path !== undefined) opts.cwd = path;
    if (timeoutSeconds !== undefined) opts.timeoutSeconds = timeoutSeconds;
    return { result: await this.sandbox.exec(cmd.argv, opts), secrets: cmd.secrets };
  }

  private async run(
    path: string | undefined,
    args: readonly string[],
    auth: GitAuthOptions = {},
    identity = false,
    timeoutSeconds?: number,
  ): Promise<ExecResult> {
    const { result, secrets } = await this.exec(path, args, auth, identity, timeoutSeconds);
    if (result.exitCode !== 0 || result.timedOut) throw gitFailure(args, result, secrets);
    return result;
  }

  /**
   * Clones `url` into `path`. `branch` checks out that branch (or tag) instead of the remote's
   * default; `depth` makes a shallow clone. `token` / `username` authenticate an HTTP(S) remote
   * for this command only.
   */
  async clone(opts: GitCloneOptions): Promise<void> {
    const { url, path } = opts;
    if (typeof url !== "string" || url === "") throw invalid("url must be a non-empty string");
    if (typeof path !== "string" || path === "") throw invalid("path must be a non-empty string");
    const args = ["clone"];
    if (opts.branch !== undefined) args.push("--branch", gitCheckName("branch", opts.branch));
    if (opts.depth !== undefined) {
      if (!Number.isInteger(opts.depth) || opts.depth < 1) throw invalid("depth must be an integer of at least 1");
      args.push("--depth", String(opts.depth));
    }
    args.push("--", url, path);
    await this.run(undefined, args, opts, false, opts.timeoutSeconds ?? GIT_NETWORK_TIMEOUT_SECONDS);
  }

  /**
   * The working tree's state: current branch, upstream, ahead/behind counts and the changed paths
   * with their index and work-tree status (`git status --porcelain=v2 --branch`); an untracked
   * directory is listed as the directory.
   */
  async status(path: string): Promise<GitStatus> {
    const result = await this.run(path, STATUS_ARGS);
    if (result.truncated) {
      throw new GitError("git status: the output exceeded the exec output limit (too many changed paths)", {
        command: ["git", ...STATUS_ARGS],
        result,
      });
    }
    return parseGitStatus(result.stdout);
  }

  /**
   * Stages `files` (paths relative to `path`; a string is one path), or every change of the
   * working tree — new, modified and deleted files — when `files` is not given.
   */
  async add(path: string, files?: string | readonly string[]): Promise<void> {
    if (files === undefined) {
      await this.run(path, ["add", "--all"]);
      return;
    }
    const paths = typeof files === "string" ? [files] : [...files];
    if (paths.length > 0) await this.run(path, ["add", "--", ...paths]);
  }

  /**
   * Commits what is staged and resolves with the new commit's sha (40 hex digits). `authorName` /
   * `authorEmail` set author and committer of this commit; what they leave unset comes from the
   * repository's configuration, else `PandaStack <sandbox@pandastack.local>`. Nothing staged
   * throws {@link GitError} unless `allowEmpty`.
   */
  async commit(path: string, message: string, opts: GitCommitOptions = {}): Promise<string> {
    if (typeof message !== "string" || message.trim() === "") throw invalid("message must be a non-empty string");
    const args: string[] = [];
    if (opts.authorName !== undefined) args.push("-c", `user.name=${opts.authorName}`);
    if (opts.authorEmail !== undefined) args.push("-c", `user.email=${opts.authorEmail}`);
    args.push("commit", "-m", message);
    if (opts.allowEmpty) args.push("--allow-empty");
    await this.run(path, args, {}, true);
    return (await this.run(path, ["rev-parse", "HEAD"])).stdout.trim();
  }

  /**
   * Pushes `branch` (default: the current branch, to the remote branch of the same name) to
   * `remote` (default `origin`). A rejected push (the remote has commits this branch lacks: pull
   * first) throws {@link GitError}; refused credentials {@link GitAuthError}.
   */
  async push(path: string, opts: GitPushOptions = {}): Promise<void> {
    const args = ["push"];
    if (opts.setUpstream) args.push("--set-upstream");
    if (opts.force) args.push("--force");
    args.push(gitCheckName("remote", opts.remote ?? "origin"), opts.branch ? gitCheckName("branch", opts.branch) : "HEAD");
    await this.run(path, args, opts, false, opts.timeoutSeconds ?? GIT_NETWORK_TIMEOUT_SECONDS);
  }

  /**
   * Fetches `branch` from `remote` (default: the current branch's upstream) and merges it into the
   * current branch (a merge, never a rebase; a merge commit gets the repository's identity, else
   * `PandaStack <sandbox@pandastack.local>`). Conflicts throw {@link GitConflictError} naming the
   * files, and leave the working tree mid-merge (resolve, `add`, `commit`; or `git merge --abort`);
   * refused credentials throw {@link GitAuthError}.
   */
  async pull(path: string, opts: GitPullOptions = {}): Promise<void> {
    const args = ["pull", "--no-rebase", "--no-edit", gitCheckName("remote", opts.remote ?? "origin")];
    if (opts.branch) args.push(gitCheckName("branch", opts.branch));
    const { result, secrets } = await this.exec(path, args, opts, true, opts.timeoutSeconds ?? GIT_NETWORK_TIMEOUT_SECONDS);
    if (result.exitCode === 0 && !result.timedOut) return;
    if (!result.timedOut && gitIsConflict(result)) {
      const unmerged = (await this.exec(path, CONFLICTS_ARGS)).result;
      const files = unmerged.exitCode === 0 ? nulList(unmerged.stdout) : [];
      throw new GitConflictError(`git pull: merge conflict in ${files.length ? files.join(", ") : "unknown files"}: ${detail(result, secrets)}`, files, {
        command: ["git", ...args],
        result,
      });
    }
    throw gitFailure(args, result, secrets);
  }

  /** The local branches, the remote-tracking ones (`origin/main`, as of the last fetch) and the current branch. */
  async branches(path: string): Promise<GitBranches> {
    return parseGitBranches((await this.run(path, BRANCHES_ARGS)).stdout);
  }

  /** Creates branch `name` at `startPoint` (default: the current commit) and switches to it unless `checkout: false`. */
  async createBranch(path: string, name: string, opts: GitCreateBranchOptions = {}): Promise<void> {
    const args = opts.checkout === false ? ["branch"] : ["switch", "-c"];
    args.push(gitCheckName("branch", name));
    if (opts.startPoint !== undefined) args.push(gitCheckName("startPoint", opts.startPoint));
    await this.run(path, args);
  }

  /**
   * Switches the working tree to branch `name` (`git switch`: a branch only on a remote gets a
   * local branch tracking it). Local changes the switch would overwrite throw {@link GitError}.
   */
  async checkoutBranch(path: string, name: string): Promise<void> {
    await this.run(path, ["switch", gitCheckName("branch", name)]);
  }
}
