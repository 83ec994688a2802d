//! A fork-join workload (an intra-op pool's shape) run with a pool sized to the host and one sized by the plan.
//!
//! Every step is a serial part on the main thread, then a parallel part split evenly over
//! the pool, then a barrier. Idle pool threads spin for a while before they sleep, as
//! OpenMP's (`GOMP_SPINCOUNT`) and rayon's do. Under a cgroup CPU quota the spinning and the
//! extra threads burn quota the useful work needed, and the whole cgroup is throttled.
//!
//! `host` sizes the pool to the host's online CPUs (what `os.cpu_count()` and an OpenMP
//! runtime that ignores the quota use); `plan` to `RAYON_NUM_THREADS`, else `OMP_NUM_THREADS`,
//! as `plan.env` sets them (`left`). The two alternate in rounds; each round runs batches of
//! steps that span several CFS periods, so a batch's time per step includes the throttling.
//!
//! Usage: `oversubscription [--rounds N] [--batches N] [--batch-ms MS] [--serial-us US]
//! [--parallel-us US] [--spin-us US] [--host-threads N] [--plan-threads N]`

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The knobs, from the command line.
struct Opts {
    rounds: usize,
    batches: usize,
    batch: Duration,
    serial: Duration,
    parallel: Duration,
    spin: Duration,
    host_threads: Option<usize>,
    plan_threads: Option<usize>,
}

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts {
        rounds: 4,
        batches: 6,
        batch: Duration::from_millis(400),
        serial: Duration::from_micros(100),
        parallel: Duration::from_micros(200),
        spin: Duration::from_micros(200),
        host_threads: None,
        plan_threads: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |what: &str| -> Result<u64, String> {
            value
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0 || what == "--spin-us")
                .ok_or_else(|| format!("{what}: expected a positive integer, got {value:?}"))
        };
        match flag.as_str() {
            "--rounds" => o.rounds = num(&flag)? as usize,
            "--batches" => o.batches = num(&flag)? as usize,
            "--batch-ms" => o.batch = Duration::from_millis(num(&flag)?),
            "--serial-us" => o.serial = Duration::from_micros(num(&flag)?),
            "--parallel-us" => o.parallel = Duration::from_micros(num(&flag)?),
            "--spin-us" => o.spin = Duration::from_micros(num(&flag)?),
            "--host-threads" => o.host_threads = Some(num(&flag)? as usize),
            "--plan-threads" => o.plan_threads = Some(num(&flag)? as usize),
            _ => return Err(format!("unknown option {flag:?}")),
        }
    }
    Ok(o)
}

/// The host's online CPUs, as `os.cpu_count()` reports them (not the affinity, not the quota).
fn host_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { nix::libc::sysconf(nix::libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as usize
}

/// The pool size `plan.env` gives: `RAYON_NUM_THREADS`, else `OMP_NUM_THREADS`.
fn plan_threads() -> Result<usize, String> {
    for key in ["RAYON_NUM_THREADS", "OMP_NUM_THREADS"] {
        if let Ok(v) = std::env::var(key) {
            return v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{key}={v:?} is not a positive integer"));
        }
    }
    Err("neither RAYON_NUM_THREADS nor OMP_NUM_THREADS is set: \
         source /run/cpuplan/plan.env first, or pass --plan-threads"
        .into())
}

/// Busy work: `iters` steps of a dependent integer chain the compiler cannot skip.
fn spin_work(iters: u64) -> u64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x)
}

/// Iterations of [`spin_work`] per microsecond on this CPU (the fastest of a few tries).
fn calibrate() -> f64 {
    let iters = 200_000;
    let best = (0..5)
        .map(|_| {
            let t = Instant::now();
            spin_work(iters);
            t.elapsed()
        })
        .min()
        .unwrap();
    iters as f64 / (best.as_secs_f64() * 1e6)
}

