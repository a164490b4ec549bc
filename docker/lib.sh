# docker/lib.sh: what docker/test*.sh share, sourced by each: the step
# reporting (STEPS, passed and current are the caller's) and the Compose
# command, v2 `docker compose` or v1 `docker-compose`.

# Reporting: `step NAME` starts a step, `ok` ends it, `fail WHY` stops the
# script at it (the caller's EXIT trap says what did not run).
step() {
  current=$1
  printf '\n==> [%3ss] step %d/%d: %s\n' "$((SECONDS - script_start))" "$((passed + 1))" "${#STEPS[@]}" "$current"
}
ok() {
  passed=$((passed + 1))
  printf '    ok: %s\n' "$current"
}
info() { printf '    %s\n' "$*"; }
fail() {
  printf '\nFAILED at step %d/%d (%s): %s\n' "$((passed + 1))" "${#STEPS[@]}" "$current" "$*" >&2
  exit 1
}

# Sets COMPOSE to the Compose command: WEIR_COMPOSE when set ("docker compose"
# or "docker-compose", checked), else v2 if installed, else v1; or exits
# naming the script.
find_compose() {
  if [[ -n ${WEIR_COMPOSE:-} ]]; then
    read -r -a COMPOSE <<<"$WEIR_COMPOSE"
    "${COMPOSE[@]}" version >/dev/null 2>&1 || {
      echo "$(basename "$0"): WEIR_COMPOSE='$WEIR_COMPOSE' does not run ('${WEIR_COMPOSE} version' failed)" >&2
      exit 1
    }
  elif docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
  elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
  else
    echo "$(basename "$0"): neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 1
  fi
  echo "compose: ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null || "${COMPOSE[@]}" version | head -n 1))"
}

# test_pace FILE: the canary of a copied example config at test pace. The
# examples keep a pace a user can watch (analysis every 5s, 10s metric
# windows); a test needs the same steps, not the same seconds: analysis every
# 2s, 4s windows. A check right after a step counts the canary requests of
# one interval at the new weight: with the tests' 50 requests a second that is
# about 25 at 25 %, over the examples' minRequests of 10 (fewer than 10 of a
# Poisson 25: p ≈ 1e-4).
test_pace() {
  sed -i -e 's/^      interval: 5s$/      interval: 2s/' -e 's/^          interval: 10s$/          interval: 4s/' "$1"
  grep -q '^      interval: 2s$' "$1" || { echo "test_pace: no 'interval: 5s' analysis in $1" >&2; return 1; }
  info "test pace in $(basename "$1"): analysis every 2s, 4s metric windows"
}
