#!/usr/bin/env bash
# Builds the weir container image without pulling anything:
#   1. the static binary (glibc with +crt-static, rustls only, no OpenSSL) of
#      packaging/static-binary.sh, the same one the .deb ships;
#   2. copies it into a `FROM scratch` image (docker/Dockerfile).
#
# Usage: docker/build.sh [TAG]          (default TAG: weir:dev, or $WEIR_IMAGE)
# Environment:
#   WEIR_IMAGE       image tag (the argument wins)
#   WEIR_SKIP_CARGO  1 = reuse the binary already built (no cargo run)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tag=${1:-${WEIR_IMAGE:-weir:dev}}

step() { printf '\n==> %s\n' "$*"; }

if [[ ${WEIR_SKIP_CARGO:-0} != 1 ]]; then
  step "the static release binary (packaging/static-binary.sh)"
  bin=$("$root/packaging/static-binary.sh")
else
  bin=$("$root/packaging/static-binary.sh" --path)
fi
[[ -x $bin ]] || { echo "build.sh: no binary at $bin" >&2; exit 1; }

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
