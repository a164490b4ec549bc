#!/usr/bin/env bash
# Two weir binaries against each other, interleaved: a refactor's "before and
# after" on one machine in one run, without nginx or the direct path.
#
#   benches/ab.sh OLD_WEIR NEW_WEIR [REPS] [SECONDS]
#
# Each repetition runs wrk (one thread, 32 connections) for SECONDS through
# OLD, then through NEW, with compare.py's weir-on config (90/10 split, A/B
# match rules, session affinity). The load side (wrk and both echo backends,
# served by OLD's `weir echo`) is pinned to core 0 and the SUT to core 1, as in
# compare.sh. Per slot: requests per second and the SUT's CPU microseconds per
# request (utime + stime from /proc); at the end the median of NEW ÷ OLD over
# the paired repetitions. Everything binds 127.0.0.1; every process started is
# stopped on exit. Not a test.
set -euo pipefail
old=${1:?usage: ab.sh OLD_WEIR NEW_WEIR [REPS] [SECONDS]}
new=${2:?usage: ab.sh OLD_WEIR NEW_WEIR [REPS] [SECONDS]}
reps=${3:-5}
secs=${4:-8}
command -v wrk >/dev/null || { echo "ab.sh: needs wrk (apt-get install wrk)" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

blue=18401 green=18402 sut=18480 admin=18490
taskset -c 0 "$old" echo --listen 127.0.0.1:$blue --version blue >/dev/null 2>&1 & pids+=($!)
taskset -c 0 "$old" echo --listen 127.0.0.1:$green --version green >/dev/null 2>&1 & pids+=($!)
# The config is compare.py's WEIR_ON template, filled in here.
python3 - "$work/weir-on.yaml" "$sut" "$admin" "$blue" "$green" "$(dirname "$0")/compare.py" <<'EOF'
import sys, importlib.util
out, weir, admin, blue, green, compare = sys.argv[1:]
spec = importlib.util.spec_from_file_location("compare", compare)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
open(out, "w").write(m.WEIR_ON.format(weir=weir, admin=admin, blue=blue, green=green, tls_listener=""))
EOF

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick=$(getconf CLK_TCK)

slot() { # BIN -> "rps us_per_req"
  local bin=$1 p
  taskset -c 1 "$bin" serve -c "$work/weir-on.yaml" >"$work/serve.log" 2>&1 &
  p=$!
  for _ in $(seq 100); do curl -fs "127.0.0.1:$admin/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  taskset -c 0 wrk -t1 -c32 -d1s "http://127.0.0.1:$sut/" >/dev/null 2>&1 # warm-up
  local t0 t1 out reqs
  t0=$(cpu_ticks $p)
  out=$(taskset -c 0 wrk -t1 -c32 -d"${secs}s" "http://127.0.0.1:$sut/")
  t1=$(cpu_ticks $p)
  kill $p; wait $p 2>/dev/null || true
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  python3 -c "import sys; r,t,s,hz=map(float,sys.argv[1:]); print(f'{r/s:.0f} {t/hz*1e6/r:.2f}')" \
    "$reqs" "$((t1 - t0))" "$secs" "$tick"
}

echo "rep  old_rps  new_rps  old_us/req  new_us/req"
results=()
for r in $(seq "$reps"); do
  read -r orps ous < <(slot "$old")
  read -r nrps nus < <(slot "$new")
  printf '%3d  %7s  %7s  %10s  %10s\n' "$r" "$orps" "$nrps" "$ous" "$nus"
  results+=("$orps $nrps $ous $nus")
done
printf '%s\n' "${results[@]}" | python3 -c '
import sys, statistics as st
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
tp = st.median(n / o for o, n, _, _ in rows)
cpu = st.median(nu / ou for _, _, ou, nu in rows)
print(f"median new/old: throughput {tp:.3f}, CPU per request {cpu:.3f} ({len(rows)} paired repetitions)")
'
