#!/usr/bin/env bash
# Builds every catalog template (templates/*.toml) and smoke-tests it on a real server: the image
# build (cached by spec hash), the first create (bake), then each template's headline tools. Not
# part of CI (the large templates download hundreds of MiB and take minutes each). Prints a
# Markdown table and writes the figures as JSON.
#
#   scripts/catalog-smoke.sh [--json FILE] [TEMPLATE...]     (default: every spec; run as root)
#
# Needs what scripts/test.sh prepares: the guest kernel, target/release/{pandastack,
# pandastack-guest} (static agent) and a reflink data dir. Uses scripts/dev-server.sh.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
json_out=bench/catalog.json
if [[ ${1:-} == --json ]]; then json_out=$2; shift 2; fi
names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
    for f in templates/*.toml; do names+=("$(basename "$f" .toml)"); done
fi
bin=${PANDASTACK_BIN:-$here/target/release/pandastack}
agent=${PANDASTACK_GUEST_AGENT:-$here/target/release/pandastack-guest}
export PANDASTACK_BIN=$bin PANDASTACK_GUEST_AGENT=$agent

# Headline checks: one shell line each, run in a fresh sandbox of the template.
declare -A check=(
    [minimal]='python3 --version'
    [base]='python3 --version && node --version && go version && git --version && bun --version'
    [code-interpreter]='python3 -c "import numpy, pandas, scipy, sklearn, matplotlib, plotly, PIL; print(\"pandas\", pandas.__version__)" && node --version'
    [agent]='claude --version && codex --version && opencode --version'
    [browser]='mkdir -p /srv/site && echo "<h1>hello from the guest</h1>" > /srv/site/index.html && (cd /srv/site && setsid python3 -m http.server 8000 >/dev/null 2>&1 &) && sleep 1 && python3 - <<"PY"
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
    page = b.new_page()
    page.goto("http://127.0.0.1:8000/")
    page.screenshot(path="/tmp/shot.png")
    print("title text:", page.inner_text("h1"))
    b.close()
import os; print("screenshot bytes:", os.path.getsize("/tmp/shot.png"))
PY'
    [postgres]='pg_ctlcluster 17 main start && runuser -u postgres -- psql -v ON_ERROR_STOP=1 -qAt <<"SQL" && pgbackrest version && pgbouncer --version | head -1
select $$PostgreSQL $$ || current_setting($$server_version$$);
create extension vector;
create extension pg_cron;
create extension pg_stat_statements;
select $$distance $$ || ($$[1,2,3]$$::vector <-> $$[1,2,4]$$::vector);
select $$ext $$ || name || $$ $$ || default_version from pg_available_extensions order by name;
SQL'
    [claude-agent]='python3 -c "import claude_agent_sdk; print(\"claude_agent_sdk\", claude_agent_sdk.__version__)" && NODE_PATH=/usr/local/lib/node_modules node -e "require.resolve(\"@anthropic-ai/claude-agent-sdk\"); console.log(\"ts sdk ok\")" && claude --version'
)

eval "$(scripts/dev-server.sh start catalog-smoke)"
trap 'scripts/dev-server.sh stop catalog-smoke' EXIT
api() { curl -sS -H "Authorization: Bearer $PANDASTACK_API_KEY" "$@"; }

rows=()
results="[]"
for t in "${names[@]}"; do
    echo "==> $t: image" >&2
    if ! out=$("$bin" template build "$t" --agent "$agent" --json 2>"/tmp/catalog-$t.build.log"); then
        echo "    build failed; see /tmp/catalog-$t.build.log" >&2
        rows+=("| $t | failed | - | - | - | image build failed |")
        results=$(jq --arg t "$t" '. + [{template: $t, ok: false, stage: "build"}]' <<<"$results")
        continue
    fi
    # The build's own time, also when it came from the cache.
    build_s=$(jq -r '.build_seconds' <<<"$out")
    size_mib=$(( $(jq -r '.allocated_bytes' <<<"$out") / 1048576 ))
    echo "==> $t: first create (bake)" >&2
    start=$(date +%s.%N)
    sb=$(api -X POST "$PANDASTACK_BASE_URL/v1/sandboxes" -d "{\"template\":\"$t\",\"ttl_seconds\":900}")
    id=$(jq -r '.id // empty' <<<"$sb")
    first_s=$(echo "$(date +%s.%N) - $start" | bc)
    if [[ -z $id ]]; then
        echo "    create failed: $sb" >&2
        rows+=("| $t | $(printf %.0f "$build_s") | $size_mib | - | - | create failed |")
        results=$(jq --arg t "$t" '. + [{template: $t, ok: false, stage: "create"}]' <<<"$results")
        continue
    fi
    bake_ms=$(api "$PANDASTACK_BASE_URL/v1/templates/$t" | jq -r '.bake_ms // "-"')
    start=$(date +%s.%N)
    sb2=$(api -X POST "$PANDASTACK_BASE_URL/v1/sandboxes" -d "{\"template\":\"$t\"}")
    create_ms=$(echo "($(date +%s.%N) - $start) * 1000" | bc | cut -d. -f1)
    id2=$(jq -r '.id // empty' <<<"$sb2")
    [[ -n $id2 ]] && api -X DELETE "$PANDASTACK_BASE_URL/v1/sandboxes/$id2" >/dev/null
    echo "==> $t: smoke" >&2
    body=$(jq -n --arg c "${check[$t]:-true}" '{argv: ["/bin/bash", "-c", $c], timeout_seconds: 300}')
    res=$(api -X POST "$PANDASTACK_BASE_URL/v1/sandboxes/$id/exec" -d "$body")
    code=$(jq -r '.exit_code // "error"' <<<"$res")
    # The postgres template's extension list is also recorded beside its spec (for the API).
    if [[ $t == postgres && $code == 0 ]] && ! diff <(jq -r '.extensions[] | "\(.name) \(.default_version)"' templates/postgres.extensions.json) \
        <(jq -r '.stdout' <<<"$res" | sed -n 's/^ext //p') >&2; then
        echo "    the image's extensions differ from templates/postgres.extensions.json" >&2
        code=extensions
    fi
    first_line=$(jq -r '(.stdout // "") | split("\n") | map(select(length > 0)) | join("; ")' <<<"$res" | cut -c1-120)
    echo "    exit $code: $(jq -r '.stdout // ""' <<<"$res")$(jq -r '.stderr // ""' <<<"$res" | tail -5)" >&2
    api -X DELETE "$PANDASTACK_BASE_URL/v1/sandboxes/$id" >/dev/null
    ok=false; [[ $code == 0 ]] && ok=true
    rows+=("| $t | $(printf %.0f "$build_s") | $size_mib | $bake_ms | $create_ms | $([[ $ok == true ]] && echo "ok: " || echo "FAILED: ")${first_line//|/\\|} |")
    results=$(jq --arg t "$t" --argjson ok "$ok" --arg out "$first_line" \
        --argjson build_s "$build_s" --argjson size "$size_mib" --arg bake "$bake_ms" \
        --argjson create "${create_ms:-0}" --argjson first "$first_s" \
        '. + [{template: $t, ok: $ok, build_s: $build_s, image_mib: $size, bake_ms: ($bake|tonumber? // null), first_create_s: $first, create_ms: $create, smoke: $out}]' <<<"$results")
done

echo
echo "| template | image build s | image MiB (allocated) | bake ms | create ms (restore) | smoke |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
accel=$("$bin" doctor --json 2>/dev/null | jq -r '.[] | select(.name == "accelerator") | .detail | split(":")[0]' 2>/dev/null || echo unknown)
jq -n --argjson r "$results" --arg accel "$accel" --arg host "$(hostname)" \
    '{name: "catalog", accel: $accel, host: $host, templates: $r}' >"$json_out"
echo "wrote $json_out" >&2
jq -e 'all(.templates[]; .ok)' "$json_out" >/dev/null
