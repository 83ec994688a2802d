//! `install --dry-run` and `uninstall --dry-run` (the hook's, `--containerd`, `--nri`) on a node
//! root of their own (`--root-prefix`):
//! the tree is unchanged, and what each lists is exactly what the real command then changes;
//! and the package's opt-in registration `hooks/oci/cpuplan-annotated.json` run by a real
//! podman: only containers with a CDI or `cpuplan.*` annotation run the hook.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::hookbin;
use common::podman::Podman;
use common::runc::{fixtures, hook_bin, line_value};
use common::statics::static_cpuplan;
use serde_json::json;

/// One path of a tree: its bytes (none for a directory), mode, owner and inode (a file replaced
/// through a rename is a new inode, even with the same bytes).
type Entry = (PathBuf, Option<Vec<u8>>, u32, u32, u64);

/// Every path under `root`, directories too.
fn tree(root: &Path) -> Vec<Entry> {
    use std::os::unix::fs::MetadataExt;
    let mut all = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let (p, m) = (e.path(), e.metadata().unwrap());
            let bytes = if m.is_dir() {
                dirs.push(p.clone());
                None
            } else {
                Some(std::fs::read(&p).unwrap())
            };
            all.push((p, bytes, m.mode(), m.uid(), m.ino()));
        }
    }
    all.sort();
    all
}

/// The paths that differ between two trees (made, changed or gone).
fn changed(a: &[Entry], b: &[Entry]) -> BTreeSet<PathBuf> {
    let (a_set, b_set): (BTreeSet<_>, BTreeSet<_>) = (a.iter().collect(), b.iter().collect());
    a_set
        .symmetric_difference(&b_set)
        .map(|e| e.0.clone())
        .collect()
}

/// The paths a dry run's output lists (`would write P (…)`, `would remove P`…).
fn listed(out: &str) -> BTreeSet<PathBuf> {
    out.lines()
        .filter_map(|l| {
            let rest = [
                "would write ",
                "would replace ",
                "would remove the empty directory ",
                "would remove ",
                "would create the directory ",
            ]
            .iter()
            .find_map(|w| l.strip_prefix(w))?;
            Some(PathBuf::from(rest.split(" (").next().unwrap()))
        })
        .collect()
}

/// `cpuplan ARGS --root-prefix ROOT`: (status, stdout, stderr).
fn cpuplan(root: &Path, args: &[&str]) -> (i32, String, String) {
    hookbin::run(
        Command::new(static_cpuplan())
            .args(args)
            .arg("--root-prefix")
            .arg(root),
    )
}

/// `ARGS --dry-run` changes nothing under `root` and lists a path; then `ARGS` changes exactly
/// the paths listed. Returns the dry run's output.
fn dry_run_then_real(root: &Path, args: &[&str]) -> String {
    let before = tree(root);
    let mut dry = args.to_vec();
    dry.push("--dry-run");
    let (rc, out, err) = cpuplan(root, &dry);
    assert_eq!(rc, 0, "{dry:?}: {err}");
    assert_eq!(tree(root), before, "{dry:?} changed the tree: {out}");
    let command = match args.contains(&"--nri") {
        true => format!("{} --nri", args[0]),
        false => args[0].to_string(),
    };
    assert!(
        out.ends_with(&format!("\n{command} --dry-run: nothing was changed\n")),
        "{out}"
    );
    let would = listed(&out);
    assert!(!would.is_empty(), "{dry:?} lists nothing: {out}");
    let (rc, real, err) = cpuplan(root, args);
    assert_eq!(rc, 0, "{args:?}: {err}");
    assert_eq!(
        changed(&before, &tree(root)),
        would,
        "{args:?} changed other paths than its dry run listed:\n{out}\nthe real run:\n{real}"
    );
    out
}

