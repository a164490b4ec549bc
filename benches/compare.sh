#!/usr/bin/env bash
# weir vs nginx vs the direct path, as ratios from one interleaved run.
#
#   benches/compare.sh [driver options]     e.g. --reps 5, --rate 3000, --no-criterion
#
# Installs what it needs if missing (apt: nginx, wrk, nghttp2-client for
# h2load, openssl; cargo: oha for the open-loop latency run, falling back to
# the driver's built-in asyncio client if oha cannot be built in time),
# builds weir once in release mode, then runs benches/compare.py pinned to
# core 0 (the SUT goes on core 1). Results: benches/results/latest.{md,svg,json}.
# Everything binds 127.0.0.1; every load is bounded in time; every process
# started is stopped on exit. Not a test: CI only runs `cargo bench --no-run`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
have() { command -v "$1" >/dev/null 2>&1; }

if [ "$(nproc)" -lt 2 ]; then
    echo "needs at least 2 cores (SUT on core 1, load and backends on core 0)" >&2
    exit 1
fi

# --- tools -----------------------------------------------------------------
missing=()
have nginx || [ -x /usr/sbin/nginx ] || missing+=(nginx)
have wrk || missing+=(wrk)
have h2load || missing+=(nghttp2-client)
have openssl || missing+=(openssl)
have taskset || missing+=(util-linux)
have python3 || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian's nginx package may start a service on :80; this script uses its own
# instance on 127.0.0.1 only and leaves any system one alone.

# Open-loop latency tool: wrk2 is not in Debian; oha is built from crates.io
# once (about 8 minutes on 2 cores) unless OHA points at one or it is on PATH.
OHA="${OHA:-}"
if [ -z "$OHA" ]; then
    if have oha; then OHA="$(command -v oha)"
    elif [ -x "$HOME/.cargo/bin/oha" ]; then OHA="$HOME/.cargo/bin/oha"
    elif [ "${NO_OHA_BUILD:-0}" != 1 ]; then
        log "building oha (cargo install oha --locked; set NO_OHA_BUILD=1 to skip)"
        if timeout "${OHA_BUILD_TIMEOUT:-1500}" cargo install oha --locked >/tmp/weir-oha-build.log 2>&1; then
            OHA="$HOME/.cargo/bin/oha"
        else
            log "oha did not build (see /tmp/weir-oha-build.log); using the built-in open-loop client"
        fi
    fi
fi
export OHA

# --- build -------------------------------------------------------------------
log "cargo build --release (and the routing criterion bench)"
cargo build --release --bin weir
case " $* " in
    *" --no-criterion "*) ;;
    *) cargo bench --no-run --bench routing ;;
esac

# --- run ---------------------------------------------------------------------
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
driver=""
cleanup() {
    if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
        # The driver stops everything it started when it gets SIGTERM.
        kill -TERM "$driver" 2>/dev/null || true
        wait "$driver" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

extra=()
[ -n "$OHA" ] || extra+=(--no-oha)
taskset -c 0 python3 benches/compare.py "${extra[@]}" "$@" &
driver=$!
status=0
wait "$driver" || status=$?
driver=""
exit $status
