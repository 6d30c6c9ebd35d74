"""The pure part of sandbox.git (pandastack._git): the commands and their environment, git's
porcelain parsed, failures mapped onto errors. Offline; tests/test_git.py runs git for real."""

from __future__ import annotations

import base64

import pytest

from pandastack import (
    ExecResult,
    GitAuthError,
    GitConflictError,
    GitError,
    InvalidArgumentError,
    PandaStackError,
)
from pandastack import _git as g

pytestmark = pytest.mark.offline


def result(stdout: str = "", stderr: str = "", exit_code: int = 1, timed_out: bool = False) -> ExecResult:
    return ExecResult(stdout=stdout, stderr=stderr, exit_code=exit_code, timed_out=timed_out)


def test_a_token_goes_in_the_environment_only() -> None:
    argv, env, secrets = g.command(["push", "origin", "HEAD"], token="s3cret")
    assert argv == ["git", "push", "origin", "HEAD"]
    basic = base64.b64encode(b"x-access-token:s3cret").decode()
    assert env["GIT_CONFIG_COUNT"] == "1" and env["GIT_CONFIG_KEY_0"] == "http.extraHeader"
    assert env["GIT_CONFIG_VALUE_0"] == f"Authorization: Basic {basic}"
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert secrets == ["s3cret", basic]
    assert not any("s3cret" in a or basic in a for a in argv)
    _, env, _ = g.command(["fetch"], token="t", username="me")
    assert env["GIT_CONFIG_VALUE_0"] == "Authorization: Basic " + base64.b64encode(b"me:t").decode()
    _, env, secrets = g.command(["status"])
    assert "GIT_CONFIG_COUNT" not in env and env["GIT_TERMINAL_PROMPT"] == "0" and secrets == []
    for bad in ({"token": ""}, {"token": "a\nb"}, {"username": "u"}, {"token": "t", "username": "a:b"}):
        with pytest.raises(InvalidArgumentError):
            g.command(["fetch"], **bad)  # type: ignore[arg-type]


def test_identity_runs_under_a_constant_script() -> None:
    argv, env, _ = g.command(["commit", "-m", "$(rm -rf /)"], identity=True)
    assert argv[:4] == ["sh", "-c", g.IDENTITY_SCRIPT, "git"]
    assert argv[4:] == ["commit", "-m", "$(rm -rf /)"]
    assert (env["PANDASTACK_GIT_NAME"], env["PANDASTACK_GIT_EMAIL"]) == ("PandaStack", "sandbox@pandastack.local")


def test_arguments() -> None:
    assert g.clone_args("https://h/r.git", "/w/r", "dev", 1) == [
        "clone", "--branch", "dev", "--depth", "1", "--", "https://h/r.git", "/w/r"
    ]
    assert g.commit_args("m", "A", None, True) == ["-c", "user.name=A", "commit", "-m", "m", "--allow-empty"]
    for bad in ("", "-x", "--upload-pack=evil"):
        with pytest.raises(InvalidArgumentError):
            g.check_name("branch", bad)
    with pytest.raises(InvalidArgumentError):
        g.commit_args("  ", None, None, False)
    with pytest.raises(InvalidArgumentError):
        g.clone_args("u", "/p", None, 0)


def test_status_porcelain_v2() -> None:
    out = "\0".join(
        [
            "# branch.oid 1111111111111111111111111111111111111111",
            "# branch.head main",
            "# branch.upstream origin/main",
            "# branch.ab +2 -3",
            "1 .M N... 100644 100644 100644 aaaa aaaa a file with spaces.txt",
            "1 A. N... 000000 100644 100644 0000 bbbb new.txt",
            "2 R. N... 100644 100644 100644 cccc cccc R100 renamed.txt",
            "old name.txt",
            "u UU N... 100644 100644 100644 100644 d1 d2 d3 shared.txt",
            "? untracked/",
            "! ignored.log",
            "",
        ]
    )
    st = g.parse_status(out)
    assert (st.branch, st.commit, st.upstream, st.ahead, st.behind) == (
        "main", "1" * 40, "origin/main", 2, 3
    )
    assert [(f.path, f.index, f.worktree, f.orig_path) for f in st.files] == [
        ("a file with spaces.txt", ".", "M", None),
        ("new.txt", "A", ".", None),
        ("renamed.txt", "R", ".", "old name.txt"),
        ("shared.txt", "U", "U", None),
        ("untracked/", "?", "?", None),
    ]
    assert [f.staged for f in st.files] == [False, True, True, False, False]
    assert st.conflicts == ["shared.txt"] and not st.clean
    st = g.parse_status("# branch.oid (initial)\0# branch.head (detached)\0")
    assert (st.branch, st.commit, st.upstream, st.ahead, st.clean) == (None, None, None, 0, True)


def test_branches() -> None:
    out = " refs/heads/feature\n*refs/heads/main\n refs/remotes/origin/HEAD\n refs/remotes/origin/main\n"
    br = g.parse_branches(out)
    assert (br.current, br.local, br.remote) == ("main", ["feature", "main"], ["origin/main"])
    assert g.parse_branches("").current is None


def test_failures() -> None:
    args = ["clone", "--", "https://h/r.git", "/w"]
    e = g.failure(args, result(stderr="fatal: could not read Username for 'https://h': terminal prompts disabled\n"))
    assert isinstance(e, GitAuthError) and isinstance(e, PandaStackError) and e.code == "git_auth_failed"
    assert e.command == ["git", *args] and e.exit_code == 1 and str(e).startswith("git_auth_failed: git clone:")
    denied = "remote: no\nfatal: unable to access 'x': The requested URL returned error: 403\n"
    e = g.failure(["push"], result(stderr=denied))
    assert isinstance(e, GitAuthError)
    e = g.failure(["push"], result(stderr="To x\n ! [rejected]  main -> main (fetch first)\n"))
    assert type(e) is GitError and "rejected" in e.message
    e = g.failure(["push"], result(stderr="Authorization: Basic c2VjcmV0 echoed secret"), ["secret", "c2VjcmV0"])
    assert "secret" not in e.message and "c2VjcmV0" not in e.message
    assert g.failure(["fetch"], result(timed_out=True, exit_code=-1)).code == "git_timeout"
    assert g.failure(["status"], result(stderr="exec: git: not found", exit_code=127)).code == "git_not_found"
    e = g.failure(["-c", "user.name=x", "commit", "-m", "m"], result(stdout="nothing to commit, working tree clean\n"))
    assert e.message == "git commit failed: nothing to commit, working tree clean"
    merged = result(stdout="Auto-merging a.txt\nCONFLICT (content): Merge conflict in a.txt\n"
                    "Automatic merge failed; fix conflicts and then commit the result.\n")
    assert g.is_conflict(merged) and not g.is_conflict(result(stderr="fatal: boom"))
    c = g.conflict_error(["pull"], merged, g.parse_nul_list("a.txt\0b c.txt\0"))
    assert isinstance(c, GitConflictError) and c.files == ["a.txt", "b c.txt"]
    assert "a.txt, b c.txt" in c.message and c.code == "git_conflict"
