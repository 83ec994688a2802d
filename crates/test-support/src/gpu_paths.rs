//! The ways a GPU reaches a container on a Kubernetes node, for `tests/cri/cri_gpu.rs`
//! (the hook route) and `tests/cri/nri_gpu.rs` (the NRI route): the fake GPU host of the CRI node
//! with MIG capabilities and distinct uuids, CDI specs as the NVIDIA producers name their
//! devices, containerd's CDI switches, the device plugin's volume-mounts and env, and the probe
//! a container runs. Included with `#[path = "common/gpu_paths.rs"] mod gpu_paths;` beside
//! `cri.rs`.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cri::{cri as api, gpu_host, section, Containerd, CriNode, NodeOptions, Pod};

/// GPU 0 of the fake host: `/dev/nvidia0` (195:0), local CPUs 0-1.
pub const GPU0: &str = "0000:3b:00.0";
/// GPU 1: `/dev/nvidia1` (195:1), local CPU 1.
pub const GPU1: &str = "0000:86:00.0";
/// GPU 1's uuid (the fake host's GPU 0 keeps the fixture's).
pub const UUID1: &str = "GPU-86a1b2c3-0000-4a6f-9c1d-860000000000";
/// A MIG device's uuid, which no file of the driver lists.
pub const MIG_UUID: &str = "MIG-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718";
/// The `nvidia-caps` char major of the fake host's `/proc/devices`.
pub const CAPS_MAJOR: u32 = 237;
/// The volume-mounts strategy's directory.
pub const VM_DIR: &str = "/var/run/nvidia-container-devices";

/// What a test container prints: its GPU nodes, the NVIDIA and thread variables it sees, its
/// CPUs, and the plan files (the hook's in `/run/cpuplan`; the NRI plugin's where
/// `$CPUPLAN_PLAN` names them, in `/dev/cpuplan`).
pub const PROBE: &str = r#"echo '--- nodes'; ls /dev/nvidia* /dev/nvidia-caps 2>/dev/null
echo '--- env'; env | grep -E '^(NVIDIA_VISIBLE_DEVICES|OMP_NUM_THREADS|CDI_TEST)=' | sort
echo "--- cpus"; sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status
d=$(dirname "${CPUPLAN_PLAN:-/run/cpuplan/plan.json}")
echo '--- planenv'; cat $d/plan.env; echo '--- planjson'; cat $d/plan.json; echo '--- end'"#;

/// The probe, then sleep: the container holds its claim while the test goes on.
pub fn sleeper() -> String {
    format!("{PROBE}; exec sleep 3600")
}

/// A node on `flavour` with CDI on and the node's own spec directory, `T/etc/cdi`: 1.7 needs
/// `enable_cdi = true` (off by default there); 2.x is given only the directory, as CDI is on by
/// default there (what a stock 2.x node does is what is tested).
pub fn cdi_options(flavour: Containerd) -> NodeOptions {
    let enable = match flavour {
        Containerd::V17 => "    enable_cdi = true\n",
        Containerd::V2 => "",
    };
    NodeOptions {
        cri_keys: format!("{enable}    cdi_spec_dirs = [\"@ROOT@/etc/cdi\"]\n"),
        ..NodeOptions::on(flavour)
    }
}

/// Fails unless the started `node`'s CRI reports CDI on with the node's spec directory (on 2.x
/// with no `enable_cdi` in its config: CDI is on by default there).
pub fn assert_cdi_on(node: &CriNode) {
    let status = node.call("Status", |mut c| async move {
        c.status(api::StatusRequest { verbose: true }).await
    });
    let config: Value = serde_json::from_str(&status.info["config"]).unwrap();
    assert_eq!(
        (&config["enableCDI"], &config["cdiSpecDirs"]),
        (&json!(true), &json!([node.path("etc/cdi")])),
        "{}: {config}",
        node.containerd().name()
    );
}

/// The newest `cdiVersion` `flavour`'s CDI library reads, and the next one, which it skips (a
/// spec file of a newer version is left out of its cache: its devices are unresolvable). Found
/// by running them: containerd 1.7.24 reads up to 0.8.0, 2.1.9 up to 1.0.0.
pub fn cdi_version_ceiling(flavour: Containerd) -> (&'static str, &'static str) {
    match flavour {
        Containerd::V17 => ("0.8.0", "1.0.0"),
        Containerd::V2 => ("1.0.0", "1.1.0"),
    }
}

