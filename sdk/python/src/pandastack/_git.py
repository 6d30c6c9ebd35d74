"""Git in a sandbox, the part both clients share (``sandbox.git``: :mod:`._async.git` and its
generated sync twin): the argv and environment of each git command, the parsers of git's
machine-readable output, and the mapping of a failed command onto :class:`~pandastack.GitError`
and its subclasses. No I/O here.

Every command runs as an argv (no shell parses what the caller gave). A token never goes on a
command line nor to a file: it reaches git in the environment of that one command,

    GIT_CONFIG_COUNT=1
    GIT_CONFIG_KEY_0=http.extraHeader
    GIT_CONFIG_VALUE_0=Authorization: Basic base64(username:token)

which git (2.31 or later) reads as configuration of that process and the processes it starts,
and nothing writes down. ``GIT_TERMINAL_PROMPT=0`` is always set, so a missing or refused
credential fails at once instead of waiting for a prompt no one answers.
"""

from __future__ import annotations

import base64
import re
from typing import Dict, List, Optional, Sequence, Tuple

from .errors import GitAuthError, GitConflictError, GitError, InvalidArgumentError
from .types import ExecResult, GitBranches, GitFileStatus, GitStatus

#: The user name sent with a token when the call names none (what GitHub and most hosts accept
#: for a token).
DEFAULT_USERNAME = "x-access-token"
#: Who commits (and merges) when neither the call nor the repository's configuration says.
DEFAULT_AUTHOR_NAME = "PandaStack"
DEFAULT_AUTHOR_EMAIL = "sandbox@pandastack.local"
#: Command timeout (seconds) of clone, push and pull when the call gives none; the other
#: commands get the server's default (60 s).
NETWORK_TIMEOUT = 300.0

#: Environment of every git command: no prompts, and git's messages in English (which
#: :func:`failure` reads).
BASE_ENV: Dict[str, str] = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C.UTF-8", "LANGUAGE": ""}

#: Runs ``git "$@"``, adding ``-c user.name=…`` / ``-c user.email=…`` with the default
#: identity for what the configuration lacks (commits and merges need one). The script is a
#: constant: the git arguments are its positional parameters, never part of its text.
IDENTITY_SCRIPT = (
    'git config user.name >/dev/null || set -- -c "user.name=$PANDASTACK_GIT_NAME" "$@"; '
    'git config user.email >/dev/null || set -- -c "user.email=$PANDASTACK_GIT_EMAIL" "$@"; '
    'exec git "$@"'
)

_AUTH_FAILED = re.compile(
    r"Authentication failed|could not read (?:Username|Password)|terminal prompts disabled"
    r"|Invalid username or password|Permission denied \(publickey"
    r"|(?:returned error|HTTP|status):? 40[13]\b",
    re.IGNORECASE,
)
_CONFLICT = re.compile(r"^CONFLICT \(|^Automatic merge failed", re.MULTILINE)

#: ``XY`` of ``git status --porcelain=v2``: one letter for the index, one for the work tree.
_UNTRACKED = "?"


