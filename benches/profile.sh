#!/usr/bin/env bash
# Instructions per request of one system under test, user space only,
# counted by valgrind's callgrind (exact and repeatable on a noisy machine,
# unlike wall-clock profiles), with the same configs as compare.sh.
#
#   benches/profile.sh [weir-on|weir-off|nginx] [REQUESTS]   (default weir-on 20000)
#
# Prints Ir/request and the top functions (inclusive); the raw profile stays
# in the printed directory for `callgrind_annotate --inclusive=yes FILE` or
# `--tree=caller`. The kernel (TCP, syscalls) is not counted: on loopback
# it is about 60 % of weir's CPU time (see README). Binds 127.0.0.1 only;
# stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-weir-on}"
n="${2:-20000}"
case "$target" in weir-on|weir-off|nginx) ;; *) echo "unknown target $target" >&2; exit 2 ;; esac

for t in valgrind h2load curl taskset; do
    command -v "$t" >/dev/null || { echo "$t missing (apt-get install valgrind nghttp2-client curl util-linux)" >&2; exit 1; }
done
cargo build --release --bin weir
weir="$PWD/target/release/weir"
dir="$(mktemp -d /tmp/weir-profile-XXXXXX)"
python3 benches/compare.py --write-configs "$dir"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

taskset -c 0 "$weir" echo --listen 127.0.0.1:19001 --version v1 --workers 1 >"$dir/blue.log" 2>&1 & pids+=($!)
taskset -c 0 "$weir" echo --listen 127.0.0.1:19101 --version v2 --workers 1 >"$dir/green.log" 2>&1 & pids+=($!)
out="$dir/callgrind.out"
if [ "$target" = nginx ]; then
    port=18080
    cmd=(nginx -c "$dir/nginx/nginx.conf" -p "$dir/nginx" -g "master_process off;")
else
    port=18090
    cmd=("$weir" serve -c "$dir/$target.yaml" --workers 1)
fi
taskset -c 1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" "${cmd[@]}" \
    >"$dir/sut.log" 2>&1 & sut=$!
pids+=("$sut")
for _ in $(seq 1 120); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.5; done

load() {
    taskset -c 0 h2load --h1 -n "$1" -c 32 \
        -H "cookie: session=3b1f0c9e77aa; theme=dark; _ga=GA1.2.1234567.890" \
        -H "user-agent: weir-bench/1 (like Mozilla/5.0)" "http://127.0.0.1:$port/" | grep -E "^requests"
}
callgrind_control -i on "$sut" >/dev/null 2>&1
load 2000                              # warm-up: pools, caches, lazy init
callgrind_control -z "$sut" >/dev/null 2>&1
load "$n"
callgrind_control -d "$sut" >/dev/null 2>&1
sleep 1
f="$(ls -S "$out".* | head -1)"
total="$(grep -h '^totals:' "$f" | awk '{print $2}')"
echo "== $target: $(( total / n )) instructions per request (user space), profile: $f"
# The request path's own functions and the big shared costs, inclusive,
# as instructions per request (framework frames left out).
pattern='weir::(proxy|routing|affinity|stats|metrics)|send_request::\{\{closure\}\} \[|Http1Transaction>::(parse|encode) \[|malloc\.c:(malloc|free) \[|memcpy|sip::Hasher<S> as core::hash::Hasher>::write \[|ngx_http_(process_request|upstream_init|map_find|regex_exec)|pcre2_match|RAND_bytes \['
callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null \
    | grep -E '\[' | grep -E "$pattern" | sed 's/,//g' \
    | awk -v n="$n" '{ir=$1; sub(/^ *[0-9]+ +\( *[0-9.]+%\) +/, ""); printf "%8.0f Ir/req  %s\n", ir/n, substr($0, 1, 150)}' \
    | head -30
