//! The layers point one way: read → decide → edit → apply → front ends → cli.
//!
//! This test reads the source of the binary crate (`src/`) and of the planner crate
//! (`crates/cpuplan/src/`), finds every module's references to the crate's other modules
//! (`use crate::x…`, `crate::x::…` in code, `super::x` out of a top-level file; comments are
//! skipped), and fails when a module names one of a higher layer, a module of its own layer
//! (front ends never call each other), or when modules form a circle. A new module must be
//! given its layer here: that is where a reviewer sees the architecture change.
//!
//! It also reads the three built binaries' symbols: `cpuplan-hook` links neither the installer
//! nor the NRI plugin.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The binary crate's top-level modules, lowest layer first. A module may name modules of
/// lower layers only.
const SRC_LAYERS: &[&[&str]] = &[
    // Foundations: the log, ELF headers, the process's privileges.
    &["logging", "elf", "privileges"],
    // The operator's configuration.
    &["config"],
    // Read everything about a container once.
    &["read"],
    // Decide, purely.
    &["decide"],
    // The runtime-neutral edit.
    &["edit"],
    // Applying an edit (claims, safe writes, the cpuset), and drawing a plan.
    &["apply", "render", "picture"],
    // The front ends, and the installer.
    &["hook", "precreate", "explain", "nri", "install"],
    // The command line, and the parsers the fuzz targets drive.
    &["cli", "fuzzing"],
];

/// Arrows that break the rule today, each with the change that removes it. Keep it empty:
/// an entry is a debt with a name, never a way to make a new arrow pass.
const SRC_PENDING: &[(&str, &str, &str)] = &[];

/// The planner crate's modules, lowest layer first.
const PLANNER_LAYERS: &[&[&str]] = &[
    // Text and errors.
    &["quote", "cpuset", "pci"],
    &["error"],
    // Bounded, non-blocking reads under a root; a directory's entries without opendir.
    &["fsutil", "dirents"],
    // Parsers of kernel files.
    &["mountinfo", "proc_cgroup", "cgroup_path", "proc_stat"],
    // The host's NUMA nodes and distances; a GPU's CPU node where its own node has none.
    &["cpu_node"],
    // The process's cgroups, limits, mask, namespace; the host's cores and GPUs.
    &["cgroup", "mask", "pidns", "mntns", "smt", "gpus"],
    &["quota", "topology", "gpu"],
    // The host inventory: the host-wide facts above, read once per boot.
    &["inventory"],
    // The plan and its two file forms.
    &["plan"],
    &["json"],
    &["planenv", "claims"],
    // The fuzz targets' view of the parsers.
    &["fuzzing"],
];

#[test]
fn the_binary_crate_s_layers_point_one_way() {
    check(&root().join("src"), SRC_LAYERS, SRC_PENDING);
}

#[test]
fn the_planner_crate_s_layers_point_one_way() {
    check(&root().join("crates/cpuplan/src"), PLANNER_LAYERS, &[]);
}

#[test]
fn the_reader_finds_every_form_of_reference() {
    let text = "use crate::{a::X, b::{c, d}};\nuse crate::e;\n// crate::f in a comment\n\
                fn g() { crate::h::i(); let s = \"x\"; } /* crate::j */ use super::k;";
    let top: BTreeSet<String> = references(text, 0).into_iter().collect();
    let want: BTreeSet<String> = ["a", "b", "e", "h", "k"].map(String::from).into();
    assert_eq!(top, want);
    let nested: BTreeSet<String> = references(text, 1).into_iter().collect();
    assert!(!nested.contains("k"), "super:: of a submodule stays inside");
}

/// What the one-shot hook must not carry: the installer and the NRI plugin, with the crates
/// only they use. A demangled symbol holding one of these is code of it.
const NOT_IN_THE_HOOK: &[&str] = &[
    "cpuplan_hook::install::",
    "cpuplan_hook::cli::install::",
    "cpuplan_hook::nri::",
    "cpuplan_hook::cli::nri::",
    "nri_plugin::",
    "toml_edit::",
];

