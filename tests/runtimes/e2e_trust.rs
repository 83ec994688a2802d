//! Who may name a container's GPUs, with real runc: the container's own environment is the
//! tenant's and never takes a claim (unless `gpu_sources` trusts it); the spec's devices and the
//! runtime's device nodes are the operator's; a NIC beside a GPU is no GPU.

use std::path::{Path, PathBuf};
use std::process::Command;

use common::runc::{fixtures, line_value, two_gpu_host, Bundle};
use serde_json::{json, Value};

/// The operator's side shared by every container of a test: a hook config, its claims and log.
struct Node {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Node {
    fn new(topology_root: &Path) -> Node {
        let dir = common::operator_dir::tempdir();
        let config = dir.path().join("hook.json");
        let cfg = json!({
            "topology_root": topology_root,
            "claims_dir": dir.path().join("claims"),
            "log": dir.path().join("hook.log"),
        });
        std::fs::write(&config, serde_json::to_vec(&cfg).unwrap()).unwrap();
        Node { dir, config }
    }

    /// A bundle running `cmd` with the hook registered at createRuntime and poststop.
    fn bundle(&self, tag: &str, cmd: &str) -> Bundle {
        self.planned(Bundle::new(tag, cmd))
    }

    /// A bundle like [`Node::bundle`]'s with an operator's hook at `stage` before cpuplan's:
    /// the shell command `script(rootfs)` run in the container's mount namespace (as
    /// libnvidia-container enters it), `rootfs` the bundle's on the host.
    fn bundle_after(
        &self,
        tag: &str,
        cmd: &str,
        stage: &str,
        script: impl FnOnce(&Path) -> String,
    ) -> Bundle {
        let mut b = Bundle::new(tag, cmd);
        let enter = r#"pid=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p'); exec nsenter -t "$pid" -m -- sh -c "$1""#;
        let script = script(&b.rootfs());
        b.hook(
            &[stage],
            &[
                "/bin/sh".into(),
                "-c".into(),
                enter.into(),
                "sh".into(),
                script,
            ],
        );
        self.planned(b)
    }

    fn planned(&self, mut b: Bundle) -> Bundle {
        b.hook_with_config(&self.config);
        b.config["linux"]["resources"]["cpu"] = json!({"quota": 100000, "period": 100000});
        b
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("hook.log")).unwrap_or_default()
    }

    fn claims(&self) -> Value {
        common::hookbin::cpuplan_json(&self.config, &["claims", "--json"])
    }
}

/// Runs `b` in a thread (runc in the foreground there) and waits until its init wrote `ready`
/// into its rootfs (its `/tmp` is the host's bundle dir).
fn start(b: &Bundle) -> std::thread::JoinHandle<(i32, String, String)> {
    b.run_until(&b.rootfs().join("tmp/ready"))
}

/// Stops a container started with [`start`] and returns its output.
fn stop(b: &Bundle, t: std::thread::JoinHandle<(i32, String, String)>) -> String {
    std::fs::write(b.rootfs().join("tmp/stop"), "").unwrap();
    let (_, out, err) = t.join().unwrap();
    format!("{out}{err}")
}

/// Copies the plan into the rootfs' /tmp (host-visible), says ready, and waits for /tmp/stop.
const HOLD: &str =
    "cp /run/cpuplan/plan.env /run/cpuplan/plan.json /tmp/ 2>/dev/null; touch /tmp/ready; \
                    while ! test -e /tmp/stop; do sleep 0.1; done";

fn plan_json(b: &Bundle) -> Value {
    serde_json::from_slice(&std::fs::read(b.rootfs().join("tmp/plan.json")).unwrap()).unwrap()
}

