#!/usr/bin/env bash
# The one release build of weir that ships: a static binary (glibc with
# +crt-static, rustls only, no OpenSSL), used as it is by the .deb
# (packaging/build-deb.sh) and the container image (docker/build.sh), so a
# machine that makes both compiles the release profile once.
#
#   packaging/static-binary.sh          # builds, then prints the binary's path
#   packaging/static-binary.sh --path   # only prints where it is (or would be)
#
# It lands in the usual target dir under the host triple
# (target/<triple>/release/weir): `--target` keeps RUSTFLAGS off build
# scripts and proc-macros, which stay ordinary host programs. Cargo.toml's
# release profile already strips symbols and drops debug info.
#
# Static glibc and name resolution: getaddrinfo in a static glibc still loads
# the host's NSS modules for sources other than files and DNS, which works
# where the glibc matches (the Debian release the package is built on) and in
# the image (no nsswitch.conf: files, then DNS).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
triple=$(rustc -vV | sed -n 's/^host: //p')
case "$triple" in
  *-linux-gnu) ;;
  *) echo "static-binary.sh: host target $triple is not *-linux-gnu; a glibc +crt-static build needs one" >&2; exit 1 ;;
esac
target_dir=${CARGO_TARGET_DIR:-$root/target}
bin=$target_dir/$triple/release/weir

if [[ ${1:-} == --path ]]; then
  echo "$bin"
  exit 0
fi

(cd "$root" && RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked --bin weir --target "$triple" >&2)

# A static binary has no NEEDED entries and no program interpreter.
if readelf -d "$bin" 2>/dev/null | grep -q '(NEEDED)' || readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
  echo "static-binary.sh: $bin is dynamically linked" >&2
  readelf -d "$bin" | grep NEEDED >&2 || true
  exit 1
fi
echo "$bin"
