#!/usr/bin/env bash
# docker/test-cluster.sh: a weir fleet (docs/cluster.md) in containers, with a real
# etcd secured as docs/cluster.md#securing-etcd says, and a real network partition.
#
#   networks  data: the echo slots and the replicas' proxies
#             ctrl: etcd and the replicas' control APIs (the owner drives the others)
#   etcd      the host's /usr/bin/etcd in a FROM-scratch image (nothing is pulled),
#             over TLS only, requiring client certificates (--client-cert-auth), with
#             authentication on: user `weir` may read and write /weir/, nothing else
#   certs     made by this script with openssl: a CA; etcd's certificate (for `etcd`
#             and 127.0.0.1, usable as a client certificate too: etcd's JSON gateway
#             dials etcd with it); weir's client certificate (no Common Name: with
#             authentication on, etcd refuses a gateway request whose certificate has one)
#   w0 w1 w2  weir replicas: cluster {etcd: https://etcd:2379, etcdTls (the CA, the
#             client certificate), etcdAuth (weir), replicas: 3, heartbeat: 1s → lease
#             TTL 3s}, three routes c0..c2 (hosts cN.test) on the slots app-v1 / app-v2,
#             three canaries (interval 2s, steps 10..50, success rate ≥ 99%)
#
#   1. images: weir (docker/build.sh unless WEIR_SKIP_BUILD=1) and etcd; certificates
#   2. etcd up: no answer without a client certificate, nothing without a user; the
#      fleet up: every canary owned by exactly one replica
#   3. a run of every canary, traffic through every replica's published port
#   4. partition the replica owning the most canaries from `ctrl`
#      (`docker network disconnect`): it reports not ready (no lease), owns nothing,
#      writes nothing to its table, and keeps proxying; its canaries are re-owned by
#      the others within lease TTL + heartbeat (+ slack), each exactly once
#   5. the runs continue to promotion on the new owners
#   6. reconnect: the replica rejoins, every canary owned once, and the promoted routes
#      are re-asserted on its table
#   7. tear-down (always, failed or not)
#
# Ports are published on 127.0.0.1 only (Docker picks them); names are unique per run.
# Needs: docker, curl, openssl, python3, /usr/bin/etcd on the host (Debian: etcd-server).
# Environment: WEIR_IMAGE (default weir:dev), WEIR_SKIP_BUILD=1 (use the image as
# it is), ETCD_BIN (default: `command -v etcd`), KEEP_LOGS=DIR.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image=${WEIR_IMAGE:-weir:dev}
run_id="$$-$RANDOM"
prefix="weirfleet-$run_id"
etcd_image="weir-test-etcd:$run_id"
token="fleet-test-token-$run_id-0123456789"
etcd_password="etcd-weir-$run_id-$RANDOM$RANDOM"
heartbeat_s=1
ttl_s=3
slack_s=20
script_start=$SECONDS

STEPS=(
  "images: weir and etcd; certificates"
  "etcd over TLS with client certificates and users; fleet up: every canary owned exactly once"
  "a run of every canary under traffic"
  "partition: the cut-off replica stops, keeps proxying; its canaries are re-owned"
  "the runs continue to promotion on the new owners"
  "reconnect: the replica rejoins and gets the promoted routes"
  "tear down"
)
passed=0
current=""
containers=()
networks=()
load_pids=()

# step, ok, info, fail (and find_compose): docker/lib.sh.
. "$here/lib.sh"

