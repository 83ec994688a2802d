//! `vm-cri`: kubelet's CRI calls from a shell, for `tests/vm/guest.sh` in the cgroup2-vm guest
//! (which has no crictl and no network). Built on the host as the `vm-cri` example
//! (`tests/vm_systemd.rs` builds it, dynamically linked: the guest's glibc is the host's) and
//! passed in over the 9p share.
//!
//! ```text
//! vm-cri [--socket PATH] version                                                       → runtime name and version
//! vm-cri [--socket PATH] run-pod    --name N --uid U [--cgroup-parent SLICE]            → pod id
//! vm-cri [--socket PATH] create     --pod ID --name N --uid U [--cgroup-parent SLICE]
//!                                   --image REF [--quota Q --period P] [--cpuset CPUS]
//!                                   [--device PATH] -- CMD...                          → container id
//! vm-cri [--socket PATH] start      ID
//! vm-cri [--socket PATH] exec       ID -- CMD...        (its stdout; its stderr and exit code as ours)
//! vm-cri [--socket PATH] update     ID [--quota Q --period P] [--cpuset CPUS]
//! vm-cri [--socket PATH] rm-pod     ID
//! ```
//!
//! The pod is a host-network sandbox as kubelet sends it (no hostname: no CNI), its
//! `cgroup_parent` kubelet's systemd slice name; `create` rebuilds the same sandbox config from
//! the same `--name`/`--uid`/`--cgroup-parent`, as kubelet sends it again at CreateContainer.
//! `update` is UpdateContainerResources with only what is given, as kubelet's CPU manager
//! (cpuset only) and an in-place resize (quota and period) send it.

use std::collections::HashMap;
use std::time::Duration;

use cpuplan_test_support::cri::cri;
use cri::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

/// containerd's socket, where the guest's packaged containerd serves CRI.
const SOCKET: &str = "/run/containerd/containerd.sock";

/// Flags (`--key value`) before `--`, positionals, and what follows `--`.
struct Args {
    flags: HashMap<String, String>,
    positional: Vec<String>,
    rest: Vec<String>,
}

fn parse(args: impl Iterator<Item = String>) -> Args {
    let mut a = Args {
        flags: HashMap::new(),
        positional: Vec::new(),
        rest: Vec::new(),
    };
    let mut it = args;
    while let Some(s) = it.next() {
        if s == "--" {
            a.rest = it.by_ref().collect();
        } else if let Some(k) = s.strip_prefix("--") {
            let v = it
                .next()
                .unwrap_or_else(|| die(&format!("--{k} needs a value")));
            a.flags.insert(k.into(), v);
        } else {
            a.positional.push(s);
        }
    }
    a
}

fn die(msg: &str) -> ! {
    eprintln!("vm-cri: {msg}");
    std::process::exit(2)
}

impl Args {
    fn get(&self, k: &str) -> &str {
        self.flags
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| die(&format!("--{k} is required")))
    }

    fn opt(&self, k: &str) -> Option<&str> {
        self.flags.get(k).map(String::as_str)
    }

    fn num(&self, k: &str) -> i64 {
        self.opt(k).map_or(0, |v| {
            v.parse()
                .unwrap_or_else(|_| die(&format!("--{k} {v}: not a number")))
        })
    }

    fn id(&self) -> String {
        self.positional
            .get(1)
            .cloned()
            .unwrap_or_else(|| die("a container or pod id is required"))
    }
}

/// The sandbox config kubelet sends for a host-network pod `name`/`uid` under `cgroup_parent`.
fn pod_config(a: &Args) -> cri::PodSandboxConfig {
    let (name, uid) = (a.get("name"), a.get("uid"));
    let logs = format!("/var/log/pods/default_{name}_{uid}");
    std::fs::create_dir_all(&logs).unwrap_or_else(|e| die(&format!("{logs}: {e}")));
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        log_directory: logs,
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: a.opt("cgroup-parent").unwrap_or_default().into(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Node as i32,
                    pid: cri::NamespaceMode::Container as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The CPU resources given on the command line (quota, period, cpuset; absent ones zero/empty).
fn resources(a: &Args) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        cpu_quota: a.num("quota"),
        cpu_period: a.num("period"),
        cpuset_cpus: a.opt("cpuset").unwrap_or_default().into(),
        ..Default::default()
    }
}

