//! What dropping a node removes: its containers, pods, shims, mounts and cgroups.

use super::*;

impl Default for CriNode {
    fn default() -> Self {
        Self::new()
    }
}

/// A number unique within this test process.
pub fn unique() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The cgroup v1 cpu hierarchy's mount point.
pub fn cpu_hierarchy() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for l in mounts.lines() {
        let Some((pre, post)) = l.split_once(" - ") else {
            continue;
        };
        let mut p = post.split(' ');
        if p.next() == Some("cgroup") && p.nth(1).is_some_and(|o| o.split(',').any(|o| o == "cpu"))
        {
            return PathBuf::from(pre.split(' ').nth(4).unwrap());
        }
    }
    panic!("no cgroup v1 cpu hierarchy (the CRI tests read kubelet's layout on it)")
}

/// Every cgroup hierarchy's mount point.
fn hierarchies() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fs = post.split(' ').next()?;
            let mount = PathBuf::from(pre.split(' ').nth(4)?);
            (fs == "cgroup" || fs == "cgroup2").then_some(mount)
        })
        .collect()
}

/// The nodes of this process not yet dropped: CRI's shared `k8s.io` cgroup parent is removed
/// only by the last one (another node's runc may be creating a cgroup under it).
pub(super) static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Drop for CriNode {
    fn drop(&mut self) {
        let last = LIVE.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1;
        // A test that panicked holding one of these locks poisoned it: the teardown still runs
        // (a panic here, while that test unwinds, would abort and leave everything behind).
        let containers = self
            .containers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let pods = self.pods.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if self
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            for id in &containers {
                let req = cri::RemoveContainerRequest {
                    container_id: id.clone(),
                };
                let _ = self.try_call(|mut c| async move { c.remove_container(req).await });
            }
            for id in &pods {
                let (a, b) = (id.clone(), id.clone());
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
        // Whatever outlived the daemon: shims by the pid they recorded, then runc's containers.
        let tasks = self
            .path("run/containerd/io.containerd.runtime.v2.task")
            .join(NAMESPACE);
        let mut ids: Vec<String> = containers.iter().chain(&pods).cloned().collect();
        if let Ok(entries) = std::fs::read_dir(&tasks) {
            for e in entries.flatten() {
                ids.push(e.file_name().to_string_lossy().into_owned());
                if let Ok(pid) = std::fs::read_to_string(e.path().join("shim.pid")) {
                    if let Ok(pid) = pid.trim().parse::<i32>() {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
                // The shim's socket lives in containerd's global /run/containerd/s.
                if let Ok(addr) = std::fs::read_to_string(e.path().join("address")) {
                    if let Some(p) = addr.trim().strip_prefix("unix://") {
                        if p.starts_with("/run/containerd/s/") {
                            let _ = std::fs::remove_file(p);
                        }
                    }
                }
            }
        }
        let runc_root = self.path("run/runc");
        if let Ok(entries) = std::fs::read_dir(runc_root.join(NAMESPACE)) {
            for e in entries.flatten() {
                let _ = Command::new("runc")
                    .arg("--root")
                    .arg(runc_root.join(NAMESPACE))
                    .args(["delete", "-f"])
                    .arg(e.file_name())
                    .output();
            }
        }
        // Every shim of this node, found by its containerd's address under the node root:
        // those whose task directory containerd removed or never wrote (a pod's shim serving
        // its containers, a shim of a containerd killed mid-start) outlive it otherwise.
        crate::procs::stop_shims_under(self.root());
        crate::procs::unmount_under(self.root());
        let parents = self
            .cgroups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for h in hierarchies() {
            crate::cgroups::remove_named(&h, &ids, 5);
            // CRI's parent for pods without a cgroup_parent, when no other node uses it.
            if last {
                let _ = std::fs::remove_dir(h.join(NAMESPACE));
            }
            for rel in &parents {
                // pod<uid>, then <qos> and kubepods when nothing else is in them.
                let mut p = PathBuf::from(rel);
                loop {
                    let _ = std::fs::remove_dir(h.join(&p));
                    if !p.pop() || p.as_os_str().is_empty() {
                        break;
                    }
                }
            }
        }
    }
}
