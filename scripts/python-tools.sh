# Shared by scripts/python-wheel.sh, scripts/publish.sh and benches/gain (sourced, not run): the
# Python build tools from PyPI in a venv, and the checks on what they build.

# python_tools PYTHON DIR: maturin, ziglang (zig as maturin's linker, for glibc 2.17) and
# auditwheel in the venv DIR (made once, kept).
python_tools() {
    local python=$1 dir=$2
    if ! "$dir/bin/python" -c 'import maturin, ziglang, auditwheel' >/dev/null 2>&1; then
        echo "== installing maturin, ziglang and auditwheel into $dir"
        rm -rf "$dir"
        "$python" -m venv "$dir"
        "$dir/bin/pip" install -q "maturin>=1.5,<2" "ziglang>=0.13,<1" "auditwheel>=6,<7"
    fi
}

# publish_tools PYTHON DIR: python_tools and twine (releases only).
publish_tools() {
    python_tools "$1" "$2"
    if ! "$2/bin/python" -c 'import twine' >/dev/null 2>&1; then
        echo "== installing twine into $2"
        "$2/bin/pip" install -q "twine>=5,<8"
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

# maturin_warnings FILE: maturin's own warnings in FILE (`⚠️  Warning: ...`; cargo's lower-case
# `warning:` lines about the crates' manifests are not maturin's); fails when there are none.
maturin_warnings() {
    grep "Warning:" "$1"
}

# check_sdist TOOLS DIR: build the sdist into DIR with maturin; it must carry the crate's version
# (crates/python/Cargo.toml, the one source) in its PKG-INFO and maturin must not warn.
check_sdist() {
    local tools=$1 dir=$2 out sdist version
    rm -rf "$dir" && mkdir -p "$dir"
    if ! out=$(PATH=$tools/bin:$PATH "$tools/bin/maturin" sdist -m crates/python/Cargo.toml --out "$dir" 2>&1); then
        echo "$out" >&2
        return 1
    fi
    if maturin_warnings <(echo "$out"); then
        echo "maturin sdist warned:" >&2
        echo "$out" >&2
        return 1
    fi
    version=$(sed -n 's/^version = "\(.*\)"$/\1/p' crates/python/Cargo.toml | head -n 1)
    sdist=$dir/cpuplan-$version.tar.gz
    [ -f "$sdist" ] || { echo "no $sdist (the crate's version $version) in $dir: $(ls "$dir")" >&2; return 1; }
    if ! tar -xOzf "$sdist" "cpuplan-$version/PKG-INFO" | grep -qx "Version: $version"; then
        echo "$sdist: PKG-INFO does not say Version: $version" >&2
        return 1
    fi
    echo "${sdist##*/}: version $version, maturin's backend"
}