async fn connect(socket: String) -> RuntimeServiceClient<Channel> {
    cpuplan_test_support::cri::connect(socket.into())
        .await
        .unwrap_or_else(|e| die(&format!("connecting to containerd: {e}")))
}

fn failed(what: &str) -> impl FnOnce(tonic::Status) -> String + '_ {
    move |e| format!("{what}: {} {}", e.code(), e.message())
}

async fn run(a: Args) -> Result<i32, String> {
    let socket = a.opt("socket").unwrap_or(SOCKET).to_string();
    let mut c = connect(socket).await;
    let cmd = a.positional.first().map(String::as_str).unwrap_or("");
    match cmd {
        "version" => {
            let r = c
                .version(cri::VersionRequest::default())
                .await
                .map_err(failed("Version"))?
                .into_inner();
            println!("{} {}", r.runtime_name, r.runtime_version);
        }
        "run-pod" => {
            let r = c
                .run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: Some(pod_config(&a)),
                    runtime_handler: String::new(),
                })
                .await
                .map_err(failed("RunPodSandbox"))?;
            println!("{}", r.into_inner().pod_sandbox_id);
        }
        "create" => {
            let name = a.get("name").to_string();
            let devices = a
                .opt("device")
                .map(|d| cri::Device {
                    container_path: d.into(),
                    host_path: d.into(),
                    permissions: "rw".into(),
                })
                .into_iter()
                .collect();
            let config = cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: name.clone(),
                    attempt: 0,
                }),
                image: Some(cri::ImageSpec {
                    image: a.get("image").into(),
                    ..Default::default()
                }),
                command: a.rest.clone(),
                log_path: format!("{name}.log"),
                devices,
                linux: Some(cri::LinuxContainerConfig {
                    resources: Some(resources(&a)),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let r = c
                .create_container(cri::CreateContainerRequest {
                    pod_sandbox_id: a.get("pod").into(),
                    config: Some(config),
                    sandbox_config: Some(pod_config(&a)),
                })
                .await
                .map_err(failed("CreateContainer"))?;
            println!("{}", r.into_inner().container_id);
        }
        "start" => {
            c.start_container(cri::StartContainerRequest {
                container_id: a.id(),
            })
            .await
            .map_err(failed("StartContainer"))?;
        }
        "exec" => {
            let r = c
                .exec_sync(cri::ExecSyncRequest {
                    container_id: a.id(),
                    cmd: a.rest.clone(),
                    timeout: 60,
                })
                .await
                .map_err(failed("ExecSync"))?
                .into_inner();
            use std::io::Write;
            std::io::stdout().write_all(&r.stdout).unwrap();
            std::io::stderr().write_all(&r.stderr).unwrap();
            return Ok(r.exit_code);
        }
        "update" => {
            c.update_container_resources(cri::UpdateContainerResourcesRequest {
                container_id: a.id(),
                linux: Some(resources(&a)),
                ..Default::default()
            })
            .await
            .map_err(failed("UpdateContainerResources"))?;
        }
        "rm-pod" => {
            let id = a.id();
            c.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .map_err(failed("StopPodSandbox"))?;
            c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id })
                .await
                .map_err(failed("RemovePodSandbox"))?;
        }
        other => die(&format!("unknown command {other:?}")),
    }
    Ok(0)
}

fn main() {
    let a = parse(std::env::args().skip(1));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let code = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(120), run(a)).await })
        .unwrap_or_else(|_| Err("the CRI call took over 120 s".into()))
        .unwrap_or_else(|e| die(&e));
    std::process::exit(code)
}