#[test]
fn a_tenants_environment_cannot_take_every_gpu_from_the_next_container() {
    let node = Node::new(&fixtures().join("e2e-host"));
    // The attacker: runc's default devices, NVIDIA_VISIBLE_DEVICES=all.
    let mut attacker = node.bundle("attacker", HOLD);
    attacker.env("NVIDIA_VISIBLE_DEVICES=all");
    let a = start(&attacker);
    let attacker_plan = plan_json(&attacker);
    assert_eq!(
        attacker_plan["inputs"]["gpus"],
        json!(["0000:3b:00.0"]),
        "planned for"
    );
    assert!(
        attacker_plan["why"]
            .as_str()
            .unwrap()
            .contains("not claimed, as no source gpu_sources trusts names them"),
        "{attacker_plan}"
    );
    assert_eq!(node.claims(), json!([]), "the environment took no claim");
    // The victim: GPU 0 given by the operator's spec, started while the attacker runs.
    let mut victim = node.bundle("victim", HOLD);
    victim.gpu(0);
    let v = start(&victim);
    let victim_plan = plan_json(&victim);
    let why = victim_plan["why"].as_str().unwrap();
    assert!(!why.contains("held by"), "{why}");
    assert!(!why.contains("without a GPU claim"), "{why}");
    assert_eq!(
        victim_plan["inputs"]["cpuset"], "1",
        "narrowed to its GPU's CPU"
    );
    let claims = node.claims();
    let holders: Vec<&str> = claims
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["holder"]["container"].as_str().unwrap())
        .collect();
    assert_eq!(holders, [victim.id.as_str()], "{claims}");
    stop(&victim, v);
    stop(&attacker, a);
    assert!(node
        .log()
        .contains(&format!("container {}: stopped, released 1", victim.id)));
}

/// A host char device 195:0 in the node's dir (made by the test; nothing opens it).
fn host_gpu_node(node: &Node) -> PathBuf {
    let dev = node.dir.path().join("nvidia0");
    nix::sys::stat::mknod(
        &dev,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(195, 0),
    )
    .unwrap();
    dev
}

#[test]
fn a_gpu_device_node_the_runtime_put_in_dev_is_the_containers() {
    // NVIDIA's legacy hook injects /dev/nvidiaN without touching config.json: libnvidia-container
    // enters the container's mount namespace and bind-mounts the host's node onto its /dev
    // tmpfs. Here an operator's createRuntime hook before cpuplan's does the same with a host
    // char device 195:0 (made by the test; nothing opens it).
    let node = Node::new(&fixtures().join("e2e-host"));
    let dev = host_gpu_node(&node);
    let b = node.bundle_after("node", HOLD, "createRuntime", |rootfs| {
        let t = rootfs.join("dev/nvidia0");
        format!(
            "touch {t} && mount --bind {d} {t}",
            t = t.display(),
            d = dev.display()
        )
    });
    let t = start(&b);
    let plan = plan_json(&b);
    assert_eq!(plan["inputs"]["gpus"], json!(["0000:3b:00.0"]), "{plan}");
    let claims = node.claims();
    assert_eq!(claims[0]["holder"]["container"], b.id.as_str(), "{claims}");
    stop(&b, t);
}

#[test]
fn the_toolkit_s_legacy_prestart_hook_s_node_is_planned_and_claimed() {
    // NVIDIA's legacy runtime mode: the toolkit adds a prestart hook to config.json, and
    // nvidia-container-cli creates /dev/nvidiaN in the container's /dev (in its mount namespace,
    // on the runtime's tmpfs) and opens the device cgroup itself; config.json never names the
    // GPU, and runc runs prestart before createRuntime. Here a prestart script does the same
    // with mknod for GPU 1 (195:1); cpuplan's createRuntime hook then finds the node there.
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(&two_gpu_host(dir.path(), "0000:86:00.0", ["1", "1"]));
    let b = node.bundle_after("legacy", HOLD, "prestart", |rootfs| {
        let t = rootfs.join("dev/nvidia1");
        format!("mknod -m 666 {} c 195 1", t.display())
    });
    assert!(
        b.config["linux"]["devices"]
            .as_array()
            .is_none_or(|d| d.is_empty()),
        "config.json names no GPU"
    );
    let t = start(&b);
    let plan = plan_json(&b);
    assert_eq!(plan["inputs"]["gpus"], json!(["0000:86:00.0"]), "{plan}");
    assert_eq!(
        plan["inputs"]["cpuset"], "1",
        "narrowed to GPU 1's CPU: {plan}"
    );
    assert!(
        !plan["why"].as_str().unwrap().contains("not claimed"),
        "{plan}"
    );
    let claims = node.claims();
    assert_eq!(claims[0]["address"], "0000:86:00.0", "{claims}");
    assert_eq!(claims[0]["holder"]["container"], b.id.as_str(), "{claims}");
    let out = stop(&b, t);
    assert_eq!(node.claims(), json!([]), "poststop released it: {out}");
}