#[test]
fn install_and_uninstall_dry_runs_list_what_the_real_runs_then_do() {
    common::runc::require("containerd install", &[("ctr", "containerd/trixie")]);
    let tmp = tempfile::Builder::new()
        .prefix("cpuplan-dry-")
        .tempdir()
        .unwrap();
    let root = tmp.path();
    // The hook's own install (the default prefix and hooks dir, under the root).
    let out = dry_run_then_real(root, &["install", "--with-precreate"]);
    let hook = root.join("usr/local/libexec/cpuplan/cpuplan-hook");
    assert!(
        out.contains(&format!(
            "would write {} (new, mode 0755)\n",
            hook.display()
        )),
        "{out}"
    );
    // Again, declaratively without precreate: one file would go, the rest be replaced.
    let out = dry_run_then_real(root, &["install"]);
    let precreate = root.join("usr/share/containers/oci/hooks.d/cpuplan-precreate.json");
    assert!(
        out.contains(&format!("would remove {}\n", precreate.display()))
            && out.contains(&format!("would replace {} (mode 0755)\n", hook.display())),
        "{out}"
    );
    // uninstall: every file, and the directories it leaves empty.
    let out = dry_run_then_real(root, &["uninstall"]);
    assert!(
        out.contains(&format!(
            "would remove the empty directory {}\n",
            root.join("usr/local/libexec/cpuplan").display()
        )),
        "{out}"
    );
    // containerd's registration (`ctr oci spec` runs in the dry run too): its base spec, its
    // drop-in, the config.toml it creates, and the restart hint.
    let etc = root.join("etc/containerd");
    let out = dry_run_then_real(root, &["install", "--containerd"]);
    for (path, what) in [
        ("cpuplan-base-spec.json", "new, mode 0644"),
        ("conf.d/cpuplan.toml", "new, mode 0644"),
        ("config.toml", "new, mode 0644"),
    ] {
        assert!(
            out.contains(&format!(
                "would write {} ({what})\n",
                etc.join(path).display()
            )),
            "{path}: {out}"
        );
    }
    assert!(out.contains("restart containerd"), "{out}");
    let out = dry_run_then_real(root, &["uninstall", "--containerd"]);
    assert!(
        out.contains(&format!(
            "would remove {}\n",
            etc.join("config.toml").display()
        )) && out.contains("restart containerd to unload it"),
        "{out}"
    );
    // containerd's NRI drop-in on a config.toml of the node's.
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("config.toml"), "version = 2\n").unwrap();
    let out = dry_run_then_real(root, &["install", "--nri"]);
    assert!(
        out.contains(&format!(
            "would write {} (new, mode 0644)\n",
            etc.join("conf.d/cpuplan-nri.toml").display()
        )) && out.contains(&format!(
            "would replace {} (mode 0644)\n",
            etc.join("config.toml").display()
        )) && out.contains("restart containerd to load it"),
        "{out}"
    );
    let out = dry_run_then_real(root, &["uninstall", "--nri"]);
    assert!(out.contains("restart containerd to unload it"), "{out}");
    // Nothing left to do: said so, and still nothing changed.
    let (rc, out, err) = cpuplan(root, &["uninstall", "--dry-run"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.starts_with("would change nothing\nnothing to remove: "),
        "{out}"
    );
}

/// The package's opt-in registration, as podman reads it from a hooks dir: the hook runs for a
/// container with a `cdi.k8s.io/` or `cpuplan.` annotation, and for no other (no plan files,
/// no log line), an annotation that merely contains `cpuplan.` included.
#[test]
fn the_annotated_registration_plans_only_annotated_containers() {
    let p = Podman::new("annotated");
    let tmp = tempfile::Builder::new()
        .prefix("cpuplan-annotated-")
        .tempdir()
        .unwrap();
    let config = tmp.path().join("hook.json");
    let log = tmp.path().join("hook.log");
    std::fs::write(
        &config,
        serde_json::to_vec(&json!({
            "topology_root": fixtures().join("e2e-host"),
            "claims_dir": tmp.path().join("claims"),
            "log": log,
        }))
        .unwrap(),
    )
    .unwrap();
    let mut reg: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/oci/cpuplan-annotated.json"),
        )
        .unwrap(),
    )
    .unwrap();
    reg["hook"]["path"] = json!(hook_bin());
    reg["hook"]["args"] = json!(["cpuplan-hook", "--config", config, "hook"]);
    p.register("cpuplan.json", &reg);
    let mut logged = 0;
    for (name, annotation, planned) in [
        ("plain", None, false),
        (
            "cdi",
            Some("cdi.k8s.io/cpuplan-test=example.com/gpu=0"),
            true,
        ),
        ("setting", Some("cpuplan.step-thread-core=auto"), true),
        ("lookalike", Some("io.example.cpuplan.x=1"), false),
    ] {
        let mut opts = vec!["--cpus", "1"];
        if let Some(a) = annotation {
            opts.extend(["--annotation", a]);
        }
        let init = p.init(name, &opts, "cat /run/cpuplan/plan.env 2>&1; true");
        assert_eq!(init.rc, 0, "{name}: podman create/init: {}", init.err);
        let run = p.start(name);
        assert_eq!(run.rc, 0, "{name}: podman start: {}", run.err);
        let usable = line_value(&run.out, "CPUPLAN_USABLE");
        assert_eq!(
            usable,
            planned.then_some("'1'"),
            "{name}: planned only when annotated: {}",
            run.out
        );
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            text.len() > logged,
            planned,
            "{name}: the hook ran (and logged) only when annotated: {text}"
        );
        logged = text.len();
    }
}
