//! CRI calls as kubelet makes them: pods, containers, updates, logs.

use super::*;

/// A CRI client of the runtime serving `socket` (a unix socket; tonic needs an http URI, which
/// the connector ignores).
pub async fn connect(
    socket: PathBuf,
) -> Result<RuntimeServiceClient<Channel>, tonic::transport::Error> {
    let channel = Endpoint::try_from("http://[::]:50051")
        .expect("endpoint")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await?;
    Ok(RuntimeServiceClient::new(channel))
}

impl CriNode {
    fn client(&self) -> Result<RuntimeServiceClient<Channel>, tonic::Status> {
        let mut slot = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let sock = self.socket();
        let c = self
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), connect(sock)).await })
            .map_err(|_| tonic::Status::unavailable("connecting timed out"))?
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// One CRI call (`f` is given a client); a timeout of 120 s is an error.
    pub fn try_call<T, F, Fut>(&self, f: F) -> Result<T, tonic::Status>
    where
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let c = self.client()?;
        self.rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(120), f(c)).await })
            .map_err(|_| tonic::Status::deadline_exceeded("CRI call took over 120 s"))?
            .map(tonic::Response::into_inner)
    }

    /// One CRI call that must succeed: panics with `what` and containerd's log otherwise.
    pub fn call<T, F, Fut>(&self, what: &str, f: F) -> T
    where
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.try_call(f).unwrap_or_else(|e| {
            panic!(
                "CRI {what}: {} {}\n--- containerd log:\n{}",
                e.code(),
                e.message(),
                self.log_tail()
            )
        })
    }

    /// A host-network pod's config as kubelet sends it: metadata with a unique uid, the log
    /// directory, no hostname (no CNI here).
    pub fn pod_config(&self, name: &str) -> cri::PodSandboxConfig {
        let uid = format!("{name}-{}-{}", std::process::id(), unique());
        let logs = self
            .path("var/log/pods")
            .join(format!("default_{name}_{uid}"));
        std::fs::create_dir_all(&logs).unwrap();
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid,
                namespace: "default".into(),
                attempt: 0,
            }),
            log_directory: logs.display().to_string(),
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
        }
    }

    /// RunPodSandbox with `config` under runtime handler `handler` ("" for the default).
    pub fn run_pod(&self, config: cri::PodSandboxConfig, handler: &str) -> Pod {
        let id = self
            .try_run_pod(config.clone(), handler)
            .unwrap_or_else(|e| {
                panic!(
                    "CRI RunPodSandbox: {e}\n--- containerd log:\n{}",
                    self.log_tail()
                )
            });
        Pod { id, config }
    }

    /// RunPodSandbox that may fail; the sandbox id.
    pub fn try_run_pod(
        &self,
        config: cri::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, tonic::Status> {
        let req = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: handler.into(),
        };
        let id = self
            .try_call(|mut c| async move { c.run_pod_sandbox(req).await })?
            .pod_sandbox_id;
        crate::log_guard::mark(&id);
        self.pods.lock().unwrap().push(id.clone());
        Ok(id)
    }

    /// A container config: the busybox image running `sh -c script`, logging to `<name>.log`.
    pub fn container_config(&self, name: &str, script: &str) -> cri::ContainerConfig {
        cri::ContainerConfig {
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
        }
    }

    /// CreateContainer in `pod`; the container id.
    pub fn create_container(&self, pod: &Pod, config: cri::ContainerConfig) -> String {
        self.try_create_container(pod, config).unwrap_or_else(|e| {
            panic!(
                "CRI CreateContainer: {e}\n--- containerd log:\n{}",
                self.log_tail()
            )
        })
    }

    /// CreateContainer that may fail.
    pub fn try_create_container(
        &self,
        pod: &Pod,
        config: cri::ContainerConfig,
    ) -> Result<String, tonic::Status> {
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        };
        let id = self
            .try_call(|mut c| async move { c.create_container(req).await })?
            .container_id;
        crate::log_guard::mark(&id);
        self.containers.lock().unwrap().push(id.clone());
        Ok(id)
    }

    /// StartContainer that may fail (a createRuntime hook that fails fails it).
    pub fn try_start_container(&self, id: &str) -> Result<(), tonic::Status> {
        let req = cri::StartContainerRequest {
            container_id: id.into(),
        };
        self.try_call(|mut c| async move { c.start_container(req).await })
            .map(|_| ())
    }

    /// StartContainer.
    pub fn start_container(&self, id: &str) {
        self.try_start_container(id).unwrap_or_else(|e| {
            panic!(
                "CRI StartContainer: {e}\n--- containerd log:\n{}",
                self.log_tail()
            )
        })
    }

    /// ContainerStatus.
    pub fn container_status(&self, id: &str) -> cri::ContainerStatus {
        let req = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        self.call("ContainerStatus", |mut c| async move {
            c.container_status(req).await
        })
        .status
        .expect("a status")
    }

    /// Waits up to `timeout` for the container to exit; its exit code.
    pub fn wait_exit(&self, id: &str, timeout: Duration) -> i32 {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.container_status(id);
            if s.state == cri::ContainerState::ContainerExited as i32 {
                return s.exit_code;
            }
            assert!(
                Instant::now() < deadline,
                "container {id} still {:?} after {timeout:?}",
                s.state
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The container's log as its processes wrote it (CRI's timestamp and stream stripped).
    pub fn container_log(&self, pod: &Pod, config: &cri::ContainerConfig) -> String {
        let p = Path::new(&pod.config.log_directory).join(&config.log_path);
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let mut out = String::new();
        for line in text.lines() {
            let mut f = line.splitn(4, ' ');
            let (_ts, _stream, tag, msg) = (f.next(), f.next(), f.next(), f.next());
            out.push_str(msg.unwrap_or(""));
            if tag != Some("P") {
                out.push('\n');
            }
        }
        out
    }

    /// Creates, starts and waits for a container in `pod` (up to 60 s): its id, exit code and log.
    pub fn run_container(&self, pod: &Pod, config: cri::ContainerConfig) -> Ran {
        let id = self.create_container(pod, config.clone());
        self.start_container(&id);
        let exit_code = self.wait_exit(&id, Duration::from_secs(60));
        // The log is complete once the shim reported the exit; give the writer a moment.
        std::thread::sleep(Duration::from_millis(100));
        Ran {
            id,
            exit_code,
            log: self.container_log(pod, &config),
        }
    }

    /// UpdateContainerResources as kubelet sends it (its CPU manager: only `cpuset_cpus`; an
    /// in-place resize: quota and period); the error, if the runtime (or an NRI plugin) fails it.
    pub fn update_container_resources(
        &self,
        id: &str,
        resources: cri::LinuxContainerResources,
    ) -> Result<(), tonic::Status> {
        let req = cri::UpdateContainerResourcesRequest {
            container_id: id.to_string(),
            linux: Some(resources),
            ..Default::default()
        };
        self.try_call(|mut c| async move { c.update_container_resources(req).await })
            .map(|_| ())
    }

    /// StopContainer with a grace period of `timeout_s`.
    pub fn stop_container(&self, id: &str, timeout_s: i64) {
        let req = cri::StopContainerRequest {
            container_id: id.into(),
            timeout: timeout_s,
        };
        self.call("StopContainer", |mut c| async move {
            c.stop_container(req).await
        });
    }

    /// RemoveContainer (it is stopped first if it runs).
    pub fn remove_container(&self, id: &str) {
        let req = cri::RemoveContainerRequest {
            container_id: id.into(),
        };
        self.call("RemoveContainer", |mut c| async move {
            c.remove_container(req).await
        });
        self.containers.lock().unwrap().retain(|c| c != id);
    }

    /// StopPodSandbox and RemovePodSandbox.
    pub fn remove_pod(&self, pod: &Pod) {
        let id = pod.id.clone();
        self.call("StopPodSandbox", |mut c| async move {
            c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id })
                .await
        });
        let id = pod.id.clone();
        self.call("RemovePodSandbox", |mut c| async move {
            c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id })
                .await
        });
        self.pods.lock().unwrap().retain(|p| *p != pod.id);
    }

    /// The OCI runtime spec containerd gave container (or sandbox) `id`, from its metadata
    /// (`ctr containers info`): there from CreateContainer until RemoveContainer.
    pub fn oci_spec(&self, id: &str) -> Value {
        let r = self.ctr(&["containers", "info", id]);
        assert_eq!(r.rc, 0, "ctr containers info {id}: {}", r.err);
        let info: Value = serde_json::from_str(&r.out).expect("ctr containers info prints JSON");
        info["Spec"].clone()
    }

    /// The bundle directory of a task `id`.
    pub fn bundle(&self, id: &str) -> PathBuf {
        self.path("run/containerd/io.containerd.runtime.v2.task")
            .join(NAMESPACE)
            .join(id)
    }

    /// Creates kubelet's pod cgroup (cgroupfs driver) `/kubepods/<qos>/pod<uid>`, or
    /// `/kubepods/pod<uid>` for a Guaranteed pod (`qos` `None`), in the cpu hierarchy with
    /// `cpu.cfs_quota_us`/`cpu.cfs_period_us` set when given; the path to give as `cgroup_parent`.
    /// Dropping the node removes it (and `kubepods/<qos>`, `kubepods` once empty) everywhere.
    pub fn pod_cgroup(&self, qos: Option<&str>, uid: &str, quota: Option<(i64, i64)>) -> String {
        let rel = match qos {
            Some(q) => format!("kubepods/{q}/pod{uid}"),
            None => format!("kubepods/pod{uid}"),
        };
        let dir = cpu_hierarchy().join(&rel);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        self.cgroups.lock().unwrap().push(rel.clone());
        if let Some((q, p)) = quota {
            std::fs::write(dir.join("cpu.cfs_period_us"), p.to_string()).unwrap();
            std::fs::write(dir.join("cpu.cfs_quota_us"), q.to_string()).unwrap();
        }
        format!("/{rel}")
    }

    /// `config` with `/dev/nvidiaN` given through CRI `devices`, from a `195:N` node made under
    /// the node root (`T/dev/nvidiaN`).
    pub fn with_gpu(&self, mut config: cri::ContainerConfig, n: u64) -> cri::ContainerConfig {
        let host = self.path(&format!("dev/nvidia{n}"));
        if !host.exists() {
            std::fs::create_dir_all(host.parent().unwrap()).unwrap();
            nix::sys::stat::mknod(
                &host,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                nix::sys::stat::makedev(195, n),
            )
            .unwrap();
        }
        config.devices.push(cri::Device {
            container_path: format!("/dev/nvidia{n}"),
            host_path: host.display().to_string(),
            permissions: "rw".into(),
        });
        config
    }

    /// Creates and starts a container in `pod` that keeps running, and waits (up to 30 s) until
    /// its log holds `marker`: its id and that log.
    pub fn start_until(
        &self,
        pod: &Pod,
        config: &cri::ContainerConfig,
        marker: &str,
    ) -> (String, String) {
        let id = self.create_container(pod, config.clone());
        self.start_container(&id);
        let log = self.wait_log(pod, config, marker);
        (id, log)
    }

    /// Waits up to 30 s until the running container's log holds `marker`; the log.
    pub fn wait_log(&self, pod: &Pod, config: &cri::ContainerConfig, marker: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.container_log(pod, config);
            if log.contains(marker) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "no {marker:?} in the container's log: {log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Lays out at `host` a root holding the node's `ctr` (at `usr/bin/ctr`) and the libraries
    /// it loads (hard links, copies across filesystems): what `install --ctr-root` runs chrooted.
    pub fn ctr_root(&self, host: &Path) {
        let ctr = self.flavour.ctr();
        let ldd = Command::new("ldd").arg(&ctr).output().unwrap();
        let libs: Vec<PathBuf> = String::from_utf8_lossy(&ldd.stdout)
            .split_whitespace()
            .filter(|w| w.starts_with('/'))
            .map(PathBuf::from)
            .collect();
        let put = |from: &Path, to: PathBuf| {
            // Laid out already (a second install): a copy over a hard link would write the
            // original.
            if to.exists() {
                return;
            }
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            let real = std::fs::canonicalize(from).unwrap();
            if std::fs::hard_link(&real, &to).is_err() {
                std::fs::copy(&real, &to).unwrap();
            }
        };
        put(&ctr, host.join("usr/bin/ctr"));
        for lib in libs {
            put(&lib, host.join(lib.strip_prefix("/").unwrap()));
        }
    }

    /// The runtime spec the node's `ctr oci spec` prints (its containerd's default spec).
    pub fn ctr_default_spec(&self) -> Value {
        let out = Command::new(self.flavour.ctr())
            .args(["oci", "spec"])
            .output()
            .unwrap();
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    }
}
