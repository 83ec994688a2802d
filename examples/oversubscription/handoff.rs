//! A GPU worker's step as a benchmark: thread A wakes thread B, B wakes A, many times.
//!
//! A worker's main thread hands each step to its GPU thread and sleeps until the step comes
//! back; every hand-off wakes a sleeping thread. Where the woken thread runs decides the
//! cost: on the waker's own core (what the plan's `step_thread_core` pins, with the shim)
//! the wake-up is a context switch; on another CPU it takes an inter-processor interrupt,
//! and on a bare-metal host a far core may first have to leave a deep idle state.
//!
//! Three placements, alternated in rounds: both threads pinned to one core's CPUs (the
//! SMT siblings of the first CPU of the mask) with `cpuplan_shim::pin_thread`, A and B
//! pinned to two different cores, and both unpinned. Prints the median round trip of each.
//!
//! Usage: `handoff [--round-trips N] [--rounds N]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::Instant;

use cpuplan::CpuSet;

/// Where the two threads run.
#[derive(Clone)]
struct Placement {
    name: String,
    a: Option<CpuSet>,
    b: Option<CpuSet>,
}

/// One turn counter: odd = B's turn, even = A's turn.
struct Turn {
    n: AtomicU64,
}

/// Waits (parked, no spinning) until the counter reaches `want`.
fn wait_for(turn: &Turn, want: u64) {
    while turn.n.load(Ordering::Acquire) < want {
        std::thread::park();
    }
}

fn pin(cpus: &Option<CpuSet>, mask: &CpuSet) {
    if let Some(c) = cpus {
        cpuplan_shim::pin_thread(c, mask, || ()).unwrap_or_else(|e| {
            eprintln!("handoff: cannot pin to cpus {c}: {e}");
            std::process::exit(1)
        });
    }
}

/// `n` round trips between a fresh pair of threads placed as `p`; each round trip's time in µs.
fn run(p: &Placement, mask: &CpuSet, n: u64) -> Vec<f64> {
    let turn = Arc::new(Turn {
        n: AtomicU64::new(0),
    });
    let (tx, rx) = std::sync::mpsc::channel::<Thread>();
    let b = {
        let turn = turn.clone();
        let (cpus, mask) = (p.b.clone(), mask.clone());
        std::thread::spawn(move || {
            pin(&cpus, &mask);
            let a: Thread = rx.recv().unwrap();
            for i in 0..n {
                wait_for(&turn, 2 * i + 1);
                turn.n.store(2 * i + 2, Ordering::Release);
                a.unpark();
            }
        })
    };
    let (res, me) = {
        let turn = turn.clone();
        let (cpus, mask) = (p.a.clone(), mask.clone());
        let b_thread = b.thread().clone();
        let a = std::thread::spawn(move || {
            pin(&cpus, &mask);
            let mut out = Vec::with_capacity(n as usize);
            // Let B reach its first wait, so every hand-off wakes a sleeper.
            std::thread::sleep(std::time::Duration::from_millis(5));
            for i in 0..n {
                let t = Instant::now();
                turn.n.store(2 * i + 1, Ordering::Release);
                b_thread.unpark();
                wait_for(&turn, 2 * i + 2);
                out.push(t.elapsed().as_secs_f64() * 1e6);
            }
            out
        });
        let me = a.thread().clone();
        (a, me)
    };
    tx.send(me).unwrap();
    let out = res.join().unwrap();
    b.join().unwrap();
    out
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let mut round_trips = 20_000u64;
    let mut rounds = 5usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let v = args
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&v| v > 0);
        match (flag.as_str(), v) {
            ("--round-trips", Some(v)) => round_trips = v,
            ("--rounds", Some(v)) => rounds = v as usize,
            _ => {
                eprintln!("handoff: usage: handoff [--round-trips N] [--rounds N] (positive integers); got {flag:?}");
                std::process::exit(2);
            }
        }
    }
    let mask = cpuplan_shim::process_mask();
    let Some(first) = mask.first() else {
        eprintln!("handoff: the process mask is empty");
        std::process::exit(1);
    };
    let one_core = cpuplan::smt_siblings(std::path::Path::new("/"), first)
        .map(|s| s.intersection(&mask))
        .unwrap_or_else(|e| {
            eprintln!("handoff: {e}");
            std::process::exit(1)
        });
    // The first CPU of the mask on another core than `first`'s.
    let Some(other) = mask.iter().find(|c| !one_core.contains(*c)) else {
        eprintln!("handoff: the mask {mask} holds one core only; two different cores are needed");
        std::process::exit(1);
    };
    let single = |c: usize| {
        let mut s = CpuSet::new();
        s.insert(c);
        Some(s)
    };
    let placements = [
        Placement {
            name: format!("both on one core (cpus {one_core})"),
            a: Some(one_core.clone()),
            b: Some(one_core.clone()),
        },
        Placement {
            name: format!("two cores (cpu {first} and cpu {other})"),
            a: single(first),
            b: single(other),
        },
        Placement {
            name: format!("unpinned (mask {mask})"),
            a: None,
            b: None,
        },
    ];
    let mut all: Vec<Vec<f64>> = vec![Vec::new(); placements.len()];
    for r in 0..rounds {
        for k in 0..placements.len() {
            let k = (k + r) % placements.len();
            all[k].extend(run(&placements[k], &mask, round_trips));
        }
    }
    println!(
        "hand-off A wakes B, B wakes A: {rounds} rounds x {round_trips} round trips per placement"
    );
    for (p, v) in placements.iter().zip(&all) {
        println!(
            "  {:<40} median round trip {:7.2} us   p90 {:7.2} us   p99 {:7.2} us",
            p.name,
            percentile(v, 0.5),
            percentile(v, 0.9),
            percentile(v, 0.99)
        );
    }
}
