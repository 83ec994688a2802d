//! The NRI daemon's rank placement: how long after a GPU worker process starts it runs on its
//! worker's CPUs, with 1, 8 and 64 processes started at once, and what the watcher costs idle.
//!
//! ```sh
//! cargo bench -p cpuplan-hook --bench rank_placement -- [--rounds R] [--idle S]   # as root
//! ```
//!
//! The daemon's own watcher thread (`cpuplan-nri`'s, through the library's hidden `fuzzing`
//! module) on the kernel's real proc connector, with one registered container of two GPUs whose
//! cgroup is a fresh leaf of the cgroup v2 hierarchy (`cpuplan-rank-bench-<pid>`), worker 0 on
//! the first CPU of this process's mask, worker 1 on the second. A round starts N workers one
//! after the other (as a launcher does): this program again (`--rank-worker`), moved into that
//! leaf between its fork and its exec, `LOCAL_RANK` = i mod 2 its only variable. Each worker
//! writes its CLOCK_MONOTONIC at the start of its `main` and blocks on its stdin. A poller
//! thread reads each started worker's affinity (`sched_getaffinity`) every 50 µs. Per process:
//! **placed**, from just before its spawn to the first poll that sees its worker's CPUs (the
//! container registered); **off**, from just before its spawn to its `main` (the container not
//! registered: `rank_placement: off`); the rounds alternate, and placed/off is the ratio. **after
//! main**: in the placed rounds, from the worker's `main` to the poll that saw it placed (0 where
//! it was placed before its `main` ran): the wait a running process has for its CPUs, to within
//! the poll's period. Not included: containerd, the
//! runtime and the NRI round trip (the container is registered directly), the rest of the
//! daemon's threads. Then the watcher thread's CPU time (`/proc/self/task/<tid>/stat`) over
//! `--idle` seconds with the container registered and no worker starting, while the host runs
//! whatever else it runs (each exec on the host is looked at).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cpuplan::CpuSet;
use cpuplan_hook::fuzzing::{cpus_of_affinity, spawn_rank_watcher, GpuId, RankEntry, Ranks};
use nix::sched::sched_getaffinity;
use nix::unistd::Pid;

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The worker: its start time on stdout, then wait for stdin's end.
fn worker() -> ! {
    let t = now_ns();
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{t}");
    let _ = out.flush();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    std::process::exit(0)
}

/// The cgroup leaf the workers start in; removed at drop, after its processes are gone.
struct Leaf {
    dir: std::path::PathBuf,
    name: String,
}

impl Leaf {
    fn new() -> Leaf {
        let root = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .find(|r| {
                std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
                    m.lines()
                        .any(|l| l.split(' ').nth(1) == Some(*r) && l.contains(" cgroup2 "))
                })
            })
            .expect("a cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified");
        let name = format!("cpuplan-rank-bench-{}", std::process::id());
        let dir = std::path::Path::new(root).join(&name);
        std::fs::create_dir(&dir).expect("a new cgroup (run as root)");
        Leaf { dir, name }
    }
}

