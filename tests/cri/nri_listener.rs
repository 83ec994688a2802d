//! The NRI plugin's listeners under abuse, on the real `cpuplan-nri` process (no runtime
//! needed: the listeners serve from the start): its metrics listener, reached at 127.0.0.1 only,
//! held by thousands of half-sent requests, a client that pipelines without reading, an
//! oversized header; what `/metrics` answers by the `Accept` header; and the NRI stub's private
//! abstract socket flooded by connections of another user. Every loop is bounded.

use common::cri;
use common::nriplugin;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use cri::{Containerd, CriNode};
use nriplugin::{plugin_config, wait_until, Plugin};
use serde_json::json;

/// The connections the flood holds open at once.
const IDLE: usize = 2000;
/// How much the plugin's resident memory may grow under each abuse here.
const MEMORY_SLACK_KIB: u64 = 32 << 10;

/// A free port at 127.0.0.1.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A plugin of a node that is not started, serving its listener at `--metrics-address=:PORT`
/// (every address, as the chart passes its node's): the node, the plugin and 127.0.0.1:PORT.
fn listening() -> (CriNode, Plugin, SocketAddr) {
    let node = CriNode::on(Containerd::V17);
    let port = free_port();
    let cfg = plugin_config(&node, json!({}));
    let plugin = Plugin::spawn(&node, &cfg, &[&format!("--metrics-address=:{port}")]);
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    wait_until(
        "the plugin's listener",
        || plugin.log(),
        || exchange(address, &get("/healthz", "")).is_some(),
    );
    (node, plugin, address)
}

/// A `GET path` with the extra header lines `headers` (each ending in CRLF).
fn get(path: &str, headers: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: test\r\n{headers}Connection: close\r\n\r\n").into_bytes()
}

/// A reply: the status, the head (lower-cased), the body.
#[derive(Debug)]
struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    /// The value of the header `name` (lower case).
    fn header(&self, name: &str) -> Option<&str> {
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    }
}

/// Sends `request` to `address` and reads the reply to the end (`None` where nothing answers).
fn exchange(address: SocketAddr, request: &[u8]) -> Option<Reply> {
    let mut s = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some(Reply {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    })
}

/// The entries of `/proc/PID/DIR` (`task`: threads; `fd`: descriptors).
fn entries(pid: u32, dir: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/{dir}"))
        .unwrap()
        .count()
}

/// The resident memory of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Whether this host's IPv4 TCP connection from local port `local` to port `remote` is
/// established (`/proc/net/tcp`).
fn established(local: u16, remote: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let (local, remote) = (format!(":{local:04X}"), format!(":{remote:04X}"));
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&local) && f[2].ends_with(&remote) && f[3] == "01"
    })
}

