//! The daemon: start, import, stop, restart, `ctr`.

use super::*;

impl CriNode {
    /// Starts containerd, waits until CRI answers, and imports the images (first start only).
    pub fn start(&self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new(self.flavour.containerd())
            .env("PATH", self.flavour.path_env())
            .arg("--config")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        *self.child.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            *self.client.lock().unwrap() = None;
            let up = self.socket().exists()
                && self
                    .try_call(
                        |mut c| async move { c.version(cri::VersionRequest::default()).await },
                    )
                    .is_ok();
            if up {
                break;
            }
            if let Some(Ok(Some(st))) = self.child.lock().unwrap().as_mut().map(Child::try_wait) {
                panic!("containerd exited ({st}):\n{}", self.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "containerd's CRI did not answer:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut imported = self.imported.lock().unwrap();
        if !*imported {
            for tar in ["pause.tar", "busybox.tar"] {
                let p = self.path("images").join(tar);
                let r = self.ctr(&[
                    "images",
                    "import",
                    "--snapshotter",
                    "native",
                    p.to_str().unwrap(),
                ]);
                assert_eq!(r.rc, 0, "ctr images import {tar}: {}{}", r.out, r.err);
            }
            *imported = true;
        }
    }

    /// Imports the OCI image-layout tar `tar` (an [`image_tar_with`]) into the started node.
    pub fn import(&self, tar: &Path) {
        let r = self.ctr(&[
            "images",
            "import",
            "--snapshotter",
            "native",
            tar.to_str().unwrap(),
        ]);
        assert_eq!(
            r.rc,
            0,
            "ctr images import {}: {}{}",
            tar.display(),
            r.out,
            r.err
        );
    }

    /// Stops containerd (SIGTERM, then SIGKILL after 10 s); shims and containers keep running.
    pub fn stop_daemon(&self) {
        let Some(child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        *self.client.lock().unwrap_or_else(|e| e.into_inner()) = None;
        crate::procs::stop_gently(child, Duration::from_secs(10));
    }

    /// Stops and starts containerd, as `systemctl restart containerd` does.
    pub fn restart(&self) {
        self.stop_daemon();
        self.start();
    }

    /// The pid of the running containerd.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(Child::id)
    }

    /// `ctr --address SOCK --namespace k8s.io ARGS`.
    pub fn ctr(&self, args: &[&str]) -> Run {
        Command::new("timeout")
            .arg("120")
            .arg(self.flavour.ctr())
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", NAMESPACE])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr")
            .into()
    }
}
