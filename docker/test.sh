#!/usr/bin/env bash
# docker/test.sh: the container image and the Compose setups, tested with the
# real Docker Engine and Compose.
#
#   1. build the image (docker/build.sh) and check it: size, user, entrypoint,
#      health check, config validation as uid 65532;
#   2. sidecar stack: traffic through the published port is split between the
#      app (shared network namespace) and app-v2;
#   3. ingress stack: `up`, traffic through the published port (the proxy
#      resolves the Compose service names), /readyz and the image's health
#      check, the weight moved through the control API;
#   4. a canary release to promotion, then one to rollback (the new version
#      answers 500 to half of the requests), each checked through the control
#      API and through the responses on the published port;
#   5. tear-down; the image size and the time from `up` to /readyz.
#
# Every port is published on 127.0.0.1 only, on free ports chosen by Docker;
# the Compose project names are unique per run and everything is removed on
# exit (`down -v`), failed or not. On failure it says which step failed and
# why, and prints the stack's state and the proxy's last log lines.
#
# Needs: docker (Engine and Compose v2 `docker compose` or v1 `docker-compose`),
# curl >= 7.84, jq or python3, a Rust toolchain (for the build).
# Environment: WEIR_IMAGE (default weir:dev), WEIR_SKIP_BUILD=1 (use the image
# as it is), WEIR_SKIP_CARGO=1 (build the image from the static binary
# already built by packaging/static-binary.sh), KEEP_LOGS=DIR (copy the stacks' logs there).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image=${WEIR_IMAGE:-weir:dev}
# One static binary and nothing else; it grew past 20 MB with the Docker
# provider's Engine API client (bollard), metric templates and weir check's
# diagnostics. The bound still catches debug info or a second binary.
max_image_bytes=$((25 * 1000 * 1000))
run_id="$$-$RANDOM"
ingress_project="weirtest-ingress-$run_id"
sidecar_project="weirtest-sidecar-$run_id"
script_start=$SECONDS

STEPS=(
  "build the image"
  "check the image"
  "validate the configs inside the image"
  "sidecar: traffic split through the published port"
  "ingress: compose up, traffic through the published port"
  "ingress: /readyz answers (startup time)"
  "ingress: the image's health check reports healthy"
  "ingress: canaryWeight 50 via the API, both versions answer"
  "ingress: canary release to promotion"
  "ingress: canary release to rollback (--error-rate 0.5)"
  "tear down"
)
passed=0
current=""
finished=0


# ---------------------------------------------------------------------------
# Reporting

# step, ok, info, fail (and find_compose): docker/lib.sh.
. "$here/lib.sh"
find_compose

tmp=$(mktemp -d)
# The config directory is bind-mounted read-only at /etc/weir: uid 65532
# must be able to enter it and read the files in it.
chmod 0755 "$tmp"
mkdir -m 0755 "$tmp/config"
load_pid=""

ingress() {
  WEIR_IMAGE=$image WEIR_CONFIG_DIR=$tmp/config WEIR_HTTP_PORT='' WEIR_ADMIN_PORT='' \
    "${COMPOSE[@]}" -p "$ingress_project" -f "$here/compose.ingress.yaml" "$@"
}
sidecar() {
  WEIR_IMAGE=$image WEIR_CONFIG_DIR=$tmp/config WEIR_SIDECAR_PORT='' \
    "${COMPOSE[@]}" -p "$sidecar_project" -f "$here/compose.sidecar.yaml" "$@"
}

dump_stack() { # compose-function service
  echo "---- $1: state" >&2
  "$1" ps >&2 2>&1 || true
  echo "---- $1: last log lines of $2" >&2
  "$1" logs --no-color --tail 40 "$2" >&2 2>&1 || true
}

