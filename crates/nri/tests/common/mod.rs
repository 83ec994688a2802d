//! A private containerd node for the crate's tests: containerd (1.7 or 2.x) with CRI and NRI
//! on, its root, state, sockets and NRI socket under a temp dir, driven through CRI as kubelet
//! drives it (host-network pods, no CNI), so that what a plugin answers reaches a real
//! container. It fails (never skips) where it cannot run: not root, or a tool missing.
//!
//! `NRI_PLUGIN_TEST_CONTAINERD=DIR` runs the `containerd`, its shim and `ctr` in `DIR` (e.g. a
//! containerd 2.x unpacked privately) instead of those on the `PATH`.
#![allow(dead_code)]

mod image;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
pub use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tonic::transport::{Channel, Endpoint, Uri};

/// The sandbox (pause) image.
const PAUSE: &str = "localhost/nri-plugin-pause:1";
/// The containers' image.
pub const IMAGE: &str = "localhost/nri-plugin-busybox:1";
/// How long the tests wait for containerd or a plugin.
pub const WAIT: Duration = Duration::from_secs(30);

/// Polls `cond` every 50 ms until it holds; fails with `what` and `ctx()` after [`WAIT`].
pub fn wait_until(what: &str, ctx: impl Fn() -> String, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            ctx()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A pod the node runs.
#[derive(Clone)]
pub struct Pod {
    /// The sandbox id.
    pub id: String,
    /// The config it was run with.
    pub config: cri::PodSandboxConfig,
}

/// A private containerd serving CRI with NRI on.
pub struct Node {
    dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    child: Mutex<Option<Child>>,
    client: Mutex<Option<RuntimeServiceClient<Channel>>>,
}

/// The directory of the containerd under test, if not the one on the `PATH`.
fn containerd_dir() -> Option<PathBuf> {
    std::env::var_os("NRI_PLUGIN_TEST_CONTAINERD").map(PathBuf::from)
}

/// `tool` from the containerd under test.
fn tool(name: &str) -> Command {
    let mut c = Command::new(containerd_dir().map_or(PathBuf::from(name), |d| d.join(name)));
    if let Some(d) = containerd_dir() {
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{}:{path}", d.display()));
    }
    c
}

fn require(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{tool} is missing: the containerd tests need containerd, ctr, runc and busybox-static"
    );
}

impl Node {
    /// Lays out a node, starts containerd and imports the images.
    pub fn start() -> Node {
        assert!(
            nix::unistd::Uid::effective().is_root(),
            "the containerd tests run as root"
        );
        for tool in ["containerd", "ctr", "runc", "busybox"] {
            require(tool);
        }
        let node = Node {
            dir: tempfile::Builder::new()
                .prefix("nri-plugin-")
                .tempdir()
                .unwrap(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            child: Mutex::new(None),
            client: Mutex::new(None),
        };
        for d in [
            "run/containerd",
            "run/runc",
            "run/nri",
            "nri/plugins",
            "nri/conf",
            "logs",
            "cni",
        ] {
            std::fs::create_dir_all(node.path(d)).unwrap();
        }
        std::fs::write(node.path("config.toml"), node.config()).unwrap();
        node.launch();
        for (reference, cmd) in [(PAUSE, &["sleep", "1000000"][..]), (IMAGE, &["sh"])] {
            let tar = node.path(&format!("{}.tar", reference.replace(['/', ':'], "_")));
            image::image_tar(&tar, reference, cmd);
            let mut args = vec!["images", "import", "--snapshotter", "native"];
            if containerd_dir().is_some() {
                args.push("--local"); // containerd 2.x: not through the transfer service
            }
            args.push(tar.to_str().unwrap());
            let ok = node.ctr(&args);
            assert!(ok, "ctr images import {reference}:\n{}", node.log());
        }
        node
    }

    /// `rel` under the node's directory.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The socket NRI plugins connect to.
    pub fn nri_socket(&self) -> PathBuf {
        self.path("run/nri/nri.sock")
    }

    /// containerd's log so far (all its runs).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("containerd.log")).unwrap_or_default()
    }

    /// How many lines of containerd's log contain `what`.
    pub fn count(&self, what: &str) -> usize {
        self.log().lines().filter(|l| l.contains(what)).count()
    }

