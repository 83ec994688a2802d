//! The text order (scripts/build-static.sh, build.rs, docs/performance.md): the static hook is
//! linked with the functions scripts/text-order.txt lists at the start of its text.

use std::collections::HashSet;
use std::process::Command;

use common::statics::static_hook;

/// `(address, size, name)` of each function (`t`/`T`/`W` in `nm`) of `bin`.
fn functions(bin: &std::path::Path) -> Vec<(u64, u64, String)> {
    let out = Command::new("nm")
        .args(["--defined-only", "-S", "-t", "d"])
        .arg(bin)
        .output()
        .expect("nm (binutils; .ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(4, ' ').collect();
            match f[..] {
                [addr, size, "t" | "T" | "W" | "w", name] => {
                    Some((addr.parse().ok()?, size.parse().ok()?, name.to_string()))
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn the_listed_functions_lead_the_static_hooks_text() {
    let hook = static_hook();
    let order_file = hook.with_file_name("cpuplan-hook.order");
    let order = std::fs::read_to_string(&order_file)
        .unwrap_or_else(|e| panic!("{}: {e}", order_file.display()));
    let listed: HashSet<&str> = order.lines().collect();
    // The debug build names fewer of them than the release build the list was taken from
    // (other sizes, no inlining), but many all the same.
    assert!(
        listed.len() >= 50,
        "{} names {} functions",
        order_file.display(),
        listed.len()
    );
    // Rust's functions each have their own section, which the linker places one by one: the
    // listed ones first, in the file's order, the others after them.
    let rust = |n: &str| n.starts_with("_ZN") || n.starts_with("_R");
    let fns = functions(&hook);
    let last_listed = fns
        .iter()
        .filter(|(_, _, n)| rust(n) && listed.contains(n.as_str()))
        .map(|(a, _, _)| *a)
        .max()
        .expect("no listed Rust function in the hook");
    let unlisted: Vec<&(u64, u64, String)> = fns
        .iter()
        .filter(|(_, s, n)| rust(n) && *s > 0 && !listed.contains(n.as_str()))
        .collect();
    let before: Vec<&str> = unlisted
        .iter()
        .filter(|(a, _, _)| *a < last_listed)
        .map(|(_, _, n)| n.as_str())
        .collect();
    assert!(
        before.len() * 100 <= unlisted.len(),
        "{} of {} unlisted Rust functions lie among the listed ones (the order was not applied?): {:?}",
        before.len(),
        unlisted.len(),
        &before[..before.len().min(5)]
    );
}
