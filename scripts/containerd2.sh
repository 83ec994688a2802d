#!/usr/bin/env bash
# containerd2.sh DEST
#
# Puts containerd 2.x (Debian unstable's `containerd` package, 2.1.9 when written) into DEST, for
# the CRI and NRI node tests' second runtime (crates/test-support/src/cri.rs finds it at
# $CARGO_TARGET_DIR/tools/containerd2; scripts/test.sh calls this during set-up). Nothing is
# installed and the system's apt sources are not touched: a private apt configuration (its own
# sources list, package lists and cache in a temp dir) downloads the .deb with
# `apt-get download`, and `dpkg-deb -x` unpacks it into DEST. The package needs only
# libc6 >= 2.34 and runc (bookworm's runc works with it).
#
# Afterwards DEST/usr/bin/{containerd,containerd-shim-runc-v2,ctr}. A no-op when DEST already
# holds a containerd 2.x. As root (apt's cache and lists need it).
set -euo pipefail
[ $# = 1 ] || { echo "usage: containerd2.sh DEST" >&2; exit 2; }
DEST=$(mkdir -p "$1" && readlink -f "$1")
if "$DEST/usr/bin/containerd" --version 2>/dev/null | grep -q ' v\?2\.'; then
  "$DEST/usr/bin/containerd" --version
  exit 0
fi
WORK=$(mktemp -d /tmp/cpuplan-containerd2.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# The same Debian mirror as the machine's bookworm suites.
mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || { echo "containerd2.sh: no Debian mirror in /etc/apt to fetch containerd 2.x from" >&2; exit 1; }
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" > "$WORK/sources.list"
apt=(-o Dir::Etc::sourcelist="$WORK/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$WORK/lists"
     -o Dir::Cache="$WORK/cache" -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root)
echo "== containerd 2.x (Debian unstable's package, private apt config) into $DEST"
apt-get "${apt[@]}" update -q >/dev/null
(cd "$WORK" && apt-get "${apt[@]}" download -q containerd >/dev/null)
rm -rf "$DEST"
mkdir -p "$DEST"
dpkg-deb -x "$WORK"/containerd_*.deb "$DEST"
"$DEST/usr/bin/containerd" --version | grep ' v\?2\.' || {
  echo "containerd2.sh: the unpacked containerd is not 2.x" >&2; exit 1; }