#[test]
fn a_gpu_device_node_a_mount_of_the_spec_puts_in_dev_is_never_claimed() {
    // The same node as a mount of the spec (an emptyDir's node through subPath, a volume at
    // /dev): the tenant's, so planned for but not claimed.
    let node = Node::new(&fixtures().join("e2e-host"));
    let dev = host_gpu_node(&node);
    let mut b = node.bundle("specnode", HOLD);
    b.config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/dev/nvidia0", "type": "bind", "source": dev, "options": ["bind"]}),
    );
    let t = start(&b);
    let plan = plan_json(&b);
    assert_eq!(
        plan["inputs"]["gpus"],
        json!(["0000:3b:00.0"]),
        "planned for: {plan}"
    );
    let why = plan["why"].as_str().unwrap();
    assert!(
        why.contains("not claimed") && why.contains("device node the container's mounts"),
        "{why}"
    );
    assert_eq!(node.claims(), json!([]), "never claimed");
    assert!(
        node.log().contains("/dev/nvidia0 (195:0) is not the runtime's device node (the spec mounts \"/dev/nvidia0\""),
        "{}",
        node.log()
    );
    stop(&b, t);
}

/// The e2e host with a Mellanox NIC (class 0x020000) at 0000:3c:00.0, whose RDMA device
/// `uverbs0` is char 231:192: a typical GPUDirect layout beside GPU 0000:3b:00.0.
fn host_with_nic(dir: &Path) -> PathBuf {
    let root = dir.join("host");
    let copy = Command::new("cp")
        .arg("-a")
        .arg(fixtures().join("e2e-host"))
        .arg(&root)
        .status()
        .unwrap();
    assert!(copy.success());
    let nic = root.join("sys/devices/pci0000:3a/0000:3a:00.0/0000:3c:00.0");
    std::fs::create_dir_all(nic.join("infiniband_verbs/uverbs0")).unwrap();
    std::fs::write(nic.join("class"), "0x020000\n").unwrap();
    std::fs::write(nic.join("vendor"), "0x15b3\n").unwrap();
    std::os::unix::fs::symlink(
        "../../../0000:3c:00.0",
        nic.join("infiniband_verbs/uverbs0/device"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("sys/dev/char")).unwrap();
    std::os::unix::fs::symlink(
        "../../devices/pci0000:3a/0000:3a:00.0/0000:3c:00.0/infiniband_verbs/uverbs0",
        root.join("sys/dev/char/231:192"),
    )
    .unwrap();
    root
}

#[test]
fn a_nics_rdma_device_beside_the_gpu_is_no_worker() {
    let scratch = tempfile::tempdir().unwrap();
    let node = Node::new(&host_with_nic(scratch.path()));
    let mut b = node.bundle("nic", "cat /run/cpuplan/plan.env");
    b.gpu(0);
    b.config["linux"]["devices"]
        .as_array_mut()
        .unwrap()
        .push(json!({
            "path": "/dev/infiniband/uverbs0", "type": "c", "major": 231, "minor": 192,
            "fileMode": 0o666, "uid": 0, "gid": 0
        }));
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        line_value(&out, "CPUPLAN_DEVICES"),
        Some("'0000:3b:00.0'"),
        "{out}"
    );
    assert_eq!(
        line_value(&out, "CPUPLAN_WORKERS"),
        Some("'-'"),
        "one worker: {out}"
    );
    let why = line_value(&out, "CPUPLAN_WHY").unwrap();
    assert!(
        !why.contains("held by") && !why.contains("workers 0 and 1"),
        "{why}"
    );
    let log = node.log();
    assert!(
        log.contains("231:192")
            && log.contains("0000:3c:00.0")
            && log.contains("not a GPU: ignored"),
        "{log}"
    );
    assert!(
        log.contains("released 1 GPU claim"),
        "only the GPU was claimed: {log}"
    );
}