/// This process may hold `n` more descriptors (its soft limit raised to the hard one).
fn allow_descriptors(n: u64) {
    use nix::libc::{getrlimit, rlimit, setrlimit, RLIMIT_NOFILE};
    let mut r = rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the one struct given.
    unsafe {
        assert_eq!(getrlimit(RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < n + 256 {
            r.rlim_cur = r.rlim_max;
            assert_eq!(setrlimit(RLIMIT_NOFILE, &r), 0);
        }
    }
    assert!(r.rlim_cur >= n + 256, "RLIMIT_NOFILE {}", r.rlim_cur);
}

/// Thousands of connections that send half a request and wait: no thread per connection, the
/// plugin's descriptors and memory bounded (the oldest connections shed), and `/healthz`,
/// `/readyz` and `/metrics` still answered while they are held.
#[test]
fn thousands_of_idle_half_requests_cost_no_threads_and_the_probes_answer() {
    allow_descriptors(IDLE as u64);
    let (_node, plugin, address) = listening();
    let pid = plugin.pid();
    assert_eq!(exchange(address, &get("/metrics", "")).unwrap().status, 200);
    let (threads, fds, rss) = (entries(pid, "task"), entries(pid, "fd"), rss_kib(pid));
    let mut held = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        let mut s = TcpStream::connect_timeout(&address, Duration::from_secs(2)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nX-Half: ")
            .unwrap();
        held.push(s);
    }
    for (path, status) in [("/healthz", 200), ("/readyz", 503), ("/metrics", 200)] {
        let r = exchange(address, &get(path, "")).unwrap_or_else(|| panic!("{path}"));
        assert_eq!(r.status, status, "{path}: {r:?}");
    }
    let (t, f, m) = (entries(pid, "task"), entries(pid, "fd"), rss_kib(pid));
    eprintln!(
        "{IDLE} idle connections: threads {threads} -> {t}, fds {fds} -> {f}, rss {rss} -> {m} KiB"
    );
    assert!(t <= threads + 2, "threads {threads} -> {t}");
    // The listener keeps 256 connections at most (docs/kubernetes.md): not one per client.
    assert!(f <= fds + 256 + 2, "descriptors {fds} -> {f}");
    assert!(m <= rss + MEMORY_SLACK_KIB, "memory {rss} -> {m} KiB");
    drop(held);
}

/// One connection pipelines `GET /metrics` without ever reading the answers: it stalls only
/// itself (the others are answered, the plugin's memory stays bounded), and the write timeout
/// closes it.
#[test]
fn a_client_that_pipelines_without_reading_stalls_only_itself() {
    let (_node, plugin, address) = listening();
    let pid = plugin.pid();
    assert_eq!(exchange(address, &get("/metrics", "")).unwrap().status, 200);
    let rss = rss_kib(pid);
    let mut p = TcpStream::connect(address).unwrap();
    p.set_nonblocking(true).unwrap();
    let burst = b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n".repeat(64);
    let mut blocked = false;
    for _ in 0..40_000 {
        match p.write(&burst) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                blocked = true;
                break;
            }
            Err(e) => panic!("the pipelining connection failed before it stalled: {e}"),
        }
    }
    assert!(blocked, "the plugin read every request without being read");
    for (path, status) in [("/healthz", 200), ("/readyz", 503), ("/metrics", 200)] {
        let r = exchange(address, &get(path, "")).unwrap_or_else(|| panic!("{path}"));
        assert_eq!(r.status, status, "{path} while a client stalls: {r:?}");
    }
    let m = rss_kib(pid);
    assert!(m <= rss + MEMORY_SLACK_KIB, "memory {rss} -> {m} KiB");
    // The write timeout closes the stalled connection on the plugin's side...
    let ours = p.local_addr().unwrap().port();
    wait_until(
        "the stalled connection closed by the plugin",
        || plugin.log(),
        || !established(ours, address.port()),
    );
    // ...and reading now gets what was answered, then that end (a reset, since the plugin
    // closed with requests unread), not a stream that goes on.
    p.set_nonblocking(false).unwrap();
    p.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut total: usize = 0;
    let end = loop {
        match p.read(&mut buf) {
            Ok(0) => break "closed",
            Ok(n) => total += n,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break "reset",
            Err(e) => panic!("still open after {total} bytes: {e}"),
        }
        assert!(total < 1 << 30, "an answer without end");
    };
    eprintln!("the stalled connection: {total} bytes, then {end}");
}

/// A header line of many MiB: the plugin stops reading it (the writer fails long before
/// 64 MiB), answers 431 where the answer arrives, and its memory stays bounded.
#[test]
fn an_oversized_header_is_refused_with_bounded_memory() {
    let (_node, plugin, address) = listening();
    let pid = plugin.pid();
    assert_eq!(exchange(address, &get("/metrics", "")).unwrap().status, 200);
    let rss = rss_kib(pid);
    let mut s = TcpStream::connect(address).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nX-Big: ")
        .unwrap();
    let chunk = vec![b'a'; 64 << 10];
    let mut written: usize = 0;
    let refused = (0..1024).any(|_| match s.write_all(&chunk) {
        Ok(()) => {
            written += chunk.len();
            false
        }
        Err(_) => true,
    });
    assert!(refused, "the plugin read a {written}-byte header");
    let m = rss_kib(pid);
    eprintln!("refused after {written} bytes written; rss {rss} -> {m} KiB");
    assert!(m <= rss + MEMORY_SLACK_KIB / 4, "memory {rss} -> {m} KiB");
    // The answer, where the reset did not overtake it.
    let short = format!("X-Big: {}\r\n", "a".repeat(32 << 10));
    if let Some(r) = exchange(address, &get("/metrics", &short)) {
        assert_eq!(r.status, 431, "{r:?}");
    }
    assert_eq!(exchange(address, &get("/healthz", "")).unwrap().status, 200);
}