def _invalid(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(message, code="invalid_argument")


def check_name(kind: str, value: str) -> str:
    """A branch, remote or start point as its own argv element: not empty, not an option."""
    if not isinstance(value, str) or not value:
        raise _invalid(f"{kind} must be a non-empty string")
    if value.startswith("-") or "\0" in value:
        raise _invalid(f"{kind} {value!r} is not a valid name")
    return value


def command(
    args: Sequence[str],
    *,
    token: Optional[str] = None,
    username: Optional[str] = None,
    identity: bool = False,
) -> Tuple[List[str], Dict[str, str], List[str]]:
    """The argv and environment of ``git args…``, and the secrets to keep out of messages.

    With ``token`` the environment carries the ``Authorization`` header (see the module's
    docstring); with ``identity`` the command runs under :data:`IDENTITY_SCRIPT`."""
    env = dict(BASE_ENV)
    secrets: List[str] = []
    if token is not None:
        if not isinstance(token, str) or not token:
            raise _invalid("token must be a non-empty string")
        user = DEFAULT_USERNAME if username is None else username
        if not user or ":" in user:
            raise _invalid("username must be non-empty and without ':'")
        if any(c in token or c in user for c in "\r\n\0"):
            raise _invalid("token and username must be one line")
        basic = base64.b64encode(f"{user}:{token}".encode("utf-8")).decode("ascii")
        env["GIT_CONFIG_COUNT"] = "1"
        env["GIT_CONFIG_KEY_0"] = "http.extraHeader"
        env["GIT_CONFIG_VALUE_0"] = f"Authorization: Basic {basic}"
        secrets = [token, basic]
    elif username is not None:
        raise _invalid("username needs a token")
    if identity:
        env["PANDASTACK_GIT_NAME"] = DEFAULT_AUTHOR_NAME
        env["PANDASTACK_GIT_EMAIL"] = DEFAULT_AUTHOR_EMAIL
        return ["sh", "-c", IDENTITY_SCRIPT, "git", *args], env, secrets
    return ["git", *args], env, secrets


def redact(text: str, secrets: Sequence[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


def _detail(result: ExecResult, secrets: Sequence[str]) -> str:
    text = result.stderr.strip() or result.stdout.strip()
    if len(text) > 4000:
        text = "…" + text[-4000:]
    return redact(text, secrets)


def _what(args: Sequence[str]) -> str:
    """``git <subcommand>`` of ``args`` (past the ``-c key=value`` pairs)."""
    i = 0
    while i + 1 < len(args) and args[i] == "-c":
        i += 2
    return f"git {args[i]}" if i < len(args) else "git"


def failure(args: Sequence[str], result: ExecResult, secrets: Sequence[str] = ()) -> GitError:
    """The error for a git command that did not succeed: :class:`GitAuthError` when git says
    the remote refused or wanted credentials, :class:`GitError` with git's message otherwise."""
    argv = ["git", *args]
    what = _what(args)
    if result.timed_out:
        return GitError(
            f"{what} timed out after {result.duration_ms / 1000:.0f} s",
            code="git_timeout",
            command=argv,
            result=result,
        )
    if result.exit_code == 127 and not result.stdout and (
        "not found" in result.stderr or "No such file" in result.stderr or not result.stderr
    ):
        return GitError(
            f"{what}: git is not installed in this sandbox (the `app` template has it)",
            code="git_not_found",
            command=argv,
            result=result,
        )
    detail = _detail(result, secrets) or f"exit code {result.exit_code}"
    if _AUTH_FAILED.search(result.stderr):
        return GitAuthError(f"{what}: authentication failed: {detail}", command=argv, result=result)
    return GitError(f"{what} failed: {detail}", command=argv, result=result)


def is_conflict(result: ExecResult) -> bool:
    """Whether a failed pull stopped on merge conflicts."""
    return bool(_CONFLICT.search(result.stdout) or _CONFLICT.search(result.stderr))


#: Lists the unmerged paths, NUL-separated (after a merge stopped on conflicts).
CONFLICTS_ARGS = ["diff", "--name-only", "--diff-filter=U", "-z"]


def conflict_error(
    args: Sequence[str], result: ExecResult, files: Sequence[str], secrets: Sequence[str] = ()
) -> GitConflictError:
    what = _what(args)
    names = ", ".join(files) if files else "unknown files"
    return GitConflictError(
        f"{what}: merge conflict in {names}: {_detail(result, secrets)}",
        files=files,
        command=["git", *args],
        result=result,
    )


def parse_nul_list(out: str) -> List[str]:
    return [p for p in out.split("\0") if p]


#: Arguments of the status query.
STATUS_ARGS = ["status", "--porcelain=v2", "--branch", "-z"]


def parse_status(out: str) -> GitStatus:
    """Parses ``git status --porcelain=v2 --branch -z``: ``# branch.*`` headers, then one record
    per changed path (``1`` changed, ``2`` renamed or copied: its original path is the next
    record, ``u`` unmerged, ``?`` untracked, ``!`` ignored: left out). Records of a kind this
    parser does not know are skipped."""
    st = GitStatus(branch=None)
    recs = out.split("\0")
    i = 0
    while i < len(recs):
        rec = recs[i]
        i += 1
        if rec.startswith("# "):
            key, _, val = rec[2:].partition(" ")
            if key == "branch.oid":
                st.commit = None if val == "(initial)" else val
            elif key == "branch.head":
                st.branch = None if val == "(detached)" else val
            elif key == "branch.upstream":
                st.upstream = val
            elif key == "branch.ab":
                ahead, _, behind = val.partition(" ")
                try:
                    st.ahead, st.behind = abs(int(ahead)), abs(int(behind))
                except ValueError:
                    pass
            continue
        kind = rec[:1]
        if kind == "1":
            f = rec.split(" ", 8)
            if len(f) == 9 and len(f[1]) == 2:
                st.files.append(GitFileStatus(f[8], f[1][0], f[1][1]))
        elif kind == "2":
            f = rec.split(" ", 9)
            orig = recs[i] if i < len(recs) else None
            i += 1
            if len(f) == 10 and len(f[1]) == 2:
                st.files.append(GitFileStatus(f[9], f[1][0], f[1][1], orig_path=orig))
        elif kind == "u":
            f = rec.split(" ", 10)
            if len(f) == 11 and len(f[1]) == 2:
                st.files.append(GitFileStatus(f[10], f[1][0], f[1][1]))
        elif kind == _UNTRACKED and rec.startswith("? "):
            st.files.append(GitFileStatus(rec[2:], _UNTRACKED, _UNTRACKED))
    return st


#: Arguments of the branch query: ``*`` before the current branch, then the full ref name.
BRANCHES_ARGS = ["for-each-ref", "--format=%(HEAD)%(refname)", "refs/heads", "refs/remotes"]


def parse_branches(out: str) -> GitBranches:
    br = GitBranches(current=None)
    for line in out.splitlines():
        if len(line) < 2:
            continue
        mark, ref = line[0], line[1:]
        if ref.startswith("refs/heads/"):
            name = ref[len("refs/heads/") :]
            br.local.append(name)
            if mark == "*":
                br.current = name
        elif ref.startswith("refs/remotes/") and not ref.endswith("/HEAD"):
            br.remote.append(ref[len("refs/remotes/") :])
    return br


def clone_args(url: str, path: str, branch: Optional[str], depth: Optional[int]) -> List[str]:
    if not isinstance(url, str) or not url:
        raise _invalid("url must be a non-empty string")
    if not isinstance(path, str) or not path:
        raise _invalid("path must be a non-empty string")
    args = ["clone"]
    if branch is not None:
        args += ["--branch", check_name("branch", branch)]
    if depth is not None:
        if int(depth) < 1:
            raise _invalid("depth must be at least 1")
        args += ["--depth", str(int(depth))]
    return args + ["--", url, path]


def commit_args(
    message: str, author_name: Optional[str], author_email: Optional[str], allow_empty: bool
) -> List[str]:
    if not isinstance(message, str) or not message.strip():
        raise _invalid("message must be a non-empty string")
    args: List[str] = []
    if author_name is not None:
        args += ["-c", f"user.name={author_name}"]
    if author_email is not None:
        args += ["-c", f"user.email={author_email}"]
    args += ["commit", "-m", message]
    if allow_empty:
        args.append("--allow-empty")
    return args
