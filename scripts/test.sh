#!/usr/bin/env bash
# test.sh [--setup-only] [CARGO_TEST_ARGS...]
#
# The README's test command, on a fresh Debian 12 machine, as root (`sudo scripts/test.sh`):
#   1. installs what the tests need (each step a no-op when it is already there):
#      - Debian packages: runc and busybox-static (end-to-end containers); podman (engine tests);
#        containerd 1.7 from Debian trixie under a low apt pin, runc staying bookworm's (CRI and
#        NRI tests); skopeo (the image test); protobuf-compiler (the CRI client's build); jq;
#        promtool from trixie (Prometheus's checker: the chart's alerts and dashboard queries);
#        dbus-daemon (a private bus with a fake systemd: the unit-property tests);
#        logrotate (the package's rotation of the hook's log, checked with logrotate -d);
#        python3 and python3-venv (the shim's ctypes test, the wheel test, Helm's venv);
#        gcc (the C ABI test); binutils (readelf, strip: the static check, the package builds);
#        qemu-system-x86 and mmdebstrap (tests/vm/cgroup2-vm.sh deps: the cgroup v2 + systemd
#        guest of tests/vm_systemd.rs, whose image the test builds under the target dir);
#      - cargo-deb 3.8.0 (tests/packaging/deb.rs builds the Debian package), rustfmt and clippy, and the
#        x86_64-unknown-linux-musl standard library (the static binaries, scripts/build-static.sh);
#      - Helm v4's library (PyPI's helm-python-sdk) into a venv at $CARGO_TARGET_DIR/tools/helm
#        (the chart, DaemonSet and node tests render deploy/helm/cpuplan with it);
#      - containerd 2.x (Debian unstable's package, fetched through a private apt config and
#        unpacked, never installed: scripts/containerd2.sh) into $CARGO_TARGET_DIR/tools/containerd2
#        (the CRI and NRI node tests run a second node with it);
#   2. runs `cargo fmt --check`, `cargo clippy --all-targets -D warnings` and
#      `cargo test --workspace` (with CARGO_TEST_ARGS), then crates/nri's containerd tests
#      once more on containerd 2.x.
# Once set up, `cargo test --workspace` (or one binary: `cargo test --test NAME`) is the inner loop.
# --setup-only stops after step 1. .ci/run runs this script.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
setup_only=false
if [ "${1:-}" = --setup-only ]; then setup_only=true; shift; fi
[ "$(id -u)" = 0 ] || { echo "test.sh: run it as root (sudo scripts/test.sh): the tests start runtimes" >&2; exit 1; }
target=${CARGO_TARGET_DIR:-$PWD/target}
# sudo resets PATH: find the invoking user's cargo (rustup's ~/.cargo/bin) when root has none.
if ! command -v cargo >/dev/null; then
  for d in "${CARGO_HOME:-/nonexistent}/bin" "$HOME/.cargo/bin" \
      "$(getent passwd "${SUDO_USER:-root}" | cut -d: -f6)/.cargo/bin"; do
    if [ -x "$d/cargo" ]; then PATH="$d:$PATH"; break; fi
  done
  command -v cargo >/dev/null || { echo "test.sh: no cargo on PATH (install Rust with rustup first)" >&2; exit 1; }
fi

export DEBIAN_FRONTEND=noninteractive
packages=(runc containerd busybox-static podman skopeo protobuf-compiler jq python3 python3-venv gcc binutils promtool dbus-daemon logrotate)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # containerd 1.7 (CRI and NRI tests) comes from Debian trixie (it needs only libc6 >= 2.34 and
  # runc); a low pin keeps every other package on bookworm. Never `apt-get install -t trixie`.
  if [ ! -f /etc/apt/sources.list.d/trixie.sources ]; then
    # The same Debian mirror as the machine's bookworm suites.
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$mirror" ] || { echo "test.sh: no bookworm mirror in /etc/apt to add trixie from" >&2; exit 1; }
    printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$mirror" \
      > /etc/apt/sources.list.d/trixie.sources
  fi
  [ -f /etc/apt/preferences.d/trixie-low ] || printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' > /etc/apt/preferences.d/trixie-low
  echo "== apt-get install ${missing[*]}"
  apt-get update -q
  apt_names=()
  for p in "${missing[@]}"; do
    if [ "$p" = containerd ]; then apt_names+=(containerd/trixie); else apt_names+=("$p"); fi
  done
  apt-get install -y -q "${apt_names[@]}" >/dev/null
