//! `cpuplan status` (the node, its GPUs and claims, each planned container) and `claims`; and
//! what a user who cannot read them is told.

use std::path::Path;

use serde_json::Value;

use super::{ok_json, repo, run};

#[test]
fn status_draws_the_node_its_gpus_claims_and_planned_containers() {
    let t = common::operator_dir::tempdir();
    let (claims, nri) = (t.path().join("claims"), t.path().join("nri"));
    let cfg = t.path().join("hook.json");
    std::fs::write(
        &cfg,
        serde_json::json!({ "claims_dir": claims, "nri_dir": nri }).to_string(),
    )
    .unwrap();
    let host = repo("examples/host");
    let (c, h) = (cfg.to_str().unwrap(), host.to_str().unwrap());
    let text = |args: &[&str]| {
        let out = run(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let status = ["--config", c, "status", "--topology-root", h];
    // Nothing planned: the nodes, every GPU free.
    let empty = text(&status);
    assert!(empty.starts_with("node: 2 NUMA node(s), 224 CPUs, 112 cores; 0 planned container(s); 0 of 8 GPU(s) claimed\n"), "{empty}");
    assert!(empty.contains("node 0: cpus 0-55,112-167\n"), "{empty}");
    assert!(
        empty.contains("  gpu 0000:18:00.0 (node 0): free\n"),
        "{empty}"
    );
    assert!(empty.contains("no planned containers"), "{empty}");
    // A container the NRI plugin planned: its plan directory, and its claim (taken by this
    // test's process, as the plugin takes its claims).
    let mut plan = ok_json(&[
        "explain",
        "--json",
        "--bundle",
        repo("examples/bundle").to_str().unwrap(),
        "--root",
        h,
    ]);
    // As the plugin writes it where it places the workers' processes: worker 0 on its GPU's
    // CPUs within the container's, worker 1 keeping the container's.
    plan["worker_placement"] = serde_json::json!(["0-27,112-139", null]);
    std::fs::create_dir_all(nri.join("c1")).unwrap();
    std::fs::write(nri.join("c1/plan.json"), plan.to_string()).unwrap();
    let me = std::process::id();
    let gpus = ["0000:18:00.0".to_string(), "0000:2a:00.0".to_string()];
    common::operator_dir::claim_as_this_process(
        &claims,
        "c1",
        "nri:cpuplan",
        &["0000:18:00.0", "0000:2a:00.0"],
    );
    let shown = text(&status);
    assert!(
        shown.contains("1 planned container(s); 2 of 8 GPU(s) claimed"),
        "{shown}"
    );
    // Node 0's first cores: the two workers' cores pinned (A), the rest of the mask (a).
    let row = format!("     c0 AA{}A\n", "a".repeat(53));
    assert!(shown.contains(&row), "{shown}");
    assert!(
        shown.contains("node 1: cpus 56-111,168-223\n    c56 ........"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "  gpu 0000:18:00.0 (node 0): claimed by container c1 [A] (pid {me}, live)\n"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("  gpu 0000:9a:00.0 (node 1): free\n"),
        "{shown}"
    );
    assert!(
        shown.contains("container c1 [A] (nri): cpus 0-55,112-167, plan generation"),
        "{shown}"
    );
    assert!(shown.contains("  worker 0 GPU 0000:18:00.0: cpus 0,112, its processes placed on cpus 0-27,112-139\n  worker 1 GPU 0000:2a:00.0: cpus 1,113\n  API server: cpus 55,167\n  each worker's processes are placed at their exec by the NRI plugin"), "{shown}");
    let mut json_args = status.to_vec();
    json_args.push("--json");
    let v = ok_json(&json_args);
    let c1 = &v["containers"][0];
    assert_eq!(c1["container"], "c1");
    assert_eq!(c1["route"], "nri");
    assert_eq!(c1["workers"][1]["cpus"], "1,113");
    assert_eq!(c1["workers"][0]["placed"], "0-27,112-139");
    assert!(c1["workers"][1].get("placed").is_none(), "{c1}");
    assert_eq!(c1["gpus"], serde_json::json!(gpus));
    let claimed: Vec<&Value> = v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| !g["claim"].is_null())
        .collect();
    assert_eq!(claimed.len(), 2, "{v}");
    assert_eq!(claimed[0]["claim"]["mark"], "A");
    assert_eq!(v["nodes"][1]["cpus"], "56-111,168-223");
    // A plan that does not parse is a problem line; the rest is still drawn.
    std::fs::create_dir_all(nri.join("c2")).unwrap();
    std::fs::write(nri.join("c2/plan.json"), "{").unwrap();
    let broken = text(&status);
    assert!(
        broken.contains("problem: ") && broken.contains("c2/plan.json"),
        "{broken}"
    );
    assert!(broken.contains("container c1 [A]"), "{broken}");
}

#[test]
fn claims_lists_nothing_in_an_empty_dir() {
    let t = common::operator_dir::tempdir();
    let cfg = t.path().join("hook.json");
    std::fs::write(
        &cfg,
        format!(
            r#"{{"claims_dir": "{}"}}"#,
            t.path().join("claims").display()
        ),
    )
    .unwrap();
    let v = ok_json(&["claims", "--config", cfg.to_str().unwrap(), "--json"]);
    assert_eq!(v, serde_json::json!([]));
}

/// `cpuplan ARGS` run by `nobody` (uid and gid 65534, no supplementary groups) from a copy of
/// the binary that user can run, whatever the checkout's mode: (status, stdout, stderr).
fn as_nobody(bin: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin)
        .args(args)
        .output()
        .expect("setpriv (util-linux)");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn status_and_claims_by_a_user_who_cannot_read_them_say_so_and_exit_2() {
    use std::os::unix::fs::PermissionsExt;
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test runs as root (CI does): it drops to nobody with setpriv"
    );
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    let t = tempfile::tempdir().unwrap();
    mode(t.path(), 0o755).unwrap();
    let bin = t.path().join("cpuplan");
    std::fs::copy(common::hookbin::cpuplan_bin(), &bin).unwrap();
    mode(&bin, 0o755).unwrap();
    // The claims as the hook keeps them: root's, 0700, in a directory of the operator's. One
    // live claim (this test's process).
    let o = common::operator_dir::tempdir();
    mode(o.path(), 0o755).unwrap();
    let (claims, nri) = (o.path().join("claims"), o.path().join("nri"));
    std::fs::create_dir(&claims).unwrap();
    mode(&claims, 0o700).unwrap();
    common::operator_dir::claim_as_this_process(&claims, "c1", "nri:cpuplan", &["0000:18:00.0"]);
    let cfg = t.path().join("hook.json");
    std::fs::write(
        &cfg,
        serde_json::json!({ "claims_dir": claims, "nri_dir": nri }).to_string(),
    )
    .unwrap();
    mode(&cfg, 0o644).unwrap();
    let c = cfg.to_str().unwrap();
    // Root sees the claim.
    let v = ok_json(&["--config", c, "status", "--json"]);
    let claimed = v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| !g["claim"].is_null());
    assert_eq!(claimed.count(), 1, "{v}");
    // Nobody is told, in one line naming the directory and the error: never an empty node.
    let named = format!(
        "cannot read the claims directory {}: Permission denied",
        claims.display()
    );
    for args in [
        vec!["--config", c, "status"],
        vec!["--config", c, "status", "--json"],
        vec!["--config", c, "claims"],
        vec!["--config", c, "claims", "--json"],
    ] {
        let (code, out, err) = as_nobody(&bin, &args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(&named) && err.contains("run this as root"),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    // Claims it can read, an NRI plan directory it cannot: that one is named.
    mode(&claims, 0o755).unwrap();
    // (No claims directory yet: nothing claimed, as before the hook's first claim.)
    let empty = o.path().join("no-claims");
    std::fs::create_dir(&nri).unwrap();
    mode(&nri, 0o700).unwrap();
    std::fs::write(
        &cfg,
        serde_json::json!({ "claims_dir": empty, "nri_dir": nri }).to_string(),
    )
    .unwrap();
    let (code, out, err) = as_nobody(&bin, &["--config", c, "status"]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains(&format!(
            "cannot read the NRI plugin's plan directory {}",
            nri.display()
        )),
        "{err}"
    );
    // And where everything reads, it draws the node (none planned), as root would.
    mode(&nri, 0o755).unwrap();
    let (code, out, err) = as_nobody(&bin, &["--config", c, "status"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("no planned containers"), "{out}");
}
