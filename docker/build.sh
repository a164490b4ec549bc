#!/usr/bin/env bash
# Builds the weir container image without pulling anything:
#   1. compiles a static binary on the host (glibc with +crt-static, rustls
#      only, no OpenSSL) into target/docker, apart from the usual target dirs;
#   2. copies it into a `FROM scratch` image (docker/Dockerfile).
#
# Usage: docker/build.sh [TAG]          (default TAG: weir:dev, or $WEIR_IMAGE)
# Environment:
#   WEIR_IMAGE       image tag (the argument wins)
#   WEIR_TARGET_DIR  cargo target dir (default: <repo>/target/docker)
#   WEIR_SKIP_CARGO  1 = reuse the binary already in the target dir
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tag=${1:-${WEIR_IMAGE:-weir:dev}}
target_dir=${WEIR_TARGET_DIR:-$root/target/docker}
triple=$(rustc -vV | sed -n 's/^host: //p')
case "$triple" in
  *-linux-gnu) ;;
  *) echo "build.sh: host target $triple is not *-linux-gnu; a glibc +crt-static build needs one" >&2; exit 1 ;;
esac

step() { printf '\n==> %s\n' "$*"; }

if [[ ${WEIR_SKIP_CARGO:-0} != 1 ]]; then
  step "cargo build --release (static, $triple) into $target_dir"
  # --target keeps RUSTFLAGS off build scripts and proc-macros (they stay
  # dynamic host programs); strip and no debuginfo keep the image small.
  # Each CARGO_PROFILE_* variable overrides only this build, not Cargo.toml.
  (cd "$root" && \
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_PROFILE_RELEASE_DEBUG=0 \
    cargo build --release --bin weir --target "$triple" --target-dir "$target_dir")
fi
bin=$target_dir/$triple/release/weir
[[ -x $bin ]] || { echo "build.sh: no binary at $bin" >&2; exit 1; }

# A static binary has no NEEDED entries and no program interpreter.
if readelf -d "$bin" 2>/dev/null | grep -q '(NEEDED)' || readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
  echo "build.sh: $bin is dynamically linked; it cannot run in a scratch image" >&2
  readelf -d "$bin" | grep NEEDED >&2 || true
  exit 1
fi

step "docker build -t $tag (FROM scratch)"
# The build context holds only what the image gets: no repository upload.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$bin" "$ctx/weir"
mkdir "$ctx/state"    # becomes /var/lib/weir, owned by 65532
cp "$root/docker/Dockerfile" "$ctx/Dockerfile"
# The classic builder works with every Docker Engine; BuildKit is used where
# the buildx plugin exists (the Dockerfile needs nothing from either).
if ! docker buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=0; fi
# (The classic builder's deprecation notice is dropped; real errors pass.)
docker build --quiet -t "$tag" "$ctx" 2>&1 >/dev/null \
  | { grep -vE 'DEPRECATED|legacy builder is deprecated|BuildKit is currently disabled|DOCKER_BUILDKIT=0|environment-variable|^[[:space:]]*$' >&2 || true; }

size=$(docker image inspect -f '{{.Size}}' "$tag")
printf 'built %s: binary %s bytes, image %s bytes (%s MB)\n' "$tag" \
  "$(stat -c %s "$bin")" "$size" "$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1000000 }')"