/// `/metrics` in Prometheus's text format unless the `Accept` header asks for OpenMetrics, and
/// every family, each of its label values and the process's metrics there before any event.
#[test]
fn metrics_follow_the_accept_header_with_every_family_from_the_start() {
    let (_node, _plugin, address) = listening();
    let plain = exchange(address, &get("/metrics", "")).unwrap();
    assert_eq!(
        plain.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8"),
        "{plain:?}"
    );
    let text = &plain.body;
    assert!(
        !text.contains("# EOF") && !text.contains("# UNIT"),
        "{text}"
    );
    for line in [
        "# TYPE cpuplan_nri_containers_total counter",
        "# TYPE cpuplan_build_info gauge",
        "# TYPE process_cpu_seconds_total counter",
        "# TYPE cpuplan_nri_request_duration_seconds histogram",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
    }
    for sample in [
        r#"cpuplan_nri_containers_total{request="CreateContainer",outcome="pinned"} 0"#,
        r#"cpuplan_nri_containers_total{request="UpdateContainer",outcome="problem"} 0"#,
        r#"cpuplan_nri_problems_total{cause="claim"} 0"#,
        r#"cpuplan_nri_fallbacks_total{cause="env_only"} 0"#,
        r#"cpuplan_nri_request_duration_seconds_count{request="CreateContainer"} 0"#,
        "cpuplan_nri_registrations_total 0",
    ] {
        assert!(text.lines().any(|l| l == sample), "{sample}:\n{text}");
    }
    for name in cpuplan_hook::nri::metrics::PROCESS.map(|(n, _)| n) {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name}:\n{text}"
        );
    }
    // Every sample's family has its TYPE line, as the Prometheus format's parser expects.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let name = l.split(['{', ' ']).next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|f| text.contains(&format!("# TYPE {f} histogram")))
            .unwrap_or(name);
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "{l}: no TYPE line for {family}"
        );
    }

    let prometheus = "Accept: application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2\r\n";
    let open = exchange(address, &get("/metrics", prometheus)).unwrap();
    assert_eq!(
        open.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{open:?}"
    );
    assert!(open.body.ends_with("# EOF\n"), "{}", open.body);
    assert!(
        open.body
            .lines()
            .any(|l| l == "# TYPE cpuplan_nri_containers counter"),
        "{}",
        open.body
    );
    let only_text = "Accept: text/plain;version=0.0.4\r\n";
    let again = exchange(address, &get("/metrics", only_text)).unwrap();
    assert!(!again.body.contains("# EOF"), "{}", again.body);
}

/// The abstract name of the NRI stub's private listener in process `pid` (`/proc/net/unix`).
fn private_listener(pid: u32) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    let prefix = format!("@nri-plugin.{pid}.");
    table
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .find(|name| name.starts_with(&prefix))
        .map(|name| name[1..].to_string())
}

/// Connects `n` times to the abstract socket `name` as uid and gid 65534 (a forked child that
/// makes only system calls), closing each connection at once; fails unless every connect
/// succeeded.
fn flood_as_nobody(name: &str, n: usize) {
    use nix::libc;
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    // SAFETY: a plain C struct, all zeroes is its empty value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    assert!(name.len() < addr.sun_path.len() - 1, "{name}");
    for (i, b) in name.bytes().enumerate() {
        addr.sun_path[i + 1] = b as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    // SAFETY: the child makes system calls only (no allocation, no lock) and ends in _exit.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => unsafe {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(2);
            }
            for _ in 0..n {
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                if fd < 0 {
                    libc::_exit(3);
                }
                let sa = &addr as *const libc::sockaddr_un as *const libc::sockaddr;
                if libc::connect(fd, sa, len) != 0 {
                    libc::_exit(4);
                }
                libc::close(fd);
            }
            libc::_exit(0)
        },
        ForkResult::Parent { child } => {
            assert_eq!(waitpid(child, None).unwrap(), WaitStatus::Exited(child, 0));
        }
    }
}

/// The connections the lines of `log` say were rejected, summed.
fn rejected(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| {
            l.split_once("nri: rejected ")?
                .1
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Another user's flood of connections to the stub's private abstract socket: every one is
/// refused and counted, the log gets a line at once and then at most one per 10 s naming the
/// count and the uid, and no line per connection (neither the stub's nor ttrpc's).
#[test]
fn a_flood_of_foreign_connections_on_the_stub_s_socket_writes_a_bounded_log() {
    const FLOOD: usize = 20_000;
    let (_node, plugin, _address) = listening();
    let pid = plugin.pid();
    wait_until(
        "the stub's private listener",
        || plugin.log(),
        || private_listener(pid).is_some(),
    );
    let name = private_listener(pid).unwrap();
    let (lines, threads) = (plugin.log().lines().count(), entries(pid, "task"));
    flood_as_nobody(&name, FLOOD);
    wait_until(
        "every rejected connection counted in the log",
        || plugin.log(),
        || rejected(&plugin.log()) == FLOOD as u64,
    );
    let log = plugin.log();
    let told: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("nri: rejected "))
        .collect();
    eprintln!(
        "{FLOOD} foreign connections: {} lines:\n{}",
        told.len(),
        told.join("\n")
    );
    assert!((1..=3).contains(&told.len()), "{log}");
    assert!(
        told.iter()
            .all(|l| l.contains(" WARN cpuplan-nri[") && l.contains("from uid 65534 ")),
        "{log}"
    );
    assert!(
        !log.contains("accept hook failed"),
        "ttrpc's own line: {log}"
    );
    assert!(log.lines().count() <= lines + 40, "{log}");
    assert!(entries(pid, "task") <= threads + 2);
    assert_eq!(
        private_listener(pid),
        Some(name),
        "the listener is still there"
    );
}