/// On a started `node` with CDI on and [`write_cdi_specs`]'s specs: the `ceiling.cpuplan.test`
/// spec, of [`cdi_version_ceiling`]'s newest version, has its device injected at
/// CreateContainer; `above.cpuplan.test`, of the next version, fails CreateContainer with the
/// device unresolvable.
pub fn assert_cdi_version_ceiling(node: &CriNode) {
    let (newest, next) = cdi_version_ceiling(node.containerd());
    let pod = node.run_pod(node.pod_config("cdi-version"), "");
    let ceiling = cdi_field(
        node.container_config("ceiling", "true"),
        "ceiling.cpuplan.test/gpu=1",
    );
    let id = node.create_container(&pod, ceiling);
    assert_eq!(
        spec_devices(node, &id),
        ["/dev/nvidia1 195:1"],
        "{}: cdiVersion {newest} read",
        node.containerd().name()
    );
    let above = cdi_field(
        node.container_config("above", "true"),
        "above.cpuplan.test/gpu=1",
    );
    let err = node
        .try_create_container(&pod, above)
        .expect_err("a spec above the ceiling is skipped");
    assert!(
        err.message()
            .contains("unresolvable CDI devices above.cpuplan.test/gpu=1"),
        "{}: cdiVersion {next}: {err:?}",
        node.containerd().name()
    );
    node.remove_container(&id);
    node.remove_pod(&pod);
}

/// A CDI device node edit for char device `path` `major:minor` (the host node need not exist
/// when the type and numbers are given).
fn dev_node(path: &str, major: u32, minor: u32) -> Value {
    json!({"path": path, "type": "c", "major": major, "minor": minor, "permissions": "rw"})
}

/// The DRA claim uid the tests' claim spec uses.
pub const CLAIM_UID: &str = "6d3c8a1e-0b2f-4c5d-9e7a-1f2a3b4c5d6e";

/// GPU 0's uuid (the e2e fixture's).
pub const UUID0: &str = "GPU-5d1b2c3e-0000-4a6f-9c1d-3b0000000000";

/// Writes the node's CDI specs in `T/etc/cdi` (`cdiVersion` 0.5.0, which both containerd
/// versions read; [`cdi_version_ceiling`] is the newest each reads):
/// - `k8s.device-plugin.nvidia.com/gpu` as the NVIDIA device plugin's `cdi-*` strategies name
///   devices (by the default `uuid` id strategy): `GPU-<uuid>` of each GPU, with a spec-wide
///   env `CDI_TEST=1`;
/// - `nvidia.com/gpu` as `nvidia-ctk cdi generate` names devices: `0`, `1` (the GPUs' nodes),
///   `0:1` and `0:2` (MIG instances of GPU 0: its node and two capability nodes each);
/// - `k8s.gpu.nvidia.com/claim` as NVIDIA's DRA driver names a claim's device,
///   `<claim uid>-gpu-0`;
/// - `ceiling.cpuplan.test/gpu` and `above.cpuplan.test/gpu` (`=1`, GPU 1's node) in the newest
///   `cdiVersion` the node's containerd reads and the next ([`cdi_version_ceiling`]).
pub fn write_cdi_specs(cri_node: &CriNode) {
    let dir = cri_node.path("etc/cdi");
    std::fs::create_dir_all(&dir).unwrap();
    let mig = |gi: u32, minors: [u32; 2]| {
        json!({"deviceNodes": [
            dev_node("/dev/nvidia0", 195, 0),
            dev_node(&format!("/dev/nvidia-caps/nvidia-cap{}", minors[0]), CAPS_MAJOR, minors[0]),
            dev_node(&format!("/dev/nvidia-caps/nvidia-cap{}", minors[1]), CAPS_MAJOR, minors[1]),
        ], "env": [format!("CDI_MIG=0:{gi}")]})
    };
    let gpus = json!({
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {"name": "0", "containerEdits": {"deviceNodes": [dev_node("/dev/nvidia0", 195, 0)]}},
            {"name": "1", "containerEdits": {"deviceNodes": [dev_node("/dev/nvidia1", 195, 1)]}},
            {"name": "0:1", "containerEdits": mig(1, [30, 31])},
            {"name": "0:2", "containerEdits": mig(2, [39, 40])},
        ],
    });
    let plugin = json!({
        "cdiVersion": "0.5.0",
        "kind": "k8s.device-plugin.nvidia.com/gpu",
        "devices": [
            {"name": UUID0, "containerEdits": {"deviceNodes": [dev_node("/dev/nvidia0", 195, 0)]}},
            {"name": UUID1, "containerEdits": {"deviceNodes": [dev_node("/dev/nvidia1", 195, 1)]}},
        ],
        "containerEdits": {"env": ["CDI_TEST=1"]},
    });
    let claim = json!({
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "devices": [{"name": format!("{CLAIM_UID}-gpu-0"),
                     "containerEdits": {"deviceNodes": [dev_node("/dev/nvidia0", 195, 0)]}}],
    });
    std::fs::write(dir.join("nvidia.json"), gpus.to_string()).unwrap();
    std::fs::write(dir.join("k8s-device-plugin.json"), plugin.to_string()).unwrap();
    std::fs::write(dir.join("dra-claim.json"), claim.to_string()).unwrap();
    let (newest, next) = cdi_version_ceiling(cri_node.containerd());
    for (kind, version) in [("ceiling", newest), ("above", next)] {
        let spec = json!({
            "cdiVersion": version,
            "kind": format!("{kind}.cpuplan.test/gpu"),
            "devices": [{"name": "1", "containerEdits": {"deviceNodes": [dev_node("/dev/nvidia1", 195, 1)]}}],
        });
        std::fs::write(dir.join(format!("{kind}.json")), spec.to_string()).unwrap();
    }
}