# keep_logs STACK: with KEEP_LOGS set, save the stack's logs (before `down`).
keep_logs() {
  if [[ -n ${KEEP_LOGS:-} && -n $("$1" ps -q 2>/dev/null) ]]; then
    mkdir -p "$KEEP_LOGS"
    "$1" logs --no-color >"$KEEP_LOGS/$1.log" 2>&1 || true
  fi
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $load_pid ]]; then kill "$load_pid" 2>/dev/null || true; fi
  if ((rc != 0 && finished == 0)); then
    [[ $current == sidecar* ]] && dump_stack sidecar weir
    [[ $current == ingress* ]] && dump_stack ingress weir
  fi
  keep_logs ingress
  keep_logs sidecar
  ingress down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
  sidecar down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
  rm -rf "$tmp"
  if ((rc != 0)); then
    local i
    for ((i = passed + 1; i < ${#STEPS[@]}; i++)); do
      printf '    not run: %s\n' "${STEPS[$i]}" >&2
    done
    printf 'docker-test: %d passed, 1 failed\n' "$passed"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# An unexpected command failure (set -e) still names the step.
trap 'printf "    (command failed at line %s: %s)\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------------------
# Helpers: JSON, the control API, traffic

# jget PATH [PATH...]: the first non-null of these jq paths, read from stdin.
jget() {
  if command -v jq >/dev/null 2>&1; then
    local expr="" p
    for p in "$@"; do expr+="($p) // "; done
    jq -r "${expr}empty" 2>/dev/null || true
  else
    python3 -c '
import json, sys
try: doc = json.load(sys.stdin)
except Exception: sys.exit(0)
for path in sys.argv[1:]:
    v = doc
    for k in [k for k in path.split(".") if k]:
        v = v.get(k) if isinstance(v, dict) else None
    if v is not None:
        print(json.dumps(v) if isinstance(v, (dict, list, bool)) else v); break
' "$@"
  fi
}

# api METHOD PATH [JSON]: sets API_STATUS (000 when unreachable) and API_BODY.
api() {
  local args=(-sS --max-time 10 -X "$1" -H "Authorization: Bearer $token" -H 'X-Weir-Request: 1' -w '\n%{http_code}')
  if [[ $# -ge 3 ]]; then args+=(-H 'Content-Type: application/json' --data "$3"); fi
  local out
  if ! out=$(curl "${args[@]}" "http://127.0.0.1:$admin_port$2" 2>&1); then
    API_STATUS=000
    API_BODY=$out
    return 0
  fi
  API_STATUS=${out##*$'\n'}
  API_BODY=${out%$'\n'*}
}

# sample PORT N [curl args]: N requests over one keep-alive connection; one
# line "STATUS VERSION" each (VERSION from the x-weir-version header).
sample() {
  local port=$1 n=$2
  shift 2
  curl -s -o /dev/null --max-time 60 "$@" -w '%{http_code} %header{x-weir-version}\n' \
    "http://127.0.0.1:$port/sample?i=[1-$n]" || true
}

# tally FILE: "count status version" lines, for the log.
tally() { sort "$1" | uniq -c | sed 's/^ */      /'; }

# only FILE "STATUS VERSION": every line is exactly that (and there are lines).
only() { [[ -s $1 ]] && ! grep -qvx "$2" "$1"; }

# get_route: GET /api/v1/routes/app into ROUTE (fails the step otherwise);
# rf FIELD: a field of it (the route itself, or wrapped in {"route": ...}).
get_route() {
  api GET /api/v1/routes/app
  [[ $API_STATUS == 200 ]] || fail "GET /api/v1/routes/app answered HTTP $API_STATUS: $API_BODY"
  ROUTE=$API_BODY
}
rf() { jget ".route.$1" ".$1" <<<"$ROUTE"; }
# canaryWeight is left out of the JSON when unset (0).
rf_weight() { local w; w=$(rf canaryWeight); echo "${w:-0}"; }

# Traffic during a run: the analysis needs requests in each window (no
# traffic is a failed check). 50 rps (test_pace in lib.sh says why), bounded
# in count: 6000 requests, two minutes.
start_load() {
  # -w to stderr: unbuffered, so the lines survive the kill in stop_load.
  curl -s -o /dev/null --rate 50/s --max-time 300 -w '%{stderr}%{http_code}\n' \
    "http://127.0.0.1:$http_port/load?i=[1-6000]" 2>"$1" &
  load_pid=$!
}
stop_load() {
  if [[ -n $load_pid ]]; then
    kill "$load_pid" 2>/dev/null || true
    wait "$load_pid" 2>/dev/null || true
    load_pid=""
  fi
}

# wait_health COMPOSE SERVICE TIMEOUT: until Docker reports it healthy.
wait_health() {
  local id state deadline=$((SECONDS + $3))
  id=$("$1" ps -q "$2")
  [[ -n $id ]] || fail "no container for service $2"
  while :; do
    state=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id")
    [[ $state == healthy ]] && return 0
    if ((SECONDS >= deadline)); then
      info "health log of $2:"
      docker inspect -f '{{range .State.Health.Log}}      exit {{.ExitCode}}: {{.Output}}{{end}}' "$id" | tail -n 6 >&2 || true
      fail "service $2 is '$state' after $3s, not healthy"
    fi
    sleep 1
  done
}

# canary_status: GET /api/v1/canaries/app; sets PHASE and STATUS_LINE.
canary_status() {
  api GET /api/v1/canaries/app
  if [[ $API_STATUS == 200 ]]; then
    PHASE=$(jget .status.phase .state.phase .phase <<<"$API_BODY")
    STATUS_LINE="phase=$PHASE canaryWeight=$(jget .status.canaryWeight .state.canaryWeight .canaryWeight <<<"$API_BODY")"
    STATUS_LINE+=" failedChecks=$(jget .status.failedChecks .state.failedChecks .failedChecks <<<"$API_BODY")"
    STATUS_LINE+=" revision=$(jget .status.revision .state.revision .revision <<<"$API_BODY")"
    CANARY_MESSAGE=$(jget .status.message .state.message .message <<<"$API_BODY")
  else
    PHASE=""
    CANARY_MESSAGE=""
    STATUS_LINE="GET /api/v1/canaries/app → HTTP $API_STATUS $API_BODY"
  fi
}

# start_canary REVISION: POST /api/v1/canaries/app/start.
start_canary() {
  api POST /api/v1/canaries/app/start "{\"revision\":\"$1\"}"
  case $API_STATUS in
    200 | 201 | 202 | 204) info "POST /api/v1/canaries/app/start {\"revision\":\"$1\"} → $API_STATUS" ;;
    409) info "POST /api/v1/canaries/app/start → 409: a run is already in progress" ;;
    *) fail "POST /api/v1/canaries/app/start answered HTTP $API_STATUS: $API_BODY" ;;
  esac
}

# run_canary EXPECTED_PHASE TIMEOUT: poll canary "app" until a final phase
# (after it left the final phase it was in); prints every change.
run_canary() {
  local expected=$1 timeout=$2
  local t0=$SECONDS deadline=$((SECONDS + timeout)) last="" left_idle=0
  while ((SECONDS < deadline)); do
    canary_status
    if [[ $STATUS_LINE != "$last" ]]; then info "[+$((SECONDS - t0))s] $STATUS_LINE"; last=$STATUS_LINE; fi
    case $PHASE in
      Succeeded | Failed | Initialized | Initializing | "") ;;
      *) left_idle=1 ;;
    esac
    # A final phase counts once the run has been seen in progress (the
    # previous run's phase is still shown until the start is picked up).
    if ((left_idle)) && [[ $PHASE == Succeeded || $PHASE == Failed ]]; then break; fi
    sleep 1
  done
  ((left_idle)) || fail "canary app: no run seen in progress within ${timeout}s (last: $STATUS_LINE)"
  [[ $PHASE == "$expected" ]] ||
    fail "canary app: expected phase $expected, got '${PHASE:-none}' after $((SECONDS - t0))s (last: $STATUS_LINE; message: $CANARY_MESSAGE)"
  info "phase $expected after $((SECONDS - t0))s: $CANARY_MESSAGE"
}

# ---------------------------------------------------------------------------
step "build the image"
if [[ ${WEIR_SKIP_BUILD:-0} == 1 ]]; then
  info "WEIR_SKIP_BUILD=1: using $image as it is"
  docker image inspect "$image" >/dev/null 2>&1 || fail "no image $image"
else
  "$here/build.sh" "$image" || fail "docker/build.sh failed"
fi
ok

step "check the image"
size=$(docker image inspect -f '{{.Size}}' "$image")
size_mb=$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1000000 }')
info "size: $size bytes ($size_mb MB), limit $max_image_bytes"
((size < max_image_bytes)) || fail "image is $size bytes, over $max_image_bytes"
user=$(docker image inspect -f '{{.Config.User}}' "$image")
[[ $user == 65532* ]] || fail "image user is '$user', expected 65532"
entry=$(docker image inspect -f '{{json .Config.Entrypoint}}' "$image")
[[ $entry == '["/usr/local/bin/weir"]' ]] || fail "entrypoint is $entry"
hc=$(docker image inspect -f '{{json .Config.Healthcheck.Test}}' "$image")
[[ $hc == *'"probe"'* ]] || fail "health check is $hc, expected weir probe"
layers=$(docker history -q "$image" | wc -l)
info "user $user, entrypoint $entry, health check $hc, $layers layers"
version=$(docker run --rm "$image" --version) || fail "the image does not run: docker run $image --version"
info "runs: $version"
ok

