# Shared by scripts/python-wheel.sh and scripts/publish.sh (sourced, not run): the Python
# build tools from PyPI in a venv, and the checks on what they build.

# python_tools PYTHON DIR: maturin, ziglang, auditwheel and twine in the venv DIR (made once, kept).
python_tools() {
    local python=$1 dir=$2
    if ! "$dir/bin/python" -c 'import maturin, ziglang, auditwheel, twine' >/dev/null 2>&1; then
        echo "== installing maturin, ziglang, auditwheel and twine into $dir"
        rm -rf "$dir"
        "$python" -m venv "$dir"
        "$dir/bin/pip" install -q "maturin>=1.5,<2" "ziglang>=0.13,<1" "auditwheel>=6,<7" "twine>=5,<8"
    fi
}

# check_manylinux2014 TOOLS WHEEL ARCH: auditwheel must find WHEEL consistent with manylinux_2_17_ARCH.
check_manylinux2014() {
    local tools=$1 wheel=$2 arch=$3 shown
    shown=$("$tools/bin/auditwheel" show "$wheel")
    echo "$shown"
    case $(echo "$shown" | tr -s ' \n' ' ') in
    *"is consistent with the following platform tag: \"manylinux_2_17_$arch\""*) ;;
    *)
        echo "auditwheel: $wheel is not manylinux_2_17_$arch (manylinux2014)" >&2
        return 1
        ;;
    esac
}

# check_sdist_needs_rust TOOLS DIR: build the sdist into DIR; a build from it with no cargo on
# PATH must fail at once with the message of crates/python/build_backend (no download).
check_sdist_needs_rust() {
    local tools=$1 dir=$2 out rc sdist
    rm -rf "$dir" && mkdir -p "$dir"
    if ! out=$(PATH=$tools/bin:$PATH "$tools/bin/maturin" sdist -m crates/python/Cargo.toml --out "$dir" 2>&1); then
        echo "$out" >&2
        return 1
    fi
    sdist=$(echo "$dir"/cpuplan-*.tar.gz)
    [ -f "$sdist" ] || { echo "no sdist in $dir" >&2; return 1; }
    set +e
    out=$(cd "$dir" && timeout 120 env -u CARGO_HOME -u RUSTUP_HOME PATH="$tools/bin" \
        "$tools/bin/python" -m pip wheel --no-build-isolation --no-deps -w "$dir/wheel" "$sdist" 2>&1)
    rc=$?
    set -e
    if [ "$rc" -eq 0 ] || ! grep -q "building from source needs a Rust toolchain" <<<"$out"; then
        echo "the sdist built, or failed otherwise, without cargo (exit $rc):" >&2
        echo "$out" >&2
        return 1
    fi
    echo "${sdist##*/}: $(grep -o "building from source needs a Rust toolchain.*" <<<"$out" | head -n 1)"
}