/// A host directory in the node's dir holding a char device 195:0 as `nvidia0` (and `null`,
/// 1:3, for the container's shell): what a tenant would bind over its `/dev`.
fn host_dev_dir(node: &Node) -> PathBuf {
    let dir = node.dir.path().join("gpus");
    std::fs::create_dir(&dir).unwrap();
    for (name, major, minor) in [("nvidia0", 195, 0), ("null", 1, 3)] {
        nix::sys::stat::mknod(
            &dir.join(name),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(major, minor),
        )
        .unwrap();
    }
    dir
}

/// Starts a container (`tag`, unique among the tests) given GPU 0 in `linux.devices` while `node`'s tenant runs, and checks
/// that it plans for and claims its GPU, narrowed to its CPU.
fn the_given_container_keeps_its_claim(node: &Node, tag: &str) {
    let mut victim = node.bundle(tag, HOLD);
    victim.gpu(0);
    let v = start(&victim);
    let plan = plan_json(&victim);
    let why = plan["why"].as_str().unwrap();
    assert!(!why.contains("held by"), "{why}");
    assert_eq!(
        plan["inputs"]["cpuset"], "1",
        "narrowed to its GPU's CPU: {plan}"
    );
    let claims = node.claims();
    assert_eq!(claims.as_array().unwrap().len(), 1, "{claims}");
    assert_eq!(
        claims[0]["holder"]["container"],
        victim.id.as_str(),
        "{claims}"
    );
    stop(&victim, v);
}

#[test]
fn a_dev_rbound_from_a_host_directory_but_typed_tmpfs_claims_nothing() {
    // runc ignores the type under MS_BIND: `rbind` (no `bind` option) binds the host directory,
    // whose nvidia0 the container then has in its /dev, though linux.devices names no GPU.
    let node = Node::new(&fixtures().join("e2e-host"));
    let gpus = host_dev_dir(&node);
    let mut tenant = node.bundle("rbound", HOLD);
    for m in tenant.config["mounts"].as_array_mut().unwrap() {
        if m["destination"] == "/dev" {
            *m = json!({"destination": "/dev", "type": "tmpfs", "source": gpus,
                        "options": ["rbind", "nosuid"]});
        }
    }
    let t = start(&tenant);
    let plan = plan_json(&tenant);
    assert_eq!(
        plan["inputs"]["gpus"],
        json!(["0000:3b:00.0"]),
        "planned for: {plan}"
    );
    let why = plan["why"].as_str().unwrap();
    assert!(why.contains("not claimed"), "{why}");
    assert_eq!(node.claims(), json!([]), "never claimed");
    let log = node.log();
    assert!(
        log.contains(&format!(
            "/dev/nvidia0 (195:0) is not the runtime's device node (the spec mounts /dev from \"{}\" as a bind (a bind option typed \"tmpfs\")",
            gpus.display()
        )),
        "{log}"
    );
    the_given_container_keeps_its_claim(&node, "given-rbound");
    stop(&tenant, t);
}

#[test]
fn a_dev_the_mount_table_shows_bound_from_a_host_directory_claims_nothing() {
    // The spec's /dev is the runtime's tmpfs by every rule of the spec, but what is mounted
    // there decides: a step before cpuplan's (standing for any spelling of a bind the spec's
    // rules do not know) binds a host directory over it in the container's mount namespace.
    let node = Node::new(&fixtures().join("e2e-host"));
    let gpus = host_dev_dir(&node);
    let tenant = node.bundle_after("tablebind", HOLD, "createRuntime", |rootfs| {
        format!(
            "mount --rbind {} {}",
            gpus.display(),
            rootfs.join("dev").display()
        )
    });
    let t = start(&tenant);
    let plan = plan_json(&tenant);
    assert_eq!(
        plan["inputs"]["gpus"],
        json!(["0000:3b:00.0"]),
        "planned for: {plan}"
    );
    assert!(
        plan["why"].as_str().unwrap().contains("not claimed"),
        "{plan}"
    );
    assert_eq!(node.claims(), json!([]), "never claimed");
    let log = node.log();
    assert!(
        log.contains(
            "/dev/nvidia0 (195:0) is not the runtime's device node (its mount table shows"
        ),
        "{log}"
    );
    the_given_container_keeps_its_claim(&node, "given-table");
    stop(&tenant, t);
}