/// The CRI node's fake GPU host (`cri::gpu_host`) made into what these tests need: GPU 1 with a
/// uuid of its own, `nvidia-caps` in `/proc/devices`, and two MIG instances of GPU 0 (device
/// minor 0) in the driver's capability files: `gi1` (minors 30, 31) and `gi2` (39, 40).
pub fn gpu_paths_host(root: &Path) {
    let g = gpu_host(root);
    let info = g.join("proc/driver/nvidia/gpus/0000:86:00.0/information");
    let text = std::fs::read_to_string(&info).unwrap();
    let old = text
        .lines()
        .find_map(|l| l.strip_prefix("GPU UUID:"))
        .unwrap()
        .trim()
        .to_string();
    std::fs::write(&info, text.replace(&old, UUID1)).unwrap();
    std::fs::write(
        g.join("proc/devices"),
        format!("Character devices:\n  1 mem\n195 nvidia-frontend\n{CAPS_MAJOR} nvidia-caps\n\nBlock devices:\n  8 sd\n"),
    )
    .unwrap();
    let caps = g.join("proc/driver/nvidia/capabilities/gpu0/mig");
    for (rel, minor) in [("gi1", 30), ("gi1/ci0", 31), ("gi2", 39), ("gi2/ci0", 40)] {
        std::fs::create_dir_all(caps.join(rel)).unwrap();
        std::fs::write(
            caps.join(rel).join("access"),
            format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
        )
        .unwrap();
    }
}

/// GPU 1 as the device plugin's `cdi-cri` and `cdi-annotations` strategies name it.
pub fn plugin_device() -> String {
    format!("k8s.device-plugin.nvidia.com/gpu={UUID1}")
}

/// `config` asking for the CDI device `name` through CRI's `CDI_devices` field (the device
/// plugin's `cdi-cri` strategy, DRA).
pub fn cdi_field(mut config: api::ContainerConfig, name: &str) -> api::ContainerConfig {
    config
        .cdi_devices
        .push(api::CdiDevice { name: name.into() });
    config
}

/// `config` asking for the CDI device `name` through a `cdi.k8s.io/` annotation, keyed as the
/// device plugin's `cdi-annotations` strategy keys it.
pub fn cdi_annotation(mut config: api::ContainerConfig, name: &str) -> api::ContainerConfig {
    config.annotations.insert(
        "cdi.k8s.io/nvidia-device-plugin_5e1f0d2c-8b3a-4c6d-9e0f-1a2b3c4d5e6f".into(),
        name.into(),
    );
    config
}

/// `config` with the env `key=value` (as kubelet passes the device plugin's, before the pod's).
pub fn env(mut config: api::ContainerConfig, key: &str, value: &str) -> api::ContainerConfig {
    config.envs.push(api::KeyValue {
        key: key.into(),
        value: value.into(),
    });
    config
}

/// `config` as the device plugin's volume-mounts strategy gives GPU `id`: the env naming the
/// directory and a mount of `source` (the host's `/dev/null` for the plugin's own; anything else
/// for a look-alike) at `/var/run/nvidia-container-devices/<id>`, as kubelet passes it.
pub fn volume_mount(config: api::ContainerConfig, id: &str, source: &Path) -> api::ContainerConfig {
    let mut config = env(config, "NVIDIA_VISIBLE_DEVICES", VM_DIR);
    config.mounts.push(api::Mount {
        container_path: format!("{VM_DIR}/{id}"),
        host_path: source.display().to_string(),
        readonly: false,
        ..Default::default()
    });
    config
}

/// Creates and starts `config` in `pod` and waits (up to 30 s) for its probe: its id and output.
pub fn start(node: &CriNode, pod: &Pod, config: api::ContainerConfig) -> (String, String) {
    let id = node.create_container(pod, config.clone());
    node.start_container(&id);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = node.container_log(pod, &config);
        if log.contains("--- end") {
            return (id, log);
        }
        assert!(
            Instant::now() < deadline,
            "no plan from {id} in 30 s: {log}\n--- containerd log:\n{}",
            node.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `plan.env`'s value of `key` in a probe's output, quotes and all.
pub fn planenv<'a>(out: &'a str, key: &str) -> &'a str {
    crate::runc::line_value(section(out, "planenv"), key)
        .unwrap_or_else(|| panic!("no {key} in plan.env:\n{out}"))
}