tmp=$(mktemp -d)
chmod 0755 "$tmp"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if ((rc != 0)); then
    for c in "${containers[@]}"; do
      echo "---- last log lines of $c" >&2
      docker logs --tail 25 "$c" >&2 2>&1 || true
    done
  fi
  if [[ -n ${KEEP_LOGS:-} ]]; then
    mkdir -p "$KEEP_LOGS"
    for c in "${containers[@]}"; do docker logs "$c" >"$KEEP_LOGS/$c.log" 2>&1 || true; done
  fi
  for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done
  for n in "${networks[@]}"; do docker network rm "$n" >/dev/null 2>&1 || true; done
  docker rmi "$etcd_image" >/dev/null 2>&1 || true
  rm -rf "$tmp"
  if ((rc != 0)); then
    local i
    for ((i = passed + 1; i < ${#STEPS[@]}; i++)); do printf '    not run: %s\n' "${STEPS[$i]}" >&2; done
    printf 'docker-test-cluster: %d passed, 1 failed\n' "$passed"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------
# Helpers

# json EXPR: evaluates a Python expression over `d` (the JSON document on stdin);
# prints nothing when the input is not JSON.
json() {
  python3 -c '
import json, sys
try: d = json.load(sys.stdin)
except Exception: sys.exit(0)
r = eval(sys.argv[1])
print(json.dumps(r) if isinstance(r, (dict, list, bool)) or r is None else r)
' "$1"
}

declare -A admin_port proxy_port
replicas=(w0 w1 w2)
canaries=(c0 c1 c2)

# api REPLICA METHOD PATH [BODY]: prints the body; sets API_STATUS (000: unreachable).
api() {
  local r=$1 m=$2 p=$3 out
  local args=(-sS --max-time 5 -X "$m" -H "Authorization: Bearer $token" -H 'X-Weir-Request: 1' -w '\n%{http_code}')
  [[ $# -ge 4 ]] && args+=(-H 'Content-Type: application/json' --data "$4")
  if ! out=$(curl "${args[@]}" "http://127.0.0.1:${admin_port[$r]}$p" 2>/dev/null); then
    API_STATUS=000
    API_BODY=""
    return 0
  fi
  API_STATUS=${out##*$'\n'}
  API_BODY=${out%$'\n'*}
}

cluster_doc() { api "$1" GET /api/v1/cluster; echo "$API_BODY"; }

# owners REPLICA...: "canary=owner" for every canary driven by exactly one of these
# replicas (from each replica's own `owned` list), "canary=?" otherwise.
owners() {
  local -A by
  local r c
  for r in "$@"; do
    for c in $(cluster_doc "$r" | json '" ".join(d.get("owned", []))'); do
      by[$c]+="$r "
    done
  done
  for c in "${canaries[@]}"; do
    local who=(${by[$c]:-})
    if ((${#who[@]} == 1)); then echo "$c=${who[0]}"; else echo "$c=?(${who[*]:-none})"; fi
  done
}

# each_once REPLICA...: every canary driven by exactly one of them.
each_once() { ! owners "$@" | grep -q '?'; }

# until_ok SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.5 s.
until_ok() {
  local secs=$1 what=$2
  local deadline=$((SECONDS + secs))
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out after $secs s waiting for: $what"
    sleep 0.5
  done
}

# status REPLICA CANARY: "phase weight" on that replica (the owner's view if it owns it).
status() {
  api "$1" GET "/api/v1/canaries/$2"
  echo "$API_BODY" | json 'd["phase"] + " " + str(d.get("canaryWeight", 0))'
}

# owner_status CANARY REPLICA...: the status on the canary's owner among them.
owner_status() {
  local c=$1 r line
  shift
  for line in $(owners "$@"); do
    if [[ $line == "$c="* && $line != *"?"* ]]; then
      r=${line#*=}
      status "$r" "$c"
      return
    fi
  done
  echo "none 0"
}

all_phase() { # PHASE MIN_WEIGHT REPLICA...
  local want=$1 min=$2 c s
  shift 2
  for c in "${canaries[@]}"; do
    s=$(owner_status "$c" "$@")
    [[ ${s% *} == "$want" && ${s#* } -ge $min ]] || return 1
  done
}

# table_version REPLICA: the table's version (the ETag of GET /api/v1/table).
table_version() {
  curl -sS --max-time 5 -o /dev/null -D - -H "Authorization: Bearer $token" \
    "http://127.0.0.1:${admin_port[$1]}/api/v1/table" | tr -d '\r"' | awk 'tolower($1) == "etag:" {print $2}'
}

# load REPLICA: requests to every route through the replica's published proxy port,
# in the background: one curl per route, on one keep-alive connection, 20 requests a
# second and 2400 at most (two minutes), so the load costs little CPU and a loaded
# machine slows it little; every status lands in $tmp/codes-REPLICA-ROUTE.
load() {
  local r=$1 c
  for c in "${canaries[@]}"; do
    curl -s -o /dev/null --rate 20/s --max-time 300 -w '%{stderr}%{http_code}\n' \
      -H "Host: $c.test" "http://127.0.0.1:${proxy_port[$r]}/?i=[1-2400]" 2>"$tmp/codes-$r-$c" &
    load_pids+=($!)
  done
}

# failures REPLICA: the requests through it that did not answer 200 so far.
failures() { cat "$tmp/codes-$1-"* 2>/dev/null | grep -v '^200$' || true; }

# ---------------------------------------------------------------------------
step "${STEPS[0]}"
if [[ ${WEIR_SKIP_BUILD:-0} != 1 ]]; then
  "$here/build.sh" "$image" >"$tmp/build.log" 2>&1 || { tail -20 "$tmp/build.log" >&2; fail "docker/build.sh failed"; }
fi
docker image inspect "$image" >/dev/null 2>&1 || fail "no image $image"
etcd_bin=${ETCD_BIN:-$(command -v etcd || true)}
[[ -x $etcd_bin ]] || fail "no etcd binary on the host (apt-get install etcd-server, or set ETCD_BIN)"
mkdir -p "$tmp/etcd"
cp "$etcd_bin" "$tmp/etcd/etcd"
cat >"$tmp/etcd/Dockerfile" <<'EOF'
FROM scratch
COPY . /
ENTRYPOINT ["/etcd"]
EOF
# The shared objects the binary needs (Debian's etcd links libc dynamically).
for so in $(ldd "$etcd_bin" | awk '/=>/ {print $3} /^[ \t]*\/lib/ {print $1}'); do
  mkdir -p "$tmp/etcd/$(dirname "$so")"
  cp -L "$so" "$tmp/etcd/$so"
done
docker build -q -t "$etcd_image" "$tmp/etcd" >/dev/null || fail "cannot build the etcd image"
info "weir image $image, etcd image $etcd_image ($("$etcd_bin" --version | head -1))"

# etcd's files in $tmp/pki (mounted into etcd), weir's in $tmp/config (mounted into the
# replicas, which run as 65532: readable by all, the test's own throwaway keys).
pki="$tmp/pki"
mkdir -m 0755 "$pki" "$tmp/config"
ec_key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
# issue NAME SUBJECT EXTENSIONS: NAME.pem and NAME-key.pem in $pki, signed by the CA.
issue() {
  openssl req "${ec_key[@]}" -keyout "$pki/$1-key.pem" -out "$pki/$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca-key.pem" -CAcreateserial \
    -days 2 -out "$pki/$1.pem" -extfile <(printf '%b' "$3") 2>/dev/null
}
openssl req -x509 "${ec_key[@]}" -keyout "$pki/ca-key.pem" -out "$pki/ca.pem" -days 2 \
  -subj "/CN=weir fleet test CA" 2>/dev/null || fail "openssl cannot make the CA"
issue etcd "/CN=etcd" 'subjectAltName=DNS:etcd,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' ||
  fail "openssl cannot make etcd's certificate"
issue weir "/O=weir fleet" 'extendedKeyUsage=clientAuth\n' || fail "openssl cannot make weir's client certificate"
cp "$pki/ca.pem" "$tmp/config/etcd-ca.pem"
cp "$pki/weir.pem" "$tmp/config/weir-etcd.pem"
cp "$pki/weir-key.pem" "$tmp/config/weir-etcd-key.pem"
printf '%s\n' "$etcd_password" >"$tmp/config/etcd-password"
chmod 0644 "$pki"/* "$tmp/config"/*
info "certificates: CA, etcd (DNS:etcd, IP:127.0.0.1), weir's client certificate (no CN)"
ok

# ---------------------------------------------------------------------------
step "${STEPS[1]}"
# Docker publishes ports through the container's first network in name order: the
# data network must sort first so that the published ports survive the partition.
data="$prefix-a-data"
ctrl="$prefix-b-ctrl"
docker network create "$data" >/dev/null && networks+=("$data")
docker network create "$ctrl" >/dev/null && networks+=("$ctrl")

docker run -d --name "$prefix-etcd" --network "$ctrl" --network-alias etcd --tmpfs /data \
  -v "$pki:/pki:ro" -p 127.0.0.1::2379 \
  "$etcd_image" --name default --data-dir /data/etcd \
  --listen-client-urls https://0.0.0.0:2379 --advertise-client-urls https://etcd:2379 \
  --cert-file /pki/etcd.pem --key-file /pki/etcd-key.pem \
  --client-cert-auth --trusted-ca-file /pki/ca.pem \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster default=http://127.0.0.1:2380 >/dev/null
containers+=("$prefix-etcd")
etcd_port=$(docker port "$prefix-etcd" 2379/tcp | head -1 | sed 's/.*://')

# etcd_call PATH JSON [CURL ARGS...]: one gateway call from the host with weir's client
# certificate; prints the body, fails on an HTTP error or no answer.
etcd_call() {
  local path=$1 body=$2
  shift 2
  curl -sS --fail-with-body --max-time 5 --cacert "$pki/ca.pem" \
    --cert "$pki/weir.pem" --key "$pki/weir-key.pem" "$@" \
    -X POST -d "$body" "https://127.0.0.1:$etcd_port$path"
}
etcd_up() { etcd_call /v3/kv/range '{"key":"Lw=="}' >/dev/null 2>&1; }
until_ok "$slack_s" "etcd answers over TLS" etcd_up
# Authentication on: a root user, and `weir` whose role may read and write /weir/ only.
b64() { printf '%s' "$1" | base64; }
for call in \
  "/v3/auth/user/add {\"name\":\"root\",\"password\":\"root-$etcd_password\"}" \
  '/v3/auth/role/add {"name":"root"}' \
  '/v3/auth/user/grant {"user":"root","role":"root"}' \
  "/v3/auth/user/add {\"name\":\"weir\",\"password\":\"$etcd_password\"}" \
  '/v3/auth/role/add {"name":"weir"}' \
  "/v3/auth/role/grant {\"name\":\"weir\",\"perm\":{\"permType\":\"READWRITE\",\"key\":\"$(b64 /weir/)\",\"range_end\":\"$(b64 /weir0)\"}}" \
  '/v3/auth/user/grant {"user":"weir","role":"weir"}' \
  '/v3/auth/enable {}'; do
  etcd_call "${call%% *}" "${call#* }" >/dev/null || fail "etcd ${call%% *} failed"
done
# What is shut out: a client without a certificate gets no TLS session, a request
# without a user gets nothing.
if curl -sS --max-time 5 --cacert "$pki/ca.pem" -X POST -d '{"key":"Lw=="}' \
  "https://127.0.0.1:$etcd_port/v3/kv/range" >/dev/null 2>&1; then
  fail "etcd answered a client without a certificate"
fi
anonymous=$(curl -sS --max-time 5 --cacert "$pki/ca.pem" --cert "$pki/weir.pem" --key "$pki/weir-key.pem" \
  -X POST -d "{\"key\":\"$(b64 /weir/)\"}" "https://127.0.0.1:$etcd_port/v3/kv/range" 2>&1 || true)
[[ $anonymous == *"user name is empty"* ]] || fail "etcd did not refuse a request without a user: $anonymous"
info "etcd at https://127.0.0.1:$etcd_port: client certificates required, user weir on /weir/ only"

for v in v1 v2; do
  docker run -d --name "$prefix-app-$v" --network "$data" --network-alias "app-$v" \
    --health-cmd '["/usr/local/bin/weir","probe","http://127.0.0.1:9001/healthz"]' --health-interval 2s \
    "$image" echo --listen 0.0.0.0:9001 --version "$v" >/dev/null
  containers+=("$prefix-app-$v")
done

printf '%s\n' "$token" >"$tmp/config/token"
# The replicas present their own token to each other (never the admin token), and
# trust a member's apiUrl only inside the control network.
printf 'peer-%s\n' "$token" >"$tmp/config/peer-token"
ctrl_subnet=$(docker network inspect -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}' "$ctrl" | awk '{print $1}')
[[ -n $ctrl_subnet ]] || fail "cannot read the subnet of $ctrl"
info "peers allowed in $ctrl_subnet"
for r in "${replicas[@]}"; do
  {
    printf 'listeners:\n  - name: http\n    address: 0.0.0.0:8080\n'
    printf 'admin:\n  address: 0.0.0.0:9901\n  tokenFile: token\n'
    printf 'cluster:\n  etcd: ["https://etcd:2379"]\n  prefix: /weir\n  replicas: 3\n  heartbeat: %ss\n  algorithm: round-robin\n  name: %s\n  apiUrl: http://%s:9901\n  peerTokenFile: peer-token\n  peerAllow: ["%s"]\n' "$heartbeat_s" "$r" "$r" "$ctrl_subnet"
    printf '  etcdTls:\n    caFile: etcd-ca.pem\n    certFile: weir-etcd.pem\n    keyFile: weir-etcd-key.pem\n'
    printf '  etcdAuth: { username: weir, passwordFile: etcd-password }\n'
    printf 'backends:\n  app-blue:\n    endpoints: ["app-v1:9001"]\n  app-green:\n    endpoints: ["app-v2:9001"]\n'
    printf 'routes:\n'
    for c in "${canaries[@]}"; do
      printf '  - name: %s\n    hosts: ["%s.test"]\n    primary: app-blue\n    canary: app-green\n' "$c" "$c"
    done
    printf 'canaries:\n'
    for c in "${canaries[@]}"; do
      printf '  - name: %s\n    route: %s\n    analysis:\n      interval: 2s\n      threshold: 3\n      stepWeight: 10\n      maxWeight: 50\n' "$c" "$c"
      printf '      metrics:\n        - name: request-success-rate\n          thresholdRange: { min: 99 }\n          interval: 5s\n          minRequests: 5\n'
    done
  } >"$tmp/config/$r.yaml"
done
chmod 0644 "$tmp/config"/*

for r in "${replicas[@]}"; do
  # The name `r` (the apiUrl peers push routes to) is an alias on ctrl only: with it on
  # data as well, peers would still reach a replica cut off from ctrl, and the partition
  # would not be one.
  docker create --name "$prefix-$r" --network "$data" \
    -v "$tmp/config:/etc/weir:ro" -p 127.0.0.1::8080 -p 127.0.0.1::9901 \
    "$image" serve -c "/etc/weir/$r.yaml" >/dev/null
  containers+=("$prefix-$r")
  docker network connect --alias "$r" "$ctrl" "$prefix-$r"
  docker start "$prefix-$r" >/dev/null
  admin_port[$r]=$(docker port "$prefix-$r" 9901/tcp | head -1 | sed 's/.*://')
  proxy_port[$r]=$(docker port "$prefix-$r" 8080/tcp | head -1 | sed 's/.*://')
  info "$r: proxy 127.0.0.1:${proxy_port[$r]}, admin 127.0.0.1:${admin_port[$r]}"
done

ready() { api "$1" GET /readyz; [[ $API_STATUS == 200 ]]; }
for r in "${replicas[@]}"; do until_ok "$slack_s" "$r ready (lease granted)" ready "$r"; done
until_ok "$((ttl_s + slack_s))" "every canary owned exactly once" each_once "${replicas[@]}"
info "owners: $(owners "${replicas[@]}" | tr '\n' ' ')"
ok

# ---------------------------------------------------------------------------
step "${STEPS[2]}"
for r in "${replicas[@]}"; do load "$r"; done
until_ok "$slack_s" "every canary initialised" all_phase Initialized 0 "${replicas[@]}"
for c in "${canaries[@]}"; do
  # Through w0 whatever the owner: a non-owner forwards the command.
  api w0 POST "/api/v1/canaries/$c/start" '{"revision":"v2"}'
  [[ $API_STATUS == 200 ]] || fail "start $c through w0: HTTP $API_STATUS $API_BODY"
done
until_ok 60 "every run progressing at weight ≥ 10" all_phase Progressing 10 "${replicas[@]}"
for c in "${canaries[@]}"; do info "$c: $(owner_status "$c" "${replicas[@]}")"; done
ok

# ---------------------------------------------------------------------------
step "${STEPS[3]}"
victim="" most=-1
for r in "${replicas[@]}"; do
  n=$(cluster_doc "$r" | json 'len(d.get("owned", []))')
  if ((n > most)); then most=$n victim=$r; fi
done
lost=$(cluster_doc "$victim" | json '" ".join(d.get("owned", []))')
survivors=()
for r in "${replicas[@]}"; do [[ $r == "$victim" ]] || survivors+=("$r"); done
info "partitioning $victim (owns: $lost) from $ctrl"
docker network disconnect "$ctrl" "$prefix-$victim"
no_lease() { api "$victim" GET /readyz; [[ $API_STATUS == 503 && $API_BODY == *no-lease* ]]; }
owns_nothing() { [[ $(cluster_doc "$victim" | json 'len(d.get("owned", []))') == 0 ]]; }
until_ok "$slack_s" "$victim reports no lease" no_lease
until_ok "$slack_s" "$victim drives nothing" owns_nothing
version_cut=$(table_version "$victim")
[[ -n $version_cut ]] || fail "no table version from $victim"
until_ok "$((ttl_s + heartbeat_s + slack_s))" "the canaries of $victim re-owned by ${survivors[*]}" each_once "${survivors[@]}"
info "owners now: $(owners "${survivors[@]}" | tr '\n' ' ')"
code=$(curl -s -o /dev/null --max-time 5 -w '%{http_code}' -H 'Host: c0.test' "http://127.0.0.1:${proxy_port[$victim]}/")
[[ $code == 200 ]] || fail "$victim stopped proxying (HTTP $code)"
ok

# ---------------------------------------------------------------------------
step "${STEPS[4]}"
until_ok 90 "every run promoted" all_phase Succeeded 0 "${survivors[@]}"
for c in "${canaries[@]}"; do
  for r in "${survivors[@]}"; do
    api "$r" GET "/api/v1/routes/$c"
    primary=$(echo "$API_BODY" | json 'd.get("route", d).get("primary")')
    [[ $primary == app-green ]] || fail "$c on $r: primary $primary after promotion"
  done
done
[[ $(table_version "$victim") == "$version_cut" ]] || fail "$victim's table changed while it was cut off"
code=$(curl -s -o /dev/null --max-time 5 -w '%{http_code}' -H 'Host: c1.test' "http://127.0.0.1:${proxy_port[$victim]}/")
[[ $code == 200 ]] || fail "$victim stopped proxying (HTTP $code)"
info "$victim kept its table (version $version_cut) and kept proxying"
ok

# ---------------------------------------------------------------------------
step "${STEPS[5]}"
docker network connect --alias "$victim" "$ctrl" "$prefix-$victim"
until_ok "$((ttl_s + slack_s))" "$victim ready again" ready "$victim"
until_ok "$((ttl_s + slack_s))" "every canary owned exactly once by the three" each_once "${replicas[@]}"
promoted_on_victim() {
  local c
  for c in "${canaries[@]}"; do
    api "$victim" GET "/api/v1/routes/$c"
    [[ $(echo "$API_BODY" | json 'd.get("route", d).get("primary")') == app-green ]] || return 1
  done
}
until_ok "$slack_s" "the promoted routes re-asserted on $victim" promoted_on_victim
info "owners: $(owners "${replicas[@]}" | tr '\n' ' ')"
for r in "${replicas[@]}"; do
  sent=$(cat "$tmp/codes-$r-"* | wc -l)
  bad=$(failures "$r")
  if [[ -n $bad ]]; then
    info "$r: $(wc -l <<<"$bad") of $sent requests failed ($(sort <<<"$bad" | uniq -c | tr '\n' ' '))"
    fail "requests through $r failed"
  fi
  info "$r: $sent requests, all 200"
done
ok

# ---------------------------------------------------------------------------
step "${STEPS[6]}"
for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
load_pids=()
for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done
containers=()
for n in "${networks[@]}"; do docker network rm "$n" >/dev/null 2>&1 || true; done
networks=()
ok
printf '\ndocker-test-cluster: %d passed in %ss\n' "$passed" "$((SECONDS - script_start))"
