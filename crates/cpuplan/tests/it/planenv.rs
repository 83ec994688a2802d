//! Properties of `plan.env`: decoding what was encoded gives the plan back, for generated plans
//! and hostile strings, and a POSIX `sh` sourcing the file sets exactly the encoded values.

use std::process::Command;

use cpuplan::planenv::PlanEnv;
use cpuplan::planenv::Pools;
use cpuplan::{CpuSet, PoolSplit};
use proptest::prelude::*;

fn cpus() -> impl Strategy<Value = CpuSet> {
    prop::collection::vec(0usize..512, 1..20).prop_map(|v| v.into_iter().collect())
}

/// Text a container or a log line may carry: quotes, `$`, backticks, newlines, CRs, `;`,
/// backslashes, `#`, non-ASCII, and NUL (which no environment variable can hold).
fn hostile() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("'".to_string()),
            Just("\"".to_string()),
            Just("$(id)".to_string()),
            Just("`x`".to_string()),
            Just("\n".to_string()),
            Just("\r\n".to_string()),
            Just(";".to_string()),
            Just("\\".to_string()),
            Just(" # ".to_string()),
            Just("é☃".to_string()),
            Just("\0".to_string()),
            "[a-z0-9 ,.-]{0,6}",
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

fn device() -> impl Strategy<Value = Option<String>> {
    prop::option::of(
        (0u32..0x10000, 0u8..=255, 0u8..32, 0u8..8)
            .prop_map(|(d, b, s, f)| format!("{d:04x}:{b:02x}:{s:02x}.{f}")),
    )
}

prop_compose! {
    fn plan_env()(
        setting in hostile(),
        mask in cpus(),
        usable in 1usize..1000,
        left in 1usize..1000,
        pinned in prop::option::of(cpus()),
        workers in prop::collection::vec((prop::option::of(cpus()), device()), 0..6),
        result in prop::option::of(cpus()),
        pools in (1usize..9, 1usize..9, 1usize..99, 1usize..99),
        split in prop::bool::ANY,
        worker_threads in 1usize..1000,
        why in hostile(),
        generation in 0u64..1_000_000,
    ) -> PlanEnv {
        PlanEnv {
            setting,
            mask,
            usable,
            left,
            pinned: pinned.unwrap_or_default(),
            workers: workers.iter().map(|(w, _)| w.clone()).collect(),
            devices: workers.into_iter().map(|(_, d)| d).collect(),
            result,
            pools: Pools {
                preprocess_threads: pools.0,
                png_threads: pools.1,
                encode_workers: pools.2,
                copy_workers: pools.3,
            },
            split: if split { PoolSplit::PerProcess } else { PoolSplit::Off },
            worker_threads,
            why,
            generation,
        }
    }
}

/// `p` as it can be held in an environment: NUL bytes dropped.
fn storable(mut p: PlanEnv) -> PlanEnv {
    p.setting = p.setting.replace('\0', "");
    p.why = p.why.replace('\0', "");
    p
}

proptest! {
    #[test]
    fn decode_gives_back_what_encode_wrote(p in plan_env()) {
        let text = p.encode();
        prop_assert_eq!(PlanEnv::decode(&text).unwrap(), storable(p));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn sh_sources_exactly_the_encoded_values(p in plan_env()) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plan.env");
        std::fs::write(&file, p.encode()).unwrap();
        let vars = storable(p).vars();
        let script = vars
            .iter()
            .map(|(k, _)| format!("printf '%s\\0' \"${k}\""))
            .collect::<Vec<_>>()
            .join("; ");
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(". \"$1\" && {script}"))
            .arg("sh")
            .arg(&file)
            .env_clear()
            .output()
            .unwrap();
        prop_assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        prop_assert!(out.stderr.is_empty(), "sourcing ran something: {}", String::from_utf8_lossy(&out.stderr));
        let got: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .split('\0')
            .map(String::from)
            .collect();
        let want: Vec<String> = vars.into_iter().map(|(_, v)| v).chain([String::new()]).collect();
        prop_assert_eq!(got, want);
    }
}
