#!/usr/bin/env bash
# docker/test-provider.sh: the Docker provider (backends from container labels,
# DESIGN §16) with the real Docker Engine and Compose.
#
#   1. build the image (docker/build.sh; WEIR_SKIP_BUILD=1 reuses it);
#   2. weir check of the labelled configs inside the image (it names the
#      backends the provider fills);
#   3. a read-only socket proxy (docker/socket-proxy.py) in front of the
#      daemon's socket: weir reaches the daemon only through it;
#   4. the labelled ingress stack comes up and serves;
#   5. the primary slot scaled to 3 replicas: 3 endpoints, no failed request;
#   6. a release: `up -d` of the idle slot with a new revision starts, analyses
#      and promotes a run, no request lost;
#   7. a release whose container never turns healthy: its run starts, waits for
#      the slot, and is rolled back when the slot's rolling update stalls after
#      its progressDeadline; no request reaches it;
#   8. the daemon connection cut (socket proxy outage): traffic keeps flowing,
#      the disconnect is reported (/readyz, /api/v1/providers, /metrics), and
#      the provider reconnects and re-lists;
#   9. the labelled sidecar stack serves its labelled canary;
#  10. tear-down.
#
# Ports are published on 127.0.0.1 only (free ones chosen by Docker); Compose
# project names are unique per run (the daemon is shared) and everything is
# removed on exit, failed or not.
#
# Needs: docker (Engine, and Compose v2 `docker compose` or v1 `docker-compose`),
# curl >= 7.84, python3, a Rust toolchain (for the build).
# Environment: WEIR_IMAGE (default weir:dev), WEIR_SKIP_BUILD=1, WEIR_SKIP_CARGO=1,
# KEEP_LOGS=DIR.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image=${WEIR_IMAGE:-weir:dev}
run_id="$$-$RANDOM"
ingress_project="weirprov-ingress-$run_id"
sidecar_project="weirprov-sidecar-$run_id"
script_start=$SECONDS

STEPS=(
  "build the image"
  "validate the labelled configs inside the image"
  "start the read-only socket proxy"
  "ingress: compose up, the labelled slots serve"
  "ingress: scale the primary to 3 replicas without a failed request"
  "ingress: up -d of the idle slot with a new revision promotes it"
  "ingress: a release that never turns healthy stalls and is rolled back"
  "ingress: the daemon connection cut keeps traffic flowing"
  "sidecar: the labelled canary serves"
  "tear down"
)
passed=0
current=""
finished=0


# step, ok, info, fail (and find_compose): docker/lib.sh.
. "$here/lib.sh"
find_compose

tmp=$(mktemp -d)
chmod 0755 "$tmp"
mkdir -m 0755 "$tmp/config" "$tmp/sock"
load_pid=""
proxy_pid=""

# stack [VAR=VALUE...] -- COMPOSE ARGS: the ingress stack, with per-call variables.
ingress() {
  WEIR_IMAGE=$image WEIR_CONFIG_DIR=$tmp/config WEIR_HTTP_PORT='' WEIR_ADMIN_PORT='' \
    DOCKER_SOCKET=$tmp/sock/docker.sock \
    "${COMPOSE[@]}" -p "$ingress_project" -f "$here/compose.ingress.labels.yaml" "$@"
}
sidecar() {
  WEIR_IMAGE=$image WEIR_CONFIG_DIR=$tmp/config WEIR_SIDECAR_PORT='' \
    DOCKER_SOCKET=$tmp/sock/docker.sock \
    "${COMPOSE[@]}" -p "$sidecar_project" -f "$here/compose.sidecar.labels.yaml" "$@"
}

