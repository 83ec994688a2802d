#!/usr/bin/env bash
# fuzz/run.sh SECONDS [TARGET...]
#
# Runs each cargo-fuzz target (all of them by default) for SECONDS, one after the other, and
# prints the executions each ran. A crash is saved by libFuzzer under fuzz/artifacts/<target>/;
# copy it to fuzz/regressions/<target>/ so that `cargo test --test host fuzz_regressions::` replays it.
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain; with only a stable one
# it sets RUSTC_BOOTSTRAP=1 to unlock the nightly flags cargo-fuzz passes.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^cpuplan-fuzz$')
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then toolchain=(+nightly); else export RUSTC_BOOTSTRAP=1; fi
mkdir -p logs
summary=()
status=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  # Seed the corpus with the regression inputs, so known cases are mutated from.
  [ -d "regressions/$t" ] && cp -n regressions/"$t"/* "corpus/$t/" 2>/dev/null || true
  echo "== $t for ${secs}s"
  rc=0
  cargo "${toolchain[@]}" fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 \
    >"logs/$t.log" 2>&1 || rc=$?
  runs=$(sed -n 's/^Done \([0-9]*\) runs in.*/\1/p' "logs/$t.log" | tail -1)
  [ -n "$runs" ] || runs=$(grep -o '^#[0-9]*' "logs/$t.log" | tail -1 | tr -d '#')
  if [ $rc -ne 0 ]; then status=1; summary+=("$t: CRASH after ${runs:-?} runs (rc $rc), see fuzz/logs/$t.log and fuzz/artifacts/$t/");
  else summary+=("$t: ${runs:-?} runs in ${secs}s, no crash"); fi
  echo "${summary[-1]}"
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