step "validate the configs inside the image"
cp "$here/config/ingress.yaml" "$here/config/sidecar.yaml" "$tmp/config/"
test_pace "$tmp/config/ingress.yaml"
# A fresh admin token per run (the ingress API listens on 0.0.0.0 inside its
# container, so weir requires one), readable by uid 65532.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/config/admin-token"
chmod 0644 "$tmp/config/admin-token" "$tmp/config/"*.yaml
token=$(cat "$tmp/config/admin-token")
for c in ingress sidecar; do
  out=$(docker run --rm -v "$tmp/config:/etc/weir:ro" "$image" check -c "/etc/weir/$c.yaml" 2>&1) ||
    fail "weir check rejects docker/config/$c.yaml: $out"
  info "$out"
done
ok

step "sidecar: traffic split through the published port"
out=$(sidecar up -d 2>&1) || fail "compose up failed: $out"
sc_port=$(sidecar port app 8080 | sed 's/.*://')
[[ -n $sc_port ]] || fail "no published port for app:8080"
deadline=$((SECONDS + 60))
until [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$sc_port/" || true) == 200 ]]; do
  ((SECONDS < deadline)) || fail "nothing answers 200 on 127.0.0.1:$sc_port after 60s"
  sleep 0.2
done
# 20% to app-v2: with 100 requests, P(no v2 at all) = 0.8^100 ≈ 2e-10.
sample "$sc_port" 100 >"$tmp/sidecar.txt"
info "100 requests (canaryWeight 20):"
tally "$tmp/sidecar.txt"
grep -qx '200 v1' "$tmp/sidecar.txt" || fail "the app in the shared namespace (127.0.0.1:9001) never answered"
grep -qx '200 v2' "$tmp/sidecar.txt" || fail "app-v2 never answered (DNS of a Compose service from the shared namespace?)"
! grep -qv '^200 ' "$tmp/sidecar.txt" || fail "some requests did not answer 200"
sample "$sc_port" 10 -H 'x-canary: always' >"$tmp/sidecar-match.txt"
only "$tmp/sidecar-match.txt" '200 v2' || fail "x-canary: always did not always reach app-v2: $(tr '\n' ' ' <"$tmp/sidecar-match.txt")"
info "x-canary: always → v2 (10/10)"
# The control API listens on the shared namespace's loopback, without a token.
out=$(sidecar exec -T weir /usr/local/bin/weir ctl status 2>&1) ||
  fail "weir ctl status inside the sidecar failed: $out"
info "weir ctl status in the sidecar: $(head -n 1 <<<"$out")"
keep_logs sidecar
sidecar down -v -t 5 >/dev/null 2>&1 || fail "compose down failed"
ok

step "ingress: compose up, traffic through the published port"
up_start=$(date +%s%N)
out=$(ingress up -d 2>&1) || fail "compose up failed: $out"
http_port=$(ingress port weir 8080 | sed 's/.*://')
admin_port=$(ingress port weir 9901 | sed 's/.*://')
[[ -n $http_port && -n $admin_port ]] || fail "no published ports for weir:8080 / weir:9901"
info "proxy on 127.0.0.1:$http_port, control API on 127.0.0.1:$admin_port"
# Poll both until the proxy answers and /readyz is up (or 60s went by), and
# note when each first did: the startup time is measured from `up`.
ready_ms="" traffic_ms=""
deadline=$((SECONDS + 60))
while [[ -z $traffic_ms || -z $ready_ms ]] && ((SECONDS < deadline)); do
  now=$(date +%s%N)
  if [[ -z $ready_ms ]] && curl -fs -o /dev/null --max-time 1 -H "Authorization: Bearer $token" \
    "http://127.0.0.1:$admin_port/readyz"; then
    ready_ms=$(((now - up_start) / 1000000))
  fi
  if [[ -z $traffic_ms && $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$http_port/" || true) == 200 ]]; then
    traffic_ms=$(((now - up_start) / 1000000))
  fi
  sleep 0.1
done
[[ -n $traffic_ms ]] || fail "the proxy did not answer 200 on 127.0.0.1:$http_port within 60s"
info "first 200 through the proxy ${traffic_ms} ms after 'compose up'"
# The proxy reaches app-primary:9001 by its Compose service name: static
# glibc's resolver, in a scratch image, against Docker's DNS.
sample "$http_port" 20 >"$tmp/ingress-0.txt"
only "$tmp/ingress-0.txt" '200 v1' || { tally "$tmp/ingress-0.txt"; fail "with canaryWeight 0, not every answer was 200 from v1"; }
info "20/20 answered by v1 (app-primary:9001, resolved by name)"
ok

step "ingress: /readyz answers (startup time)"
[[ -n $ready_ms ]] || fail "/readyz on 127.0.0.1:$admin_port did not answer 2xx within 60s of 'compose up'"
info "startup: 'compose up' → /readyz 200 in ${ready_ms} ms"
ok

step "ingress: the image's health check reports healthy"
# Docker runs the first check one interval (5s) after the start.
wait_health ingress weir 40
wait_health ingress app-primary 40
wait_health ingress app-canary 40
info "weir, app-primary and app-canary: healthy ('weir probe' in a scratch image)"
ok

step "ingress: canaryWeight 50 via the API, both versions answer"
api PATCH /api/v1/routes/app '{"canaryWeight": 50}'
[[ $API_STATUS == 200 || $API_STATUS == 204 ]] || fail "PATCH /api/v1/routes/app answered HTTP $API_STATUS: $API_BODY"
get_route
w=$(rf_weight)
[[ $w == 50 ]] || fail "GET /api/v1/routes/app: canaryWeight is '$w' after the PATCH, expected 50"
# P(one side missing in 60 draws at 50%) = 2 · 0.5^60 ≈ 2e-18.
sample "$http_port" 60 >"$tmp/ingress-50.txt"
info "60 requests at canaryWeight 50:"
tally "$tmp/ingress-50.txt"
grep -qx '200 v1' "$tmp/ingress-50.txt" || fail "v1 (app-primary) never answered at weight 50"
grep -qx '200 v2' "$tmp/ingress-50.txt" || fail "v2 (app-canary) never answered at weight 50"
! grep -qv '^200 ' "$tmp/ingress-50.txt" || fail "some requests did not answer 200"
# Back to 0 with `weir ctl` inside the container (token from WEIR_TOKEN_FILE).
out=$(ingress exec -T weir /usr/local/bin/weir ctl set-weight app 0 2>&1) ||
  fail "docker compose exec weir weir ctl set-weight app 0 failed: $out"
sample "$http_port" 20 >"$tmp/ingress-0b.txt"
only "$tmp/ingress-0b.txt" '200 v1' || fail "after canaryWeight 0 again, not every answer came from v1"
info "back to canaryWeight 0 with 'weir ctl set-weight' in the container: 20/20 from v1"
ok

step "ingress: canary release to promotion"
get_route
primary_before=$(rf primary)
slot=$(rf canary)
[[ $slot == app-primary || $slot == app-canary ]] || fail "GET /api/v1/routes/app: canary slot is '$slot'"
info "primary $primary_before, canary slot $slot (already running v2)"
canary_status
info "before: $STATUS_LINE"
start_load "$tmp/load-promote.txt"
start_canary v2
run_canary Succeeded 120
stop_load
info "load during the run: $(sort "$tmp/load-promote.txt" | uniq -c | tr -s ' \n' ' ')"
(($(wc -l <"$tmp/load-promote.txt") >= 100)) || fail "the load generator sent fewer than 100 requests"
! grep -qv '^200$' "$tmp/load-promote.txt" || fail "requests failed during a healthy release"
get_route
primary_after=$(rf primary)
w=$(rf_weight)
info "after promotion: primary $primary_after, canaryWeight $w"
[[ $w == 0 ]] || fail "canaryWeight is '$w' after promotion, expected 0"
# With `promotion: swap` the canary slot becomes the primary.
[[ $primary_after == "$slot" ]] || fail "primary is '$primary_after' after promotion, expected the promoted slot $slot"
sample "$http_port" 40 >"$tmp/promoted.txt"
only "$tmp/promoted.txt" '200 v2' || { tally "$tmp/promoted.txt"; fail "after promotion not every answer came from v2"; }
info "40/40 answered by v2 through the published port"
# rollout.stateDir is /var/lib/weir, a volume in a read-only container: the
# engine (uid 65532) must have written the run's state there.
state=$(docker cp "$(ingress ps -q weir):/var/lib/weir/app.json" - 2>/dev/null | tar -xO 2>/dev/null || true)
[[ -n $state ]] || fail "no state file /var/lib/weir/app.json in the weir container (rollout.stateDir)"
info "state file /var/lib/weir/app.json written ($(wc -c <<<"$state") bytes)"
ok

step "ingress: canary release to rollback (--error-rate 0.5)"
get_route
slot=$(rf canary)
[[ $slot == app-primary || $slot == app-canary ]] || fail "GET /api/v1/routes/app: idle (canary) slot is '$slot'"
var=$(tr 'a-z-' 'A-Z_' <<<"$slot")
info "deploying v3 (500 on half of the requests) to the idle slot $slot"
env "${var}_VERSION=v3" "${var}_ERROR_RATE=0.5" \
  WEIR_IMAGE="$image" WEIR_CONFIG_DIR="$tmp/config" WEIR_HTTP_PORT='' WEIR_ADMIN_PORT='' \
  "${COMPOSE[@]}" -p "$ingress_project" -f "$here/compose.ingress.yaml" \
  up -d --no-deps --force-recreate "$slot" >"$tmp/recreate.log" 2>&1 ||
  fail "could not recreate $slot: $(cat "$tmp/recreate.log")"
wait_health ingress "$slot" 40
start_load "$tmp/load-rollback.txt"
# The compose release flow: with watchRevision the engine sees the new
# revision on the canary slot and starts by itself; if it has not within
# 20s, start it through the API.
auto=0
deadline=$((SECONDS + 20))
while ((SECONDS < deadline)); do
  canary_status
  case $PHASE in
    Succeeded | Failed | Initialized | Initializing | "") sleep 1 ;;
    *) auto=1; break ;;
  esac
done
if ((auto)); then
  info "the engine started the run by itself (watchRevision): $STATUS_LINE"
else
  info "no run started by watchRevision within 20s: starting it through the API"
  start_canary v3
fi
run_canary Failed 120
stop_load
info "load during the run: $(sort "$tmp/load-rollback.txt" | uniq -c | tr -s ' \n' ' ')"
grep -qx '500' "$tmp/load-rollback.txt" || fail "no 500 during the run: did v3 get any traffic?"
get_route
p=$(rf primary)
w=$(rf_weight)
info "after rollback: primary $p, canaryWeight $w"
[[ $w == 0 ]] || fail "canaryWeight is '$w' after rollback, expected 0"
[[ $p == "$primary_after" ]] || fail "primary changed to '$p' on rollback (was $primary_after)"
sample "$http_port" 40 >"$tmp/rolledback.txt"
only "$tmp/rolledback.txt" '200 v2' || { tally "$tmp/rolledback.txt"; fail "after rollback not every answer was a 200 from v2"; }
info "40/40 answered by v2 through the published port, none by v3"
ok

step "tear down"
keep_logs ingress
down_start=$SECONDS
ingress down -v --remove-orphans -t 40 >/dev/null 2>&1 || fail "compose down failed"
left=$(docker ps -aq --filter "label=com.docker.compose.project=$ingress_project")
[[ -z $left ]] || fail "containers left after down: $left"
info "down in $((SECONDS - down_start))s"
ok
finished=1

printf '\nimage %s: %s bytes (%s MB)\n' "$image" "$size" "$size_mb"
printf "startup: 'compose up' → first proxied 200 in %s ms, → /readyz in %s ms\n" "$traffic_ms" "$ready_ms"
printf 'total: %ss\n' "$((SECONDS - script_start))"
printf 'docker-test: %d passed, 0 failed\n' "$passed"
