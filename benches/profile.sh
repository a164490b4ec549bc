#!/usr/bin/env bash
# Where one system under test's CPU per request goes, with the same configs
# and headers as compare.sh; the SUT on core 1, load and backends on core 0.
#
#   benches/profile.sh [weir-on|weir-off|weir-retry|nginx] [REQUESTS]   (default weir-on 20000)
#   benches/profile.sh --cpu [weir-on|weir-off|weir-retry|nginx] [REQUESTS]   (default 100000)
#
# Default: user-space instructions per request counted by valgrind's callgrind
# (exact and repeatable on a noisy machine, unlike wall-clock profiles); prints
# Ir/request and the top functions (inclusive); the raw profile stays in the
# printed directory for `callgrind_annotate --inclusive=yes FILE` or
# `--tree=caller`. The kernel (TCP, syscalls) is not counted there.
#
# --cpu: user vs kernel µs per request (utime/stime from /proc over REQUESTS)
# and the syscalls per request (strace -c over a separate 20,000-request run,
# whose CPU is not counted: tracing slows the SUT).
#
# Binds 127.0.0.1 only; stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=callgrind
if [ "${1:-}" = "--cpu" ]; then mode=cpu; shift; fi
target="${1:-weir-on}"
if [ "$mode" = cpu ]; then n="${2:-100000}"; else n="${2:-20000}"; fi
case "$target" in weir-on|weir-off|weir-retry|nginx) ;; *) echo "unknown target $target" >&2; exit 2 ;; esac

if [ "$mode" = cpu ]; then tools=(strace h2load curl taskset); else tools=(valgrind h2load curl taskset); fi
for t in "${tools[@]}"; do
    command -v "$t" >/dev/null || { echo "$t missing (apt-get install $t; h2load is in nghttp2-client, taskset in util-linux)" >&2; exit 1; }
done
# WEIR_BIN: measure that binary instead (e.g. target/release/weir, stripped:
# the total per request is the same count, the function table stays empty).
if [ -n "${WEIR_BIN:-}" ]; then
    weir="$(cd "$(dirname "$WEIR_BIN")" && pwd)/$(basename "$WEIR_BIN")"
else
    cargo build --profile profiling --bin weir
    weir="$PWD/target/profiling/weir"
fi
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
if [ "$mode" = cpu ]; then
    taskset -c 1 "${cmd[@]}" >"$dir/sut.log" 2>&1 & sut=$!
else
    taskset -c 1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" "${cmd[@]}" \
        >"$dir/sut.log" 2>&1 & sut=$!
fi
pids+=("$sut")
for _ in $(seq 1 120); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.5; done

load() {
    taskset -c 0 h2load --h1 -n "$1" -c 32 \
        -H "cookie: session=3b1f0c9e77aa; theme=dark; _ga=GA1.2.1234567.890" \
        -H "user-agent: weir-bench/1 (like Mozilla/5.0)" "http://127.0.0.1:$port/" | grep -E "^requests"
}
if [ "$mode" = cpu ]; then
    ticks() { awk '{print $14, $15}' "/proc/$sut/stat"; }
    load 2000 >/dev/null
    read -r u0 s0 < <(ticks)
    load "$n"
    read -r u1 s1 < <(ticks)
    awk -v t="$target" -v n="$n" -v hz="$(getconf CLK_TCK)" -v u=$((u1 - u0)) -v s=$((s1 - s0)) 'BEGIN {
        us = u / hz * 1e6 / n; ks = s / hz * 1e6 / n
        printf "== %s: %.2f µs/request user + %.2f kernel = %.2f (kernel %.0f %%)\n", t, us, ks, us + ks, 100 * ks / (us + ks) }'
    strace -c -f -p "$sut" -o "$dir/strace.txt" & st=$!
    sleep 1
    load 20000 >/dev/null
    kill -INT "$st"; wait "$st" 2>/dev/null || true
    echo "syscalls per request (strace -c, 20,000 requests; rarer ones left out):"
    awk 'NR > 2 && $4 ~ /^[0-9]+$/ && $4 >= 200 { printf "  %-14s %.2f\n", $NF, $4 / 20000 }' "$dir/strace.txt"
    exit 0
fi
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
pattern='weir::(proxy|routing|affinity|stats|dataplane)|send_request::\{\{closure\}\} \[|Http1Transaction>::(parse|encode) \[|malloc\.c:(malloc|free) \[|memcpy|sip::Hasher<S> as core::hash::Hasher>::write \[|ngx_http_(process_request|upstream_init|map_find|regex_exec)|pcre2_match|RAND_bytes \['
callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null \
    | grep -E '\[' | grep -E "$pattern" | sed 's/,//g' \
    | awk -v n="$n" '{ir=$1; sub(/^ *[0-9]+ +\( *[0-9.]+%\) +/, ""); printf "%8.0f Ir/req  %s\n", ir/n, substr($0, 1, 150)}' \
    | head -30