keep_logs() {
  if [[ -n ${KEEP_LOGS:-} && -n $("$1" ps -q 2>/dev/null) ]]; then
    mkdir -p "$KEEP_LOGS"
    "$1" logs --no-color >"$KEEP_LOGS/provider-$1.log" 2>&1 || true
  fi
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $load_pid ]]; then kill "$load_pid" 2>/dev/null || true; fi
  if ((rc != 0 && finished == 0)); then
    for s in ingress sidecar; do
      if [[ $current == $s* ]]; then
        echo "---- $s: state" >&2
        "$s" ps >&2 2>&1 || true
        echo "---- $s: last log lines of weir" >&2
        "$s" logs --no-color --tail 60 weir >&2 2>&1 || true
      fi
    done
    [[ -f $tmp/proxy.log ]] && { echo "---- socket proxy log" >&2; tail -n 20 "$tmp/proxy.log" >&2; }
  fi
  keep_logs ingress
  keep_logs sidecar
  ingress down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
  sidecar down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
  if [[ -n $proxy_pid ]]; then kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
  if ((rc != 0)); then
    local i
    for ((i = passed + 1; i < ${#STEPS[@]}; i++)); do
      printf '    not run: %s\n' "${STEPS[$i]}" >&2
    done
    printf 'docker-provider-test: %d passed, 1 failed\n' "$passed"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'printf "    (command failed at line %s: %s)\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------------------
# Helpers

# py EXPR: evaluates a Python expression over the JSON document `d` read from
# stdin (empty output when stdin is not JSON or the expression fails).
py() {
  python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
    v = eval(sys.argv[1])
except Exception:
    sys.exit(0)
print(json.dumps(v) if isinstance(v, (dict, list, bool)) or v is None else v)
' "$1"
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

# provider EXPR: EXPR over `p`, the docker provider's document of GET /api/v1/providers.
provider() {
  api GET /api/v1/providers
  [[ $API_STATUS == 200 ]] || { echo ""; return 0; }
  py "(lambda p: $1)(d['providers'][0])" <<<"$API_BODY"
}

# sample PORT N: N requests over one connection; "STATUS VERSION" per line.
sample() {
  curl -s -o /dev/null --max-time 60 -w '%{http_code} %header{x-weir-version}\n' \
    "http://127.0.0.1:$1/sample?i=[1-$2]" || true
}
tally() { sort "$1" | uniq -c | sed 's/^ */      /'; }
only() { [[ -s $1 ]] && ! grep -qvx "$2" "$1"; }

# start_load FILE / stop_load: 50 rps through the proxy (test_pace in lib.sh says
# why), one status per line.
start_load() {
  curl -s -o /dev/null --rate 50/s --max-time 600 -w '%{stderr}%{http_code} %header{x-weir-version}\n' \
    "http://127.0.0.1:$http_port/load?i=[1-12000]" 2>"$1" &
  load_pid=$!
}
stop_load() {
  if [[ -n $load_pid ]]; then
    kill "$load_pid" 2>/dev/null || true
    wait "$load_pid" 2>/dev/null || true
    load_pid=""
  fi
}
# no_loss FILE WHAT: every answer in FILE was a 200 (and there were some).
no_loss() {
  local n
  n=$(wc -l <"$1")
  ((n >= 20)) || fail "$2: only $n requests were sent"
  if grep -qv '^200 ' "$1"; then
    tally "$1"
    fail "$2: $(grep -cv '^200 ' "$1") of $n requests did not answer 200"
  fi
  info "$2: $n requests, all 200 ($(cut -d' ' -f2 "$1" | sort | uniq -c | tr -s ' \n' ' '))"
}

# wait_for WHAT TIMEOUT CMD...: until CMD succeeds.
wait_for() {
  local what=$1 timeout=$2 deadline=$((SECONDS + $2))
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || fail "$what: not within ${timeout}s"
    sleep 0.5
  done
}

# canary_status: PHASE, WEIGHT and STATUS_LINE of canary "app".
canary_status() {
  api GET /api/v1/canaries/app
  PHASE=$(py "d.get('status', d).get('phase')" <<<"$API_BODY")
  WEIGHT=$(py "d.get('status', d).get('canaryWeight', 0)" <<<"$API_BODY")
  REVISION=$(py "d.get('status', d).get('revision')" <<<"$API_BODY")
  MESSAGE=$(py "d.get('status', d).get('message')" <<<"$API_BODY")
  STATUS_LINE="phase=$PHASE canaryWeight=$WEIGHT revision=$REVISION"
}

# run_canary EXPECTED TIMEOUT: until the run seen in progress ends.
run_canary() {
  local expected=$1 t0=$SECONDS deadline=$((SECONDS + $2)) last="" left_idle=0
  while ((SECONDS < deadline)); do
    canary_status
    if [[ $STATUS_LINE != "$last" ]]; then info "[+$((SECONDS - t0))s] $STATUS_LINE"; last=$STATUS_LINE; fi
    case $PHASE in
      Succeeded | Failed | Initialized | Initializing | "") ;;
      *) left_idle=1 ;;
    esac
    if ((left_idle)) && [[ $PHASE == Succeeded || $PHASE == Failed ]]; then break; fi
    sleep 1
  done
  ((left_idle)) || fail "no run seen in progress within $2s (last: $STATUS_LINE; $MESSAGE)"
  [[ $PHASE == "$expected" ]] || fail "expected phase $expected, got '$PHASE' (last: $STATUS_LINE; $MESSAGE)"
  info "phase $expected after $((SECONDS - t0))s: $MESSAGE"
}

route_field() {
  api GET /api/v1/routes/app
  py "d.get('route', d).get('$1')" <<<"$API_BODY"
}

endpoints_of() { provider "len(p['backends'].get('$1', {}).get('endpoints', []))"; }

# ---------------------------------------------------------------------------
step "build the image"
if [[ ${WEIR_SKIP_BUILD:-0} == 1 ]]; then
  info "WEIR_SKIP_BUILD=1: using $image as it is"
  docker image inspect "$image" >/dev/null 2>&1 || fail "no image $image"
else
  "$here/build.sh" "$image" || fail "docker/build.sh failed"
fi
ok

step "validate the labelled configs inside the image"
cp "$here/config/ingress-labels.yaml" "$here/config/sidecar-labels.yaml" "$tmp/config/"
test_pace "$tmp/config/ingress-labels.yaml"
# The stalled release is rolled back at the slot's progressDeadline: 15s
# here, 30s in the example.
sed -i 's/progressDeadline: 30s/progressDeadline: 15s/' "$tmp/config/ingress-labels.yaml"
grep -q 'progressDeadline: 15s' "$tmp/config/ingress-labels.yaml" || fail "no progressDeadline: 30s in ingress-labels.yaml"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/config/admin-token"
chmod 0644 "$tmp/config/admin-token" "$tmp/config/"*.yaml
token=$(cat "$tmp/config/admin-token")
for c in ingress-labels sidecar-labels; do
  out=$(docker run --rm -v "$tmp/config:/etc/weir:ro" "$image" check -c "/etc/weir/$c.yaml" 2>&1) ||
    fail "weir check rejects docker/config/$c.yaml: $out"
  grep -q 'note: backends\..*providers.docker fills them' <<<"$out" ||
    fail "weir check does not say which backends the provider fills: $out"
  while IFS= read -r l; do info "$l"; done <<<"$out"
done
ok

step "start the read-only socket proxy"
python3 "$here/socket-proxy.py" "$tmp/sock/docker.sock" /var/run/docker.sock 2>"$tmp/proxy.log" &
proxy_pid=$!
wait_for "the socket proxy to listen" 10 test -S "$tmp/sock/docker.sock"
[[ $(curl -s --max-time 5 --unix-socket "$tmp/sock/docker.sock" http://docker/_ping) == OK ]] ||
  fail "GET /_ping through the proxy did not answer OK"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST --unix-socket "$tmp/sock/docker.sock" \
  http://docker/containers/create)
[[ $code == 403 ]] || fail "POST /containers/create through the proxy answered $code, expected 403"
info "GET /_ping passes, POST /containers/create is refused (403)"
ok

step "ingress: compose up, the labelled slots serve"
out=$(ingress up -d 2>&1) || fail "compose up failed: $out"
http_port=$(ingress port weir 8080 | sed 's/.*://')
admin_port=$(ingress port weir 9901 | sed 's/.*://')
[[ -n $http_port && -n $admin_port ]] || fail "no published ports"
info "proxy on 127.0.0.1:$http_port, control API on 127.0.0.1:$admin_port"
wait_for "app-blue and app-green filled from their labels" 60 \
  eval '[[ $(endpoints_of app-blue) == 1 && $(endpoints_of app-green) == 1 ]]'
info "provider: $(provider "{'connected': p['connected'], 'backends': {k: v['endpoints'] for k, v in p['backends'].items()}}")"
wait_for "the proxy to answer 200" 60 \
  eval '[[ $(curl -s -o /dev/null -w "%{http_code}" --max-time 2 "http://127.0.0.1:$http_port/" || true) == 200 ]]'
sample "$http_port" 20 >"$tmp/up.txt"
only "$tmp/up.txt" '200 v1' || { tally "$tmp/up.txt"; fail "not every answer was 200 from v1"; }
info "20/20 answered by v1 (app-blue, found by its labels)"
canary_status
info "canary: $STATUS_LINE"
ok

step "ingress: scale the primary to 3 replicas without a failed request"
start_load "$tmp/load-scale.txt"
sleep 2
out=$(ingress up -d --no-recreate --scale app-blue=3 app-blue 2>&1) || fail "scale failed: $out"
wait_for "3 endpoints in app-blue" 60 eval '[[ $(endpoints_of app-blue) == 3 ]]'
api GET /api/v1/backends/app-blue
wait_for "the rolling update of app-blue to complete" 60 \
  eval 'api GET /api/v1/backends/app-blue; [[ $(py "len(d.get(\"rotation\", d.get(\"endpoints\", [])))" <<<"$API_BODY") -ge 3 && $API_BODY == *Complete* ]]'
sleep 3
stop_load
no_loss "$tmp/load-scale.txt" "load during the scale-up"
info "app-blue: $(provider "p['backends']['app-blue']['endpoints']")"
ok

step "ingress: up -d of the idle slot with a new revision promotes it"
slot=$(route_field canary)
[[ $slot == app-green ]] || fail "the idle slot is '$slot', expected app-green"
start_load "$tmp/load-release.txt"
sleep 2
out=$(APP_GREEN_VERSION=v2 ingress up -d app-green 2>&1) || fail "up -d app-green failed: $out"
info "APP_GREEN_VERSION=v2 ${COMPOSE[*]} up -d app-green"
run_canary Succeeded 180
sleep 2
stop_load
no_loss "$tmp/load-release.txt" "load during the release"
[[ $REVISION == v2 ]] || fail "the run's revision is '$REVISION', expected v2 (from weir.revision)"
primary=$(route_field primary)
[[ $primary == app-green ]] || fail "primary is '$primary' after promotion, expected app-green"
sample "$http_port" 20 >"$tmp/promoted.txt"
only "$tmp/promoted.txt" '200 v2' || { tally "$tmp/promoted.txt"; fail "not every answer came from v2"; }
info "primary app-green, 20/20 answered by v2"
ok

step "ingress: a release that never turns healthy stalls and is rolled back"
start_load "$tmp/load-broken.txt"
out=$(APP_BLUE_VERSION=v3 APP_BLUE_HEALTH_PORT=9999 ingress up -d app-blue 2>&1) ||
  fail "up -d app-blue failed: $out"
info "APP_BLUE_VERSION=v3 (HEALTHCHECK never passes) ${COMPOSE[*]} up -d app-blue"
# The new revision starts a run at once; it waits for the slot, whose rolling
# update stalls after its progressDeadline (15s here): the run is rolled back.
run_canary Failed 180
[[ $REVISION == v3 ]] || fail "the failed run's revision is '$REVISION', expected v3"
[[ $WEIGHT == 0 ]] || fail "canaryWeight is $WEIGHT after the rollback"
api GET /api/v1/canaries/app
waited=$(py "any(e['reason'] == 'WaitingCanary' for e in d.get('status', d)['events'])" <<<"$API_BODY")
[[ $waited == true ]] || fail "no WaitingCanary event: the run did not wait for the slot"
rolled=$(py "[e['message'] for e in d.get('status', d)['events'] if e['reason'] == 'RolledBack'][-1:]" <<<"$API_BODY")
[[ $rolled == *"progress deadline exceeded"* ]] || fail "the rollback does not name the deadline: $rolled"
info "rolled back: $rolled"
api GET /api/v1/backends/app-blue
stalled=$(py "[e['message'] for e in d['rollingUpdate']['events'] if e['kind'] == 'stalled']" <<<"$API_BODY")
[[ $stalled != "[]" ]] || fail "app-blue's rolling update did not report a stall"
info "app-blue rolling update: stalled $stalled"
info "provider: $(provider "[(c['name'], c['revision'], c['ready'], c.get('reason')) for c in p['containers'] if c['backend'] == 'app-blue']")"
sleep 2
stop_load
no_loss "$tmp/load-broken.txt" "load during the broken release and its rollback"
cut -d' ' -f2 "$tmp/load-broken.txt" >"$tmp/load-broken-versions.txt"
only "$tmp/load-broken-versions.txt" v2 || fail "some answers did not come from the primary (v2)"
info "every answer from the primary (v2): the v3 container never served"
ok

step "ingress: the daemon connection cut keeps traffic flowing"
syncs_before=$(provider "p['syncs']")
start_load "$tmp/load-outage.txt"
sleep 1
kill -USR1 "$proxy_pid"
wait_for "/readyz to report the provider disconnected" 30 \
  eval '[[ $(curl -s --max-time 2 "http://127.0.0.1:$admin_port/readyz" | py "d[\"providers\"][0][\"connected\"]") == false ]]'
readyz=$(curl -s -w ' %{http_code}' --max-time 2 "http://127.0.0.1:$admin_port/readyz")
info "/readyz: $readyz"
[[ $readyz == *' 200' ]] || fail "/readyz is not 200 while only the provider is disconnected: $readyz"
metrics=$(curl -s --max-time 5 -H "Authorization: Bearer $token" "http://127.0.0.1:$admin_port/metrics")
grep -qx 'weir_provider_connected{provider="docker"} 0' <<<"$metrics" || fail "weir_provider_connected is not 0"
info "$(grep '^weir_provider_' <<<"$metrics" | tr '\n' ' ')"
info "api: $(provider "{'connected': p['connected'], 'lastError': p.get('lastError'), 'disconnects': p['disconnects'], 'app-green': p['backends']['app-green']['endpoints']}")"
sleep 5
kill -USR2 "$proxy_pid"
wait_for "the provider to reconnect" 60 eval '[[ $(provider "p[\"connected\"]") == true ]]'
syncs_after=$(provider "p['syncs']")
((syncs_after > syncs_before)) || fail "no re-list after the reconnect (syncs $syncs_before → $syncs_after)"
sleep 1
stop_load
no_loss "$tmp/load-outage.txt" "load during the outage"
info "reconnected and re-listed (syncs $syncs_before → $syncs_after)"
keep_logs ingress
ingress down -v --remove-orphans -t 5 >/dev/null 2>&1 || fail "compose down failed"
ok

step "sidecar: the labelled canary serves"
out=$(sidecar up -d 2>&1) || fail "compose up failed: $out"
sc_port=$(sidecar port app 8080 | sed 's/.*://')
[[ -n $sc_port ]] || fail "no published port for app:8080"
wait_for "the labelled app-v2 to answer" 60 \
  eval '[[ $(curl -s -o /dev/null -w "%{header_json}" -H "x-canary: always" --max-time 2 "http://127.0.0.1:$sc_port/" | py "d.get(\"x-weir-version\", [\"\"])[0]") == v2 ]]'
sample "$sc_port" 100 >"$tmp/sidecar.txt"
info "100 requests (canaryWeight 20):"
tally "$tmp/sidecar.txt"
grep -qx '200 v1' "$tmp/sidecar.txt" || fail "the app in the shared namespace never answered"
grep -qx '200 v2' "$tmp/sidecar.txt" || fail "the labelled app-v2 never answered"
! grep -qv '^200 ' "$tmp/sidecar.txt" || fail "some requests did not answer 200"
keep_logs sidecar
sidecar down -v -t 5 >/dev/null 2>&1 || fail "compose down failed"
ok

step "tear down"
for p in "$ingress_project" "$sidecar_project"; do
  left=$(docker ps -aq --filter "label=com.docker.compose.project=$p")
  [[ -z $left ]] || fail "containers left in $p: $left"
done
ok
finished=1
printf '\ntotal: %ss\n' "$((SECONDS - script_start))"
printf 'docker-provider-test: %d passed, 0 failed\n' "$passed"
