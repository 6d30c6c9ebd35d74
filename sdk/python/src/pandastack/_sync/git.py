# Generated from _async/git.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/git.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""Git inside a sandbox: :class:`Git` (``sandbox.git``), git commands run over exec.

The commands, their environment (how a token reaches git without touching a command line or
a file), the parsers and the errors are in :mod:`pandastack._git`, shared with the sync client.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

from .. import _git as g
from ..errors import GitError
from ..types import ExecResult, GitBranches, GitStatus
from .sandbox import Sandbox


class Git:
    """Git in a sandbox (``sandbox.git``): each method runs ``git`` inside the sandbox (the
    template needs git 2.31 or later, as ``app`` has) with an argv, never a shell line.

    ``path`` is the repository's working tree, an absolute guest path. Methods that talk to a
    remote take ``token`` (and ``username``, default ``x-access-token``) for HTTP(S) remotes:
    git gets them as an ``Authorization: Basic`` header through the environment of that one
    command (``GIT_CONFIG_COUNT`` / ``GIT_CONFIG_KEY_0`` / ``GIT_CONFIG_VALUE_0``), so they
    appear in no argv, process list, ``.git/config`` or credential store. Git never prompts
    (``GIT_TERMINAL_PROMPT=0``).

    A failing command raises :class:`~pandastack.GitError` with git's message;
    :class:`~pandastack.GitAuthError` when the remote refused or wanted credentials;
    :class:`~pandastack.GitConflictError` when a pull stopped on conflicts.
    """

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _exec(
        self,
        path: Optional[str],
        args: Sequence[str],
        *,
        token: Optional[str] = None,
        username: Optional[str] = None,
        identity: bool = False,
        timeout_seconds: Optional[float] = None,
    ) -> Tuple[ExecResult, Sequence[str]]:
        argv, env, secrets = g.command(args, token=token, username=username, identity=identity)
        result = self._sb.exec(argv, env=env, cwd=path, timeout_seconds=timeout_seconds)
        return result, secrets

    def _run(
        self,
        path: Optional[str],
        args: Sequence[str],
        *,
        token: Optional[str] = None,
        username: Optional[str] = None,
        identity: bool = False,
        timeout_seconds: Optional[float] = None,
    ) -> ExecResult:
        result, secrets = self._exec(
            path,
            args,
            token=token,
            username=username,
            identity=identity,
            timeout_seconds=timeout_seconds,
        )
        if not result.ok:
            raise g.failure(args, result, secrets)
        return result

    def clone(
        self,
        url: str,
        path: str,
        *,
        branch: Optional[str] = None,
        depth: Optional[int] = None,
        token: Optional[str] = None,
        username: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
    ) -> None:
        """Clones ``url`` into ``path`` (an absolute guest path; it must not exist or be empty).

        ``branch`` checks out that branch (or tag) instead of the remote's default; ``depth``
        makes a shallow clone of that many commits. ``token`` / ``username`` authenticate an
        HTTP(S) remote for this command only: put them here, not in the URL (a URL's
        credentials would be written to ``.git/config``). ``timeout_seconds`` bounds the clone
        (default 300).
        """
        self._run(
            None,
            g.clone_args(url, path, branch, depth),
            token=token,
            username=username,
            timeout_seconds=g.NETWORK_TIMEOUT if timeout_seconds is None else timeout_seconds,
        )

    def status(self, path: str) -> GitStatus:
        """The working tree's state: current branch, upstream, ahead/behind counts and the
        changed paths with their index and work-tree status (``git status --porcelain=v2
        --branch``); untracked directories are listed as the directory."""
        result = self._run(path, g.STATUS_ARGS)
        if result.truncated:
            raise GitError(
                "git status: the output exceeded the exec output limit (too many changed paths)",
                command=["git", *g.STATUS_ARGS],
                result=result,
            )
        return g.parse_status(result.stdout)

    def add(self, path: str, files: Union[str, Sequence[str], None] = None) -> None:
        """Stages ``files`` (paths relative to ``path``; a str is one path), or every change
        of the working tree — new, modified and deleted files — when ``files`` is ``None``."""
        if files is None:
            args = ["add", "--all"]
        else:
            paths = [files] if isinstance(files, str) else list(files)
            if not paths:
                return
            args = ["add", "--", *paths]
        self._run(path, args)

    def commit(
        self,
        path: str,
        message: str,
        *,
        author_name: Optional[str] = None,
        author_email: Optional[str] = None,
        allow_empty: bool = False,
    ) -> str:
        """Commits what is staged and returns the new commit's sha (40 hex digits).

        ``author_name`` / ``author_email`` set author and committer for this commit
        (``git -c user.name=… -c user.email=…``); what they leave unset comes from the
        repository's configuration, else ``PandaStack <sandbox@pandastack.local>``. Nothing
        staged raises :class:`~pandastack.GitError` unless ``allow_empty``.
        """
        args = g.commit_args(message, author_name, author_email, allow_empty)
        self._run(path, args, identity=True)
        head = self._run(path, ["rev-parse", "HEAD"])
        return head.stdout.strip()

    def push(
        self,
        path: str,
        *,
        remote: str = "origin",
        branch: Optional[str] = None,
        set_upstream: bool = False,
        force: bool = False,
        token: Optional[str] = None,
        username: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
    ) -> None:
        """Pushes ``branch`` (default: the current branch, to the remote branch of the same
        name) to ``remote``. ``set_upstream`` makes the remote branch the local one's upstream;
        ``force`` overwrites the remote branch. A rejected push (the remote has commits this
        branch lacks: pull first) raises :class:`~pandastack.GitError`; refused credentials
        :class:`~pandastack.GitAuthError`. ``timeout_seconds`` defaults to 300.
        """
        args = ["push"]
        if set_upstream:
            args.append("--set-upstream")
        if force:
            args.append("--force")
        args += [g.check_name("remote", remote), g.check_name("branch", branch) if branch else "HEAD"]
        self._run(
            path,
            args,
            token=token,
            username=username,
            timeout_seconds=g.NETWORK_TIMEOUT if timeout_seconds is None else timeout_seconds,
        )

    def pull(
        self,
        path: str,
        *,
        remote: str = "origin",
        branch: Optional[str] = None,
        token: Optional[str] = None,
        username: Optional[str] = None,
        timeout_seconds: Optional[float] = None,
    ) -> None:
        """Fetches ``branch`` from ``remote`` (default: the current branch's upstream) and
        merges it into the current branch (a merge, never a rebase; a merge commit gets the
        repository's identity, else ``PandaStack <sandbox@pandastack.local>``).

        Conflicts raise :class:`~pandastack.GitConflictError` naming the files; the working
        tree is then mid-merge (resolve, :meth:`add`, :meth:`commit`; or ``git merge
        --abort``). Refused credentials raise :class:`~pandastack.GitAuthError`.
        ``timeout_seconds`` defaults to 300.
        """
        args = ["pull", "--no-rebase", "--no-edit", g.check_name("remote", remote)]
        if branch:
            args.append(g.check_name("branch", branch))
        result, secrets = self._exec(
            path,
            args,
            token=token,
            username=username,
            identity=True,
            timeout_seconds=g.NETWORK_TIMEOUT if timeout_seconds is None else timeout_seconds,
        )
        if result.ok:
            return
        if not result.timed_out and g.is_conflict(result):
            unmerged, _ = self._exec(path, g.CONFLICTS_ARGS)
            files = g.parse_nul_list(unmerged.stdout) if unmerged.ok else []
            raise g.conflict_error(args, result, files, secrets)
        raise g.failure(args, result, secrets)

    def branches(self, path: str) -> GitBranches:
        """The local branches, the remote-tracking ones (``origin/main``, as of the last
        fetch) and the current branch."""
        result = self._run(path, g.BRANCHES_ARGS)
        return g.parse_branches(result.stdout)

    def create_branch(
        self, path: str, name: str, *, start_point: Optional[str] = None, checkout: bool = True
    ) -> None:
        """Creates branch ``name`` at ``start_point`` (a branch, tag or commit; default the
        current commit) and switches to it, unless ``checkout=False``."""
        args = ["switch", "-c"] if checkout else ["branch"]
        args.append(g.check_name("branch", name))
        if start_point is not None:
            args.append(g.check_name("start_point", start_point))
        self._run(path, args)

    def checkout_branch(self, path: str, name: str) -> None:
        """Switches the working tree to branch ``name`` (``git switch``: a branch only on a
        remote gets a local branch tracking it). Local changes that the switch would overwrite
        raise :class:`~pandastack.GitError`."""
        self._run(path, ["switch", g.check_name("branch", name)])
