"""Schemathesis hooks for scripts/fuzz-api.sh (loaded through SCHEMATHESIS_HOOKS).

- `auth_is_required`: in the runs without a key or with a wrong one
  (PANDASTACK_FUZZ_AUTH=none|wrong), every answer must be 401 `unauthorized` in the error
  envelope (405 in the envelope for a method the path does not serve), except the public paths
  (health, the OpenAPI document, a database's Neon-compatible `POST …/sql`, which logs in
  with the `Neon-Connection-String` header's credentials instead of an API key, and a sandbox's
  signed file URLs, `…/files/signed`, which carry their own signature).
- `no_server_error`: schemathesis' `not_a_server_error` (no 5xx), except the two documented
  507 answers, which are a full quota or disk, not a failure of the server: `quota_exceeded`
  (a workspace's volume quota; a fuzzer creating volumes of up to 1 TiB reaches it at once) and
  `insufficient_storage` (a full disk in the guest). Any other 5xx, or a 507 with another code,
  fails.
- `before_call`: keeps fuzzing affordable on a real host. Creates never name a template that
  would have to be built first (PANDASTACK_FUZZ_AVOID_TEMPLATES, comma-separated: catalog
  templates not baked yet, whose first use bootstraps Debian for minutes); they get the fixture's
  template (PANDASTACK_FUZZ_TEMPLATE) instead. A valid fork `count` above MAX_FORK_CHILDREN is
  lowered to it (each child is a VM); invalid counts are sent as generated.
"""

import os

import schemathesis

#: The paths served without an API key (pandastack_api::openapi::PUBLIC_PATHS).
PUBLIC_PATHS = {"/v1/health", "/v1/openapi.json", "/v1/databases/{id}/sql", "/v1/sandboxes/{id}/files/signed"}


@schemathesis.check
def auth_is_required(ctx, response, case):
    """Without a valid key, everything but the public paths answers 401 `unauthorized`."""
    mode = os.environ.get("PANDASTACK_FUZZ_AUTH", "key")
    if mode == "key" or case.operation.path in PUBLIC_PATHS:
        return None
    if case.method.upper() != case.operation.method.upper():
        # A method the path does not serve: 405 whatever the key (there is nothing to protect).
        expected = 405
    else:
        expected = 401
    if response.status_code != expected:
        raise AssertionError(
            f"expected {expected} without a valid key ({mode}), got {response.status_code}"
        )
    try:
        code = response.json()["error"]["code"]
    except Exception as e:  # noqa: BLE001 - any shape but the envelope fails
        raise AssertionError(f"{expected} without the error envelope: {e}") from None
    if expected == 401 and code != "unauthorized":
        raise AssertionError(f"401 with error.code {code!r}, expected 'unauthorized'")
    return None


#: 507 is the documented answer to these error codes (a full quota or disk).
STORAGE_CODES = {"quota_exceeded", "insufficient_storage"}


@schemathesis.check
def no_server_error(ctx, response, case):
    """No 5xx, except 507 with one of STORAGE_CODES."""
    if response.status_code < 500:
        return None
    if response.status_code == 507:
        try:
            code = response.json()["error"]["code"]
        except Exception:  # noqa: BLE001 - any shape but the envelope fails
            code = None
        if code in STORAGE_CODES:
            return None
    raise AssertionError(f"server error {response.status_code}: {response.text[:300]}")


#: Children a generated fork may ask for (each is a VM).
MAX_FORK_CHILDREN = 2
#: The server's bound on `count` (pandastack_api_types::MAX_FORK).
MAX_FORK = 16


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.method.upper() != "POST" or not isinstance(case.body, dict):
        return
    path = case.operation.path
    avoid = {t for t in os.environ.get("PANDASTACK_FUZZ_AVOID_TEMPLATES", "").split(",") if t}
    if path == "/v1/sandboxes" and str(case.body.get("template", "base")) in avoid:
        case.body["template"] = os.environ["PANDASTACK_FUZZ_TEMPLATE"]
    count = case.body.get("count")
    if (
        path == "/v1/sandboxes/{id}/fork"
        and type(count) is int
        and MAX_FORK_CHILDREN < count <= MAX_FORK
    ):
        case.body["count"] = MAX_FORK_CHILDREN