/// A counter threads wait on: spin up to a budget, then sleep on a condvar until it passes a target.
struct Gate {
    value: AtomicU64,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Gate {
    fn new() -> Self {
        Gate {
            value: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Waits until the counter is at least `target`: spins for `spin`, then sleeps.
    fn wait(&self, target: u64, spin: Duration) {
        if self.value.load(Ordering::Acquire) >= target {
            return;
        }
        let start = Instant::now();
        while start.elapsed() < spin {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            if self.value.load(Ordering::Acquire) >= target {
                return;
            }
        }
        let mut guard = self.lock.lock().unwrap();
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        while self.value.load(Ordering::SeqCst) < target {
            guard = self.cv.wait(guard).unwrap();
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Adds `n` to the counter and wakes the sleepers when it reaches `wake_at`.
    fn add(&self, n: u64, wake_at: u64) {
        let now = self.value.fetch_add(n, Ordering::SeqCst) + n;
        if now >= wake_at && self.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock().unwrap();
            self.cv.notify_all();
        }
    }
}

/// A persistent fork-join pool of `threads` (the caller is one of them).
struct Pool {
    threads: usize,
    start: Arc<Gate>,
    done: Arc<Gate>,
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
    chunk_iters: u64,
    spin: Duration,
    step: u64,
}

impl Pool {
    fn new(threads: usize, parallel_iters: u64, spin: Duration) -> Pool {
        let chunk_iters = parallel_iters / threads as u64;
        let start = Arc::new(Gate::new());
        let done = Arc::new(Gate::new());
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (1..threads)
            .map(|_| {
                let (start, done, stop) = (start.clone(), done.clone(), stop.clone());
                let helpers = threads as u64 - 1;
                std::thread::spawn(move || {
                    let mut step = 0u64;
                    loop {
                        step += 1;
                        start.wait(step, spin);
                        if stop.load(Ordering::Acquire) {
                            return;
                        }
                        spin_work(chunk_iters);
                        done.add(1, step * helpers);
                    }
                })
            })
            .collect();
        Pool {
            threads,
            start,
            done,
            stop,
            handles,
            chunk_iters,
            spin,
            step: 0,
        }
    }

    /// One parallel part: every thread runs its chunk, the caller waits for all.
    fn run_step(&mut self) {
        self.step += 1;
        self.start.add(1, self.step);
        spin_work(self.chunk_iters);
        let helpers = self.threads as u64 - 1;
        if helpers > 0 {
            self.done.wait(self.step * helpers, self.spin);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.start.add(1, self.step + 1);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Per-step statistics of one pool over every round.
#[derive(Default)]
struct Stats {
    /// Per batch: wall time / steps, in µs.
    batch_step_us: Vec<f64>,
    /// Every single step's wall time, in µs.
    step_us: Vec<f64>,
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[((s.len() - 1) as f64 * p).round() as usize]
}

/// Runs `batches` batches of `batch` wall time each on a fresh pool of `threads`.
fn run_round(o: &Opts, threads: usize, iters_per_us: f64, stats: &mut Stats) {
    let serial_iters = (o.serial.as_secs_f64() * 1e6 * iters_per_us) as u64;
    let parallel_iters = (o.parallel.as_secs_f64() * 1e6 * iters_per_us) as u64;
    let mut pool = Pool::new(threads, parallel_iters, o.spin);
    // Warm up: the threads have started and run a few steps.
    for _ in 0..20 {
        spin_work(serial_iters);
        pool.run_step();
    }
    for _ in 0..o.batches {
        let t0 = Instant::now();
        let mut steps = 0u64;
        while t0.elapsed() < o.batch {
            let s = Instant::now();
            spin_work(serial_iters);
            pool.run_step();
            stats.step_us.push(s.elapsed().as_secs_f64() * 1e6);
            steps += 1;
        }
        stats
            .batch_step_us
            .push(t0.elapsed().as_secs_f64() * 1e6 / steps as f64);
    }
}

fn main() {
    let o = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("oversubscription: {e}");
            std::process::exit(2);
        }
    };
    let host = o.host_threads.unwrap_or_else(host_cpus);
    let plan = match o.plan_threads.map(Ok).unwrap_or_else(plan_threads) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("oversubscription: {e}");
            std::process::exit(2);
        }
    };
    let iters_per_us = calibrate();
    println!(
        "fork-join: serial {} us + parallel {} us of work per step, idle threads spin {} us then sleep; \
         {} rounds x {} batches of {} ms per pool",
        o.serial.as_micros(),
        o.parallel.as_micros(),
        o.spin.as_micros(),
        o.rounds,
        o.batches,
        o.batch.as_millis()
    );
    let (mut hs, mut ps) = (Stats::default(), Stats::default());
    for r in 0..o.rounds {
        // Alternate which pool goes first.
        if r % 2 == 0 {
            run_round(&o, host, iters_per_us, &mut hs);
            run_round(&o, plan, iters_per_us, &mut ps);
        } else {
            run_round(&o, plan, iters_per_us, &mut ps);
            run_round(&o, host, iters_per_us, &mut hs);
        }
    }
    let med = |v: &[f64]| percentile(v, 0.5);
    for (name, n, s) in [("host", host, &hs), ("plan", plan, &ps)] {
        println!(
            "  pool = {name} ({n:>3} threads): {:8.1} us per step (median over {} batches); single steps: median {:.1} us, p99 {:.1} us, max {:.1} us",
            med(&s.batch_step_us),
            s.batch_step_us.len(),
            med(&s.step_us),
            percentile(&s.step_us, 0.99),
            percentile(&s.step_us, 1.0),
        );
    }
    println!(
        "  host/plan: {:.2}x the time per step",
        med(&hs.batch_step_us) / med(&ps.batch_step_us)
    );
}
