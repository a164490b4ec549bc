#!/usr/bin/env bash
# Builds weir_*.deb with cargo-deb from the static release binary of
# packaging/static-binary.sh (the one the container image ships too) and checks it the way a host would use it:
#   1. the package holds the binary, the conffile and the systemd unit;
#   2. the binary is stripped, runs, and accepts the packaged config;
#   3. `dpkg -i` into a throwaway root (an overlay of / in a private mount namespace, so
#      this host is untouched): the weir user exists, the unit is enabled and passes
#      `systemd-analyze verify`, and the installed binary accepts the installed config as
#      the weir user; then `dpkg --purge` removes it all.
# Usage: packaging/build-deb.sh [--no-build]   (root is needed for step 3; without it, skipped loudly)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== deb: %s\n' "$*"; }
fail() { echo "deb: FAIL: $*" >&2; exit 1; }

triple=$(rustc -vV | sed -n 's/^host: //p')
if [[ ${1:-} != --no-build ]]; then
  if ! cargo deb --version >/dev/null 2>&1; then
    step "installing cargo-deb"
    cargo install cargo-deb --locked -q
  fi
  step "the static release binary (packaging/static-binary.sh), packaged by cargo deb"
  # The image ships the same file (docker/build.sh): one release build for both.
  # cargo-deb reads it from target/<triple>/release, where --target puts it.
  packaging/static-binary.sh >/dev/null
  cargo deb -q --no-build --target "$triple"
fi
deb=$(ls -t target/debian/weir_*.deb 2>/dev/null | head -1)
[[ -n $deb ]] || fail "no target/debian/weir_*.deb"
echo "package: $deb ($(du -h "$deb" | cut -f1))"

step "contents"
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/weir ./etc/weir/weir.yaml ./usr/lib/systemd/system/weir.service ./usr/share/doc/weir/README.md; do
  grep -q " $f\$" <<<"$contents" || { echo "$contents"; fail "missing $f"; }
done
# (captured first: grep -q closing the pipe early would fail the pipeline under pipefail)
info=$(dpkg-deb --info "$deb")
grep -q 'conffiles' <<<"$info" || fail "no conffiles in the control archive"
grep -q 'Depends:.*adduser' <<<"$info" || fail "Depends lacks adduser"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dpkg-deb -x "$deb" "$tmp/x"
if command -v readelf >/dev/null; then
  sections=$(readelf -S "$tmp/x/usr/bin/weir")
  ! grep -q '\.symtab' <<<"$sections" || fail "the packaged binary keeps its symbol table (not stripped)"
  ! grep -q '\.debug_' <<<"$sections" || fail "the packaged binary carries debug info"
fi
echo "binary: $(du -h "$tmp/x/usr/bin/weir" | cut -f1)"
"$tmp/x/usr/bin/weir" --version
"$tmp/x/usr/bin/weir" check -c "$tmp/x/etc/weir/weir.yaml"

step "dpkg -i into a throwaway root"
if [[ $(id -u) -ne 0 ]]; then
  [[ -z ${CI:-} ]] || fail "CI must run the install check as root"
  echo "SKIP dpkg -i: needs root (an overlay mount in a private namespace)"
  exit 0
fi
mkdir -p "$tmp/u" "$tmp/w" "$tmp/m"
cp "$deb" "$tmp/u/weir.deb"
unshare --mount --fork bash -euo pipefail -c '
  t=$1
  mount -t overlay overlay -o lowerdir=/,upperdir=$t/u,workdir=$t/w $t/m
  mount --bind /proc $t/m/proc
  mount --bind /dev $t/m/dev
  chroot $t/m bash -euo pipefail -c "
    export DEBIAN_FRONTEND=noninteractive
    dpkg -i /weir.deb >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; exit 1; }
    getent passwd weir >/dev/null || { echo no weir user; exit 1; }
    test -f /etc/weir/weir.yaml
    test -L /etc/systemd/system/multi-user.target.wants/weir.service || { echo unit not enabled; exit 1; }
    if command -v systemd-analyze >/dev/null; then
      out=\$(systemd-analyze verify /usr/lib/systemd/system/weir.service 2>&1) || { echo \"\$out\"; exit 1; }
      if grep -i weir.service <<<\"\$out\"; then echo systemd-analyze verify complained; exit 1; fi
      echo \"weir.service: systemd-analyze verify ok\"
    else
      echo \"SKIP systemd-analyze verify: not installed (apt-get install systemd)\"
    fi
    su -s /bin/sh weir -c \"/usr/bin/weir check -c /etc/weir/weir.yaml\"
    dpkg --purge weir >/tmp/purge.log 2>&1 || { cat /tmp/purge.log; exit 1; }
    ! test -e /usr/bin/weir || { echo binary left after purge; exit 1; }
    ! getent passwd weir >/dev/null || { echo weir user left after purge; exit 1; }
  "
' _ "$tmp"
echo "installed, checked as the weir user, purged: ok"
echo "deb: ok"