impl Drop for Leaf {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The workers of a round; killed and reaped at drop.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            drop(c.stdin.take());
        }
        for c in &mut self.0 {
            if c.wait_timeout_ms(2000).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

trait WaitTimeout {
    fn wait_timeout_ms(&mut self, ms: u64) -> Option<()>;
}

impl WaitTimeout for Child {
    fn wait_timeout_ms(&mut self, ms: u64) -> Option<()> {
        let until = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.try_wait() {
                return Some(());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }
}

/// One pending worker for the poller: pid, spawn time, wanted CPUs, and when it was seen placed.
type Pending = Arc<Mutex<Vec<(i32, u64, CpuSet, Option<u64>)>>>;

/// One round of `n` workers: per process (spawn → main, spawn → placed where `placed_on`).
fn round(
    exe: &std::path::Path,
    procs: &std::ffi::CString,
    n: usize,
    want: &[CpuSet; 2],
    placed_on: bool,
) -> (Vec<u64>, Vec<Option<u64>>) {
    let pending: Pending = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let stop = Arc::new(AtomicBool::new(false));
    let poller = placed_on.then(|| {
        let (pending, stop) = (Arc::clone(&pending), Arc::clone(&stop));
        std::thread::spawn(move || loop {
            let done = stop.load(Ordering::Acquire);
            let mut all = true;
            for (pid, _, want, seen) in pending.lock().unwrap().iter_mut() {
                if seen.is_none() {
                    let t = now_ns();
                    match sched_getaffinity(Pid::from_raw(*pid)) {
                        Ok(s) if cpus_of_affinity(&s) == *want => *seen = Some(t),
                        _ => all = false,
                    }
                }
            }
            if done && all {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        })
    });
    let mut workers = Workers(Vec::with_capacity(n));
    let mut t0 = Vec::with_capacity(n);
    for i in 0..n {
        let procs = procs.clone();
        let mut cmd = Command::new(exe);
        cmd.arg("--rank-worker")
            .env_clear()
            .env("LOCAL_RANK", (i % 2).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        // SAFETY: only open, write and close between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                libc::close(fd);
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let t = now_ns();
        let child = cmd.spawn().expect("a worker");
        t0.push(t);
        pending
            .lock()
            .unwrap()
            .push((child.id() as i32, t, want[i % 2].clone(), None));
        workers.0.push(child);
    }
    let mut started = Vec::with_capacity(n);
    for (c, t) in workers.0.iter_mut().zip(&t0) {
        let mut line = String::new();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        out.read_line(&mut line).expect("a worker's start time");
        started.push(line.trim().parse::<u64>().expect("a time") - t);
    }
    let placed = if let Some(p) = poller {
        // Bounded: a worker not placed in a second counts as not placed.
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until && pending.lock().unwrap().iter().any(|p| p.3.is_none()) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let out = pending
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t, _, seen)| seen.map(|s| s.saturating_sub(*t)))
            .collect();
        // Every entry marked, so that the poller ends.
        for e in pending.lock().unwrap().iter_mut() {
            e.3.get_or_insert(0);
        }
        stop.store(true, Ordering::Release);
        p.join().unwrap();
        out
    } else {
        vec![None; n]
    };
    drop(workers);
    (started, placed)
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1e6
}

fn ticks_of(tid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // utime and stime: fields 14 and 15, here 11 and 12 after the state (field 3).
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--rank-worker") {
        worker();
    }
    let opt = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.parse().expect("a number"))
            .unwrap_or(default)
    };
    let rounds = opt("--rounds", 40) as usize;
    let idle = opt("--idle", 30);
    let exe = std::env::current_exe().unwrap();

    let mask = cpus_of_affinity(&sched_getaffinity(Pid::from_raw(0)).unwrap());
    let cpus: Vec<usize> = mask.iter().collect();
    assert!(
        cpus.len() >= 2,
        "two CPUs are needed, this process has {mask}"
    );
    let one = |c: usize| {
        let mut s = CpuSet::new();
        s.insert(c);
        s
    };
    let want = [one(cpus[0]), one(cpus[1])];
    let leaf = Leaf::new();
    let procs = std::ffi::CString::new(
        leaf.dir
            .join("cgroup.procs")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    let gpu = |a: &str| GpuId {
        address: a.into(),
        uuid: None,
    };
    let entry = || {
        RankEntry::new(
            "bench",
            vec![gpu("0000:3b:00.0"), gpu("0000:86:00.0")],
            vec![Some(want[0].clone()), Some(want[1].clone())],
            vec![leaf.name.clone()],
        )
    };
    let ranks = Arc::new(Ranks::default());
    spawn_rank_watcher(Arc::clone(&ranks));
    // The watcher's socket is open once a registered worker is placed.
    ranks.add(entry());
    let warm = round(&exe, &procs, 2, &want, true);
    assert!(
        warm.1.iter().all(Option::is_some),
        "the watcher places no worker (the proc connector needs root)"
    );
    let tid = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .map(|t| t.file_name().to_string_lossy().into_owned())
        .find(|t| {
            std::fs::read_to_string(format!("/proc/self/task/{t}/comm"))
                .is_ok_and(|c| c.trim() == "cpuplan-ranks")
        })
        .expect("the watcher thread");

    println!(
        "rank placement: workers on CPU {} and {}, load {}",
        cpus[0],
        cpus[1],
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!("procs   off p50     p99 |  placed p50    p99 | placed/off p50 p99 | after main p50 p99 | not placed");
    for n in [1usize, 8, 64] {
        let r = (rounds * 8 / n).max(4);
        let (mut off, mut on, mut after, mut missed) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for k in 0..2 * r {
            let placed_on = k % 2 == 0;
            if placed_on {
                ranks.add(entry());
            } else {
                ranks.remove("bench");
            }
            let (started, placed) = round(&exe, &procs, n, &want, placed_on);
            if placed_on {
                for (s, p) in started.iter().zip(&placed) {
                    match p {
                        Some(p) => {
                            on.push(*p);
                            after.push(p.saturating_sub(*s));
                        }
                        None => missed += 1,
                    }
                }
            } else {
                off.extend(started);
            }
        }
        let (o50, o99) = (pct(&mut off, 0.5), pct(&mut off, 0.99));
        let (p50, p99) = (pct(&mut on, 0.5), pct(&mut on, 0.99));
        let (a50, a99) = (pct(&mut after, 0.5), pct(&mut after, 0.99));
        println!(
            "{n:5} {o50:7.3} {o99:7.3} ms | {p50:7.3} {p99:7.3} ms | {:6.3} {:6.3} | {a50:7.3} {a99:7.3} ms | {missed} of {}",
            p50 / o50,
            p99 / o99,
            on.len() + missed
        );
    }

    ranks.add(entry());
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let before = ticks_of(&tid);
    let wall = Instant::now();
    std::thread::sleep(Duration::from_secs(idle));
    let used = (ticks_of(&tid) - before) as f64 / hz;
    println!(
        "idle: the watcher thread used {:.2} s of CPU in {:.1} s ({:.3} %), load {}",
        used,
        wall.elapsed().as_secs_f64(),
        100.0 * used / wall.elapsed().as_secs_f64(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}