/// The probe's `plan.json`.
pub fn plan_json(out: &str) -> Value {
    serde_json::from_str(section(out, "planjson")).unwrap_or_else(|e| panic!("{e}:\n{out}"))
}

/// The addresses the claims of `claims` (as `cpuplan claims --json` prints them) name,
/// each with its holder's container id.
pub fn holders(claims: &Value) -> Vec<(String, String)> {
    claims
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["address"].as_str().unwrap().to_string(),
                c["holder"]["container"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The `linux.devices` containerd put in the spec of container `id`: `path major:minor` each.
pub fn spec_devices(node: &CriNode, id: &str) -> Vec<String> {
    let spec = node.oci_spec(id);
    spec["linux"]["devices"]
        .as_array()
        .map(|d| {
            d.iter()
                .map(|d| {
                    format!(
                        "{} {}:{}",
                        d["path"].as_str().unwrap_or(""),
                        d["major"],
                        d["minor"]
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `cpuplan claims --json` with the node's config (`T/etc/cpuplan/hook.json`, the hook's
/// and the plugin's alike).
pub fn claims(node: &CriNode) -> Value {
    crate::podman::claims_json(&node.path("etc/cpuplan/hook.json"))
}

/// How a route removes containers and their pod, and waits until their claims are released.
pub type Remove<'a> = &'a dyn Fn(&CriNode, &[&str], &Pod);

/// One CPU of quota on GPU 1 through `ask` (a CDI field or annotation): containerd injects
/// `/dev/nvidia1` and the spec's env; the route plans for GPU 1, narrows the cpuset to CPU 1
/// and claims GPU 1 while the container lives; `remove` releases it.
pub fn one_gpu_through(
    node: &CriNode,
    name: &str,
    ask: impl Fn(api::ContainerConfig) -> api::ContainerConfig,
    remove: Remove<'_>,
) {
    let pod = node.run_pod(node.pod_config(name), "");
    let c = ask(crate::cri::quota(
        node.container_config("srv", &sleeper()),
        100000,
        100000,
    ));
    let (id, out) = start(node, &pod, c);
    let devices = spec_devices(node, &id);
    assert!(
        devices.contains(&"/dev/nvidia1 195:1".to_string()),
        "{name}: containerd injected the CDI device: {devices:?}"
    );
    assert!(section(&out, "nodes").contains("/dev/nvidia1"), "{out}");
    assert!(
        section(&out, "env").contains("CDI_TEST=1"),
        "the spec's env: {out}"
    );
    assert_eq!(
        planenv(&out, "CPUPLAN_DEVICES"),
        format!("'{GPU1}'"),
        "{name}"
    );
    assert_eq!(section(&out, "cpus").trim(), "1", "{name}: narrowed: {out}");
    assert_eq!(plan_json(&out)["inputs"]["cpuset"], "1");
    assert_eq!(
        holders(&claims(node)),
        [(GPU1.to_string(), id.clone())],
        "{name}"
    );
    remove(node, &[&id], &pod);
    assert_eq!(claims(node), json!([]), "{name}: released");
}

/// A DRA claim two containers of a pod reference: both get its device (GPU 0) through CRI's
/// `CDI_devices`; the first claims it, the second pins nothing and says why.
pub fn dra_pair(node: &CriNode, remove: Remove<'_>) {
    let pod = node.run_pod(node.pod_config("dra"), "");
    let claim = format!("k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-0");
    let (a, out_a) = start(
        node,
        &pod,
        cdi_field(node.container_config("a", &sleeper()), &claim),
    );
    let (b, out_b) = start(
        node,
        &pod,
        cdi_field(node.container_config("b", &sleeper()), &claim),
    );
    for out in [&out_a, &out_b] {
        assert_eq!(
            planenv(out, "CPUPLAN_DEVICES"),
            format!("'{GPU0}'"),
            "{out}"
        );
    }
    assert!(
        !planenv(&out_a, "CPUPLAN_WHY").contains("held by"),
        "{out_a}"
    );
    let why = planenv(&out_b, "CPUPLAN_WHY");
    assert!(
        why.contains("pins nothing") && why.contains("held by another container"),
        "{why}"
    );
    assert_eq!(holders(&claims(node)), [(GPU0.to_string(), a.clone())]);
    remove(node, &[&a, &b], &pod);
    assert_eq!(claims(node), json!([]));
}