/// The functions and data the built binary at `path` holds, demangled, one a line. rustc links
/// with `--gc-sections` (each function in a section of its own), so a binary holds only what
/// its `main` reaches: a module wired into its command table shows up here, one left out does
/// not.
fn symbols(path: &str) -> String {
    let out = std::process::Command::new("nm")
        .args(["--demangle", "--defined-only", path])
        .output()
        .expect("run nm (binutils)");
    assert!(
        out.status.success(),
        "nm {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_hook_links_neither_the_installer_nor_the_nri_plugin() {
    let hook = symbols(env!("CARGO_BIN_EXE_cpuplan-hook"));
    let nri = symbols(env!("CARGO_BIN_EXE_cpuplan-nri"));
    let cpuplan = symbols(env!("CARGO_BIN_EXE_cpuplan"));
    // The symbols tell modules apart: the hook holds its own stages, the plugin the NRI
    // modules, the operator's command the installer.
    assert!(
        hook.contains("cpuplan_hook::hook::"),
        "no hook code in cpuplan-hook?"
    );
    assert!(nri.contains("cpuplan_hook::nri::") && nri.contains("nri_plugin::"));
    assert!(cpuplan.contains("cpuplan_hook::install::") && cpuplan.contains("toml_edit::"));
    let found: Vec<&str> = hook
        .lines()
        .filter(|l| NOT_IN_THE_HOOK.iter().any(|m| l.contains(m)))
        .take(10)
        .collect();
    assert!(
        found.is_empty(),
        "cpuplan-hook links the installer or the NRI plugin (wired into its command table?):\n  {}",
        found.join("\n  ")
    );
    // Nor does the operator's command carry the plugin, or the plugin the installer.
    assert!(
        !cpuplan.contains("cpuplan_hook::nri::"),
        "cpuplan links the NRI plugin"
    );
    assert!(
        !nri.contains("cpuplan_hook::install::"),
        "cpuplan-nri links the installer"
    );
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Fails naming every arrow that breaks `layers` (less `pending`) and every circle under `src`.
fn check(src: &Path, layers: &[&[&str]], pending: &[(&str, &str, &str)]) {
    let graph = graph(src);
    let layer_of = |m: &str| layers.iter().position(|l| l.contains(&m));
    let mut wrong = Vec::new();
    for (from, targets) in &graph {
        let Some(lf) = layer_of(from) else {
            wrong.push(format!(
                "{from}: a module no layer lists (add it to the test's table)"
            ));
            continue;
        };
        for to in targets {
            let Some(lt) = layer_of(to) else {
                wrong.push(format!("{to}: a module no layer lists (named by {from})"));
                continue;
            };
            if lt >= lf && !pending.iter().any(|(f, t, _)| f == from && t == to) {
                let how = if lt == lf {
                    "its own layer"
                } else {
                    "a higher layer"
                };
                wrong.push(format!("{from} names {to}, of {how}"));
            }
        }
    }
    for (f, t, why) in pending {
        assert!(
            graph.get(*f).is_some_and(|s| s.contains(*t)),
            "the pending arrow {f} -> {t} is gone: remove it from the table ({why})"
        );
    }
    if let Some(circle) = circle(&graph) {
        wrong.push(format!("a circle: {}", circle.join(" -> ")));
    }
    assert!(
        wrong.is_empty(),
        "{}:\n  {}",
        src.display(),
        wrong.join("\n  ")
    );
}

/// Each top-level module under `src` with the other top-level modules it names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut modules = BTreeSet::new();
    for file in rust_files(src) {
        let rel = file.strip_prefix(src).unwrap();
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let top = parts[0].trim_end_matches(".rs").to_string();
        // The crate root, and the binaries over it (src/bin: each only calls `cli`).
        if top == "lib" || top == "bin" {
            continue;
        }
        modules.insert(top.clone());
        // How deep the file's module is below its top-level module (`a.rs`, `a/mod.rs`: 0).
        let last = parts.last().unwrap();
        let depth = parts.len() - 1 - usize::from(last == "mod.rs");
        let text = std::fs::read_to_string(&file).unwrap();
        let named = graph.entry(top.clone()).or_default();
        for r in references(&text, depth) {
            if r != top {
                named.insert(r);
            }
        }
    }
    for targets in graph.values_mut() {
        targets.retain(|t| modules.contains(t));
    }
    graph
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The first names after each `crate::` (and each `super::` of a file `depth` 0 below its
/// top-level module, whose parent is the crate) in `text`, comments and strings skipped.
fn references(text: &str, depth: usize) -> Vec<String> {
    let code = strip(text);
    let mut out = Vec::new();
    let mut prefixes = vec!["crate::".to_string()];
    if depth == 0 {
        prefixes.push("super::".to_string());
    }
    for prefix in &prefixes {
        let mut rest = code.as_str();
        while let Some(i) = rest.find(prefix.as_str()) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue; // `$crate::`, `foo_crate::`, `a::crate::`
            }
            if let Some(inner) = rest.strip_prefix('{') {
                out.extend(group_heads(inner));
            } else {
                out.push(ident(rest));
            }
        }
    }
    out.retain(|n| !n.is_empty() && n != "self" && n != "super");
    out
}

/// The leading names of the items of a `{…}` group (`a::X, b::{c, d}` gives `a`, `b`).
fn group_heads(inner: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut level = 0;
    let mut start = true;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => level += 1,
            '}' if level == 0 => break,
            '}' => level -= 1,
            ',' if level == 0 => start = true,
            c if start && !c.is_whitespace() => {
                heads.push(ident(&inner[i..]));
                start = false;
            }
            _ => {}
        }
    }
    heads
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// `text` without comments and string literals (each replaced by a space).
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else if b[i] == b'r'
            && (b[i..].starts_with(b"r#\"") || b[i..].starts_with(b"r\""))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: up to its closing quote and as many hashes.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            let close: Vec<u8> = std::iter::once(b'"').chain(vec![b'#'; hashes]).collect();
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push(' ');
        } else if b[i] == b'\'' && (b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\')) {
            // A char literal (`'"'`, `'\''`), not a lifetime.
            i += if b[i + 1] == b'\\' { 4 } else { 3 };
            out.push(' ');
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// A circle among the modules of `graph`, if there is one (as the path around it).
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for t in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(t, graph, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut done, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}