    fn config(&self) -> String {
        let t = self.dir.path().display();
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        format!(
            r#"version = 2
root = "{t}/root"
state = "{t}/run/containerd"
[grpc]
  address = "{t}/run/containerd/containerd.sock"
[ttrpc]
  address = "{t}/run/containerd/containerd.sock.ttrpc"
[plugins]
  [{cri}]
    sandbox_image = "{PAUSE}"
    restrict_oom_score_adj = true
    [{cri}.cni]
      bin_dir = "{t}/cni"
      conf_dir = "{t}/cni"
    [{cri}.containerd]
      snapshotter = "native"
      default_runtime_name = "runc"
      [{cri}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [{cri}.containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "{t}/run/runc"
  [plugins."io.containerd.internal.v1.opt"]
    path = "{t}/opt"
  [plugins."io.containerd.nri.v1.nri"]
    disable = false
    socket_path = "{t}/run/nri/nri.sock"
    plugin_path = "{t}/nri/plugins"
    plugin_config_path = "{t}/nri/conf"
"#
        )
    }

    /// Starts containerd (appending to its log) and waits until CRI answers.
    fn launch(&self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("containerd.log"))
            .unwrap();
        let child = tool("containerd")
            .arg("--config")
            .arg(self.path("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        *self.child.lock().unwrap() = Some(child);
        wait_until(
            "containerd's CRI to answer",
            || self.log(),
            || {
                *self.client.lock().unwrap() = None;
                self.try_call(
                    |mut c| async move { c.version(cri::VersionRequest::default()).await },
                )
                .is_ok()
            },
        );
    }

    /// Stops containerd (SIGTERM, then SIGKILL after 10 s); containers keep running.
    pub fn stop_daemon(&self) {
        let Some(mut child) = self.child.lock().unwrap().take() else {
            return;
        };
        *self.client.lock().unwrap() = None;
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops and starts containerd again with the same config and state.
    pub fn restart(&self) {
        self.stop_daemon();
        self.launch();
    }

    /// `ctr ARGS` against this node (namespace k8s.io); whether it succeeded.
    fn ctr(&self, args: &[&str]) -> bool {
        tool("ctr")
            .arg("--address")
            .arg(self.path("run/containerd/containerd.sock"))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn client(&self) -> Result<RuntimeServiceClient<Channel>, tonic::Status> {
        let mut slot = self.client.lock().unwrap();
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let sock = self.path("run/containerd/containerd.sock");
        let channel = self
            .rt
            .block_on(async {
                Endpoint::try_from("http://[::]:50051")
                    .unwrap()
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let sock = sock.clone();
                        async move {
                            Ok::<_, std::io::Error>(TokioIo::new(
                                tokio::net::UnixStream::connect(sock).await?,
                            ))
                        }
                    }))
                    .await
            })
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let c = RuntimeServiceClient::new(channel);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// One CRI call (a minute at most).
    pub fn try_call<T, F, Fut>(&self, f: F) -> Result<T, tonic::Status>
    where
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let c = self.client()?;
        self.rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(60), f(c)).await })
            .map_err(|_| tonic::Status::deadline_exceeded("CRI call took over 60 s"))?
            .map(tonic::Response::into_inner)
    }

    fn call<T, F, Fut>(&self, what: &str, f: F) -> T
    where
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.try_call(f)
            .unwrap_or_else(|e| panic!("CRI {what}: {e}\n--- containerd log:\n{}", self.log()))
    }

    /// Runs a host-network pod `name` with `annotations`.
    pub fn run_pod(&self, name: &str, annotations: &[(&str, &str)]) -> Pod {
        let uid = format!("{name}-{}", std::process::id());
        let logs = self.path("logs").join(&uid);
        std::fs::create_dir_all(&logs).unwrap();
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid,
                namespace: "default".into(),
                attempt: 0,
            }),
            log_directory: logs.display().to_string(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
            linux: Some(cri::LinuxPodSandboxConfig {
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
        };
        let req = cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        };
        let id = self
            .call("RunPodSandbox", |mut c| async move {
                c.run_pod_sandbox(req).await
            })
            .pod_sandbox_id;
        Pod { id, config }
    }

    /// Creates container `name` in `pod` running `sh -c script`; its id, or the runtime's error.
    pub fn try_create(&self, pod: &Pod, name: &str, script: &str) -> Result<String, tonic::Status> {
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: IMAGE.into(),
                ..Default::default()
            }),
            command: vec!["sh".into(), "-c".into(), script.into()],
            log_path: format!("{name}.log"),
            linux: Some(cri::LinuxContainerConfig::default()),
            ..Default::default()
        };
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        };
        self.try_call(|mut c| async move { c.create_container(req).await })
            .map(|r| r.container_id)
    }

    /// Creates and starts container `name` in `pod`; its id.
    pub fn start_container(&self, pod: &Pod, name: &str, script: &str) -> String {
        let id = self
            .try_create(pod, name, script)
            .unwrap_or_else(|e| panic!("CRI CreateContainer: {e}\n{}", self.log()));
        let req = cri::StartContainerRequest {
            container_id: id.clone(),
        };
        self.call("StartContainer", |mut c| async move {
            c.start_container(req).await
        });
        id
    }

    /// Runs container `name` in `pod` to its end; its id and what it printed.
    pub fn run(&self, pod: &Pod, name: &str, script: &str) -> (String, String) {
        let id = self.start_container(pod, name, script);
        wait_until(
            "the container to exit",
            || self.log(),
            || {
                let req = cri::ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: false,
                };
                self.call("ContainerStatus", |mut c| async move {
                    c.container_status(req).await
                })
                .status
                .is_some_and(|s| s.state == cri::ContainerState::ContainerExited as i32)
            },
        );
        std::thread::sleep(Duration::from_millis(100));
        let log = Path::new(&pod.config.log_directory).join(format!("{name}.log"));
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let out = text
            .lines()
            .map(|l| l.splitn(4, ' ').nth(3).unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        (id, out)
    }

    /// The container's OCI spec, from CRI's verbose status.
    pub fn spec(&self, id: &str) -> serde_json::Value {
        let req = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: true,
        };
        let info = self.call("ContainerStatus", |mut c| async move {
            c.container_status(req).await
        });
        let v: serde_json::Value = serde_json::from_str(&info.info["info"]).unwrap();
        v["runtimeSpec"].clone()
    }

    /// StopContainer (1 s grace).
    pub fn stop_container(&self, id: &str) {
        let req = cri::StopContainerRequest {
            container_id: id.into(),
            timeout: 1,
        };
        self.call("StopContainer", |mut c| async move {
            c.stop_container(req).await
        });
    }

    /// RemoveContainer.
    pub fn remove_container(&self, id: &str) {
        let req = cri::RemoveContainerRequest {
            container_id: id.into(),
        };
        self.call("RemoveContainer", |mut c| async move {
            c.remove_container(req).await
        });
    }

    /// StopPodSandbox and RemovePodSandbox.
    pub fn remove_pod(&self, pod: &Pod) {
        let (a, b) = (pod.id.clone(), pod.id.clone());
        self.call("StopPodSandbox", |mut c| async move {
            c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: a })
                .await
        });
        self.call("RemovePodSandbox", |mut c| async move {
            c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: b })
                .await
        });
    }
}

impl Drop for Node {
    /// Removes every pod (and so container) still there, stops containerd, and unmounts what
    /// it left under the node's directory.
    fn drop(&mut self) {
        if self.child.lock().unwrap().is_some() {
            let pods = self
                .try_call(|mut c| async move {
                    c.list_pod_sandbox(cri::ListPodSandboxRequest::default())
                        .await
                })
                .map(|r| r.items)
                .unwrap_or_default();
            for p in pods {
                let (a, b) = (p.id.clone(), p.id);
                let _ = self.try_call(|mut c| async move {
                    c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: a })
                        .await
                });
                let _ = self.try_call(|mut c| async move {
                    c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: b })
                        .await
                });
            }
        }
        self.stop_daemon();
        let t = self.dir.path().display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&t))
            .collect();
        ours.sort_unstable_by(|a, b| b.cmp(a));
        for m in ours {
            let _ = Command::new("umount").args(["-l", m]).output();
        }
    }
}
