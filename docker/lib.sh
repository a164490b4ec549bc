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