#[test]
fn a_hard_link_or_another_user_s_file_in_the_operator_s_directories_is_never_written() {
    // Planted by someone with write access to the operator's directories: under the claims
    // lock's name and the log's, a hard link to a file elsewhere, or another user's file. The
    // hook refuses both (the container starts, planned without a claim, logging to stderr) and
    // writes nothing into either.
    use std::os::unix::fs::MetadataExt;
    for plant in ["hard link", "another user's"] {
        let node = Node::new(&fixtures().join("e2e-host"));
        let claims = node.dir.path().join("claims");
        std::fs::create_dir_all(&claims).unwrap();
        let target = node.dir.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        let planted = [claims.join(".lock"), node.dir.path().join("hook.log")];
        for p in &planted {
            if plant == "hard link" {
                std::fs::hard_link(&target, p).unwrap();
            } else {
                std::fs::write(p, "theirs").unwrap();
                std::os::unix::fs::chown(p, Some(4242), None).unwrap();
            }
        }
        let mut b = node.bundle("planted", HOLD);
        b.gpu(0);
        let t = start(&b);
        let plan = plan_json(&b);
        let out = stop(&b, t);
        let what = if plant == "hard link" {
            "3 links to it (a hard link)" // the target, the lock and the log
        } else {
            "owned by uid 4242, not by uid 0"
        };
        let why = plan["why"].as_str().unwrap();
        assert!(
            why.contains("planned without a GPU claim")
                && why.contains(&claims.join(".lock").display().to_string())
                && why.contains(what),
            "{plant}: {why}"
        );
        let taken: Vec<_> = std::fs::read_dir(&claims)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != ".lock")
            .collect();
        assert!(taken.is_empty(), "{plant}: no claim taken: {taken:?}");
        for p in &planted {
            let kept = if plant == "hard link" {
                "keep"
            } else {
                "theirs"
            };
            assert_eq!(std::fs::read_to_string(p).unwrap(), kept, "{plant}: {out}");
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep", "{plant}");
        let links = if plant == "hard link" { 3 } else { 1 };
        assert_eq!(
            std::fs::metadata(&target).unwrap().nlink(),
            links,
            "{plant}"
        );
    }
}

#[test]
fn a_config_naming_a_system_directory_or_a_nul_plans_nothing_there_and_the_container_starts() {
    // An operator's slip in another form than `"claims_dir": "/etc"`: `/var/tmp/` with a
    // trailing slash, `//usr//local`, and a `dir` holding a NUL. The config is unusable: every
    // container gets the `off` plan naming the key (at the default `dir`), starts under the
    // default `allow`, and nothing is made in or beside the system directory.
    let cases: [(&str, Value, &str); 3] = [
        ("claims_dir", json!("/var/tmp/"), "is a system directory"),
        ("claims_dir", json!("//usr//local"), "is a system directory"),
        ("dir", json!("/run/cpu\u{0}plan"), "holds a NUL byte"),
    ];
    let watched = [
        "/var/tmp/.lock",
        "/var/hostplans",
        "/usr/local/.lock",
        "/usr/hostplans",
    ];
    let before: Vec<bool> = watched.iter().map(|p| Path::new(p).exists()).collect();
    for (key, value, what) in cases {
        let node = Node::new(&fixtures().join("e2e-host"));
        let mut cfg: Value = serde_json::from_slice(&std::fs::read(&node.config).unwrap()).unwrap();
        cfg[key] = value.clone();
        std::fs::write(&node.config, serde_json::to_vec(&cfg).unwrap()).unwrap();
        let mut b = node.bundle("sysdir", HOLD);
        b.gpu(0);
        let t = start(&b);
        let plan = plan_json(&b);
        stop(&b, t);
        let why = plan["why"].as_str().unwrap();
        assert!(
            why.contains(&format!("key \"{key}\"")) && why.contains(what),
            "{key} {value}: {why}"
        );
        assert!(plan["workers"]
            .as_array()
            .is_none_or(|w| w.iter().all(Value::is_null)));
        let after: Vec<bool> = watched.iter().map(|p| Path::new(p).exists()).collect();
        assert_eq!(after, before, "{key} {value}: made in {watched:?}");
    }
}