fi
containerd --version
# The cgroup v2 + systemd guest (tests/vm_systemd.rs): QEMU and mmdebstrap.
tests/vm/cgroup2-vm.sh deps

# cargo-deb: pinned; a no-op when this version is installed (about 2.5 CPU-minutes to build).
if ! cargo deb --version 2>/dev/null | grep -q '3\.8\.0'; then
  t=$(date +%s)
  cargo install cargo-deb --version 3.8.0 --locked
  echo "== cargo-deb: $(( $(date +%s) - t )) s"
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# The static binaries are musl's (scripts/build-static.sh): the tests build them.
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx x86_64-unknown-linux-musl; then
  echo "== rustup target add x86_64-unknown-linux-musl"
  rustup target add x86_64-unknown-linux-musl
fi

# Helm v4 (its Go library in PyPI's helm-python-sdk), in a venv of its own: the chart tests render
# and lint deploy/helm/cpuplan with it, offline, with no helm binary and no cluster.
helm_py=$target/tools/helm/bin/python
if ! "$helm_py" -c 'import helm_python' >/dev/null 2>&1; then
  echo "== helm-python-sdk into $target/tools/helm"
  rm -rf "$target/tools/helm"
  mkdir -p "$target/tools"
  python3 -m venv "$target/tools/helm"
  "$target/tools/helm/bin/pip" install -q "helm-python-sdk==0.2.2"
fi
echo "helm $("$helm_py" -c 'import helm_python; print(helm_python.helm_sdk_version())') (helm-python-sdk)"

# containerd 2.x beside the system's 1.7, unpacked under the target dir (a no-op when there).
scripts/containerd2.sh "$target/tools/containerd2"

echo "== set up in $(( $(date +%s) - start )) s"
$setup_only && exit 0

# Disk: a full run's target directory holds three builds (the tests', the static hook's, the
# wheel's). Incremental caches only cost space on a run that starts clean; a machine short of
# space is told so in one line before the build, not by a linker's bus error half-way through.
# Measured: a clean run ends with 3.0–3.4 GiB of target (about 1.9 debug, 0.6 python, 0.3 static).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
need_gib=${CPUPLAN_TEST_DISK_GIB:-4}
dir=$target; while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
free_gib=$(( $(df -Pk "$dir" | awk 'NR == 2 {print $4}') / 1048576 ))
echo "== disk: ${free_gib} GiB free at $dir (a full run needs about ${need_gib} GiB)"
if [ "$free_gib" -lt "$need_gib" ]; then
  echo "test.sh: only ${free_gib} GiB free on the filesystem of $target; a full run needs about ${need_gib} GiB (set CARGO_TARGET_DIR to a larger one)" >&2
  exit 1
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --all-targets -- -D warnings
echo "== cargo test --workspace"
cargo test --workspace "$@"
# The NRI stub crate's tests against a real containerd, again on 2.x (the crate's own switch).
echo "== crates/nri's containerd tests on containerd 2.x"
NRI_PLUGIN_TEST_CONTAINERD=1 CARGO_TARGET_DIR="$target" cargo test -p nri-plugin --test it containerd::
echo "== target: $(du -sh "$target" 2>/dev/null | cut -f1) after the run"
echo "== test.sh took $(( $(date +%s) - start )) s"
