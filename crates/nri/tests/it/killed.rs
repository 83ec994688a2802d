//! A process serving the stub, killed: it leaves nothing in the file system. Its private
//! listener (what the runtime's calls go through) is an abstract unix socket, which the kernel
//! drops with the process, and it serves that process only: another process that finds its
//! name is closed at once.
//!
//! The plugin runs in a child process (this test binary again, `serve_child`) as a plugin the
//! runtime launched: a pre-connected socket (`NRI_PLUGIN_SOCKET`) whose other end this process
//! serves as the runtime ([`nri_plugin::runtime::Session`]), with `TMPDIR` a fresh directory.

use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use nri_plugin::api::{Container, CreateContainerResponse, PodSandbox};
use nri_plugin::runtime::Session;
use nri_plugin::{Options, Plugin, PluginResult};

/// Set in the child: it serves the stub.
const CHILD: &str = "NRI_PLUGIN_TEST_KILLED_CHILD";

/// A plugin that adjusts nothing.
struct Idle;

impl Plugin for Idle {
    fn create_container(
        &self,
        _: &PodSandbox,
        _: &Container,
    ) -> PluginResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }
}

/// The child: serves the stub on the pre-connected socket until it is killed.
#[test]
fn serve_child() {
    if std::env::var_os(CHILD).is_none() {
        return; // only the child serves
    }
    let opts = Options::from_env("killed", "10", |k| std::env::var(k).ok()).unwrap();
    let _ = nri_plugin::run(&opts, Arc::new(Idle));
}

/// The abstract unix sockets (names without their `@`) of this network namespace whose name
/// starts with `prefix`: the listening ones (`__SO_ACCEPTCON`), or all (the connections it
/// accepted show its name too).
fn abstract_sockets(prefix: &str, listening_only: bool) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| !listening_only || f.get(3) == Some(&"00010000"))
        .filter_map(|f| f.get(7)?.strip_prefix('@').map(str::to_string))
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// The names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_killed_plugin_leaves_nothing_in_the_file_system_and_serves_only_itself() {
    let tmp = tempfile::Builder::new()
        .prefix("nri-killed-")
        .tempdir()
        .unwrap();
    let system_tmp = std::env::temp_dir();
    let stub_dirs = || -> Vec<String> {
        names(&system_tmp)
            .into_iter()
            .filter(|n| n.starts_with("nri-plugin."))
            .collect()
    };
    let before = stub_dirs();
    let (runtime_end, plugin_end) = UnixStream::pair().unwrap();
    // The plugin's end is inherited by the child under its number.
    fcntl(plugin_end.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed::serve_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("NRI_PLUGIN_SOCKET", plugin_end.as_raw_fd().to_string())
        .env("TMPDIR", tmp.path())
        .spawn()
        .unwrap();
    drop(plugin_end);
    let runtime = Session::over(runtime_end).unwrap();
    let reg = runtime
        .registered(Duration::from_secs(20))
        .expect("the child registers");
    assert_eq!(
        (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
        ("killed", "10")
    );

    // While it serves: its private listener, by name only (no file anywhere).
    let prefix = format!("nri-plugin.{}.", child.id());
    let listening = abstract_sockets(&prefix, true);
    assert_eq!(listening.len(), 1, "{listening:?}");
    assert!(names(tmp.path()).is_empty(), "{:?}", names(tmp.path()));

    // Another process (this one) that connects to it is closed at once: no call is served.
    let addr = SocketAddr::from_abstract_name(listening[0].as_bytes()).unwrap();
    let stranger = UnixStream::connect_addr(&addr).unwrap();
    stranger
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 1];
    let read = std::io::Read::read(&mut &stranger, &mut buf);
    assert!(
        matches!(read, Ok(0))
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the stranger's connection is closed: {read:?}"
    );
    drop(stranger);

    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "{status:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !abstract_sockets(&prefix, false).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the listener outlived the process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        names(tmp.path()).is_empty(),
        "left in its TMPDIR: {:?}",
        names(tmp.path())
    );
    assert_eq!(stub_dirs(), before, "left in {}", system_tmp.display());
    runtime.close();
}