/// Every file under `dir` with its bytes, for "nothing there changed".
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                todo.push(p);
            } else {
                found.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_claims_dir_below_a_world_writable_directory_is_refused_and_what_is_planted_there_unread() {
    // The operator's slip: claims_dir below /tmp (1777). A local user got there first: a claim
    // of GPU 0 naming a live process of theirs (this test's) and a host-plan record beside it.
    let planted = tempfile::tempdir().unwrap();
    let claims = planted.path().join("claims");
    common::operator_dir::claim_as_this_process(&claims, "squatter", "/b/x", &["0000:3b:00.0"]);
    std::fs::create_dir(planted.path().join("hostplans")).unwrap();
    std::fs::write(
        planted.path().join("hostplans/.hostplan.0000000000000001"),
        serde_json::to_vec(&json!({"container": "squatter", "scope": "/b/x", "pid": 1,
            "start_time": 0, "pid_ns": 0, "dir": "1-2"}))
        .unwrap(),
    )
    .unwrap();
    let before = files_under(planted.path());
    let node = Node::new(&fixtures().join("e2e-host"));
    for on_error in ["allow", "deny"] {
        let cfg = json!({
            "topology_root": fixtures().join("e2e-host"),
            "claims_dir": claims,
            "log": node.dir.path().join("hook.log"),
            "on_error": on_error,
        });
        std::fs::write(&node.config, serde_json::to_vec(&cfg).unwrap()).unwrap();
        let _ = std::fs::remove_file(node.dir.path().join("hook.log"));
        let mut b = node.bundle(&format!("tmpclaims-{on_error}"), HOLD);
        b.gpu(0);
        if on_error == "deny" {
            let (code, out, err) = b.run();
            assert_ne!(code, 0, "deny refuses the container: {out}{err}");
            // runc quotes the hook's stderr: the key's quotes come escaped.
            assert!(
                err.contains("claims_dir") && err.contains("is refused: /tmp (owner uid 0"),
                "{err}"
            );
        } else {
            // allow: the container starts, unplanned, and claims nothing.
            let t = start(&b);
            let plan = plan_json(&b);
            let out = stop(&b, t);
            let why = plan["why"].as_str().unwrap();
            assert!(why.contains(r#"key "claims_dir""#), "{why}\n{out}");
            assert_eq!(plan["setting"], "off", "{plan}");
        }
        // One warning line per container, naming the key, the path and the ancestor at fault
        // with its owner and mode.
        let log = node.log();
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
        assert_eq!(warnings.len(), 1, "{on_error}: {log}");
        assert!(
            warnings[0].contains(&format!(
                "key \"claims_dir\": \"{}\" is refused: /tmp (owner uid 0, mode 1777) is \
                 writable by its group and by others",
                claims.display()
            )),
            "{log}"
        );
        // Nothing planted was read to decide, changed or removed, and nothing was added.
        assert_eq!(files_under(planted.path()), before, "{on_error}");
    }
    // The operator's `claims` never reads the planted claim either: a warning line, and the
    // claims of the default directory.
    let out = Command::new(common::statics::bin("cpuplan"))
        .arg("--config")
        .arg(&node.config)
        .args(["claims", "--json"])
        .output()
        .unwrap();
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{err}");
    assert!(!stdout.contains("squatter"), "{stdout}");
    assert!(err.starts_with("cpuplan: warning: hook config"), "{err}");
}
