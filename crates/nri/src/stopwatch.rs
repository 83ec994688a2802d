//! How long a request took on the thread that answered it: the wall clock, the thread's own
//! CPU time (`CLOCK_THREAD_CPUTIME_ID`), how often the kernel took the CPU away from it
//! meanwhile (involuntary context switches) and how often it gave the CPU up itself (voluntary
//! ones: a lock, a blocking call). On a busy machine the wall clock holds the waits for a CPU;
//! the CPU time and the switches say how much of it was the plugin's own work.

use std::fmt;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use nix::time::{clock_gettime, ClockId};

/// The thread's CPU time so far, and its involuntary and voluntary context switches.
/// (`getrusage`'s own times are only as fresh as the last tick for a running thread: the
/// CPU time is the thread's CPU clock.)
fn thread_usage() -> Option<(Duration, i64, i64)> {
    let cpu = Duration::from(clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).ok()?);
    let u = getrusage(UsageWho::RUSAGE_THREAD).ok()?;
    Some((
        cpu,
        u.involuntary_context_switches() as i64,
        u.voluntary_context_switches() as i64,
    ))
}

/// Started on the thread that answers a request; read on the same thread.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch {
    wall: Instant,
    usage: Option<(Duration, i64, i64)>,
}

/// What a [`Stopwatch`] measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Took {
    /// Wall-clock milliseconds.
    pub wall_ms: f64,
    /// Milliseconds this thread ran on a CPU (`None`: the kernel did not say).
    pub cpu_ms: Option<f64>,
    /// How often another task took the CPU from this thread meanwhile.
    pub preempted: Option<i64>,
    /// How often this thread gave up the CPU itself meanwhile (waited on a lock or a call).
    pub blocked: Option<i64>,
}

impl Stopwatch {
    /// Starts now, on this thread.
    pub fn start() -> Stopwatch {
        Stopwatch {
            usage: thread_usage(),
            wall: Instant::now(),
        }
    }

    /// The time since [`Stopwatch::start`] (call it on the same thread).
    pub fn took(&self) -> Took {
        let wall_ms = self.wall.elapsed().as_secs_f64() * 1e3;
        let now = thread_usage();
        let (cpu_ms, preempted, blocked) = match (self.usage, now) {
            (Some((c0, i0, v0)), Some((c1, i1, v1))) => (
                Some(c1.saturating_sub(c0).as_secs_f64() * 1e3),
                Some(i1 - i0),
                Some(v1 - v0),
            ),
            _ => (None, None, None),
        };
        Took {
            wall_ms,
            cpu_ms,
            preempted,
            blocked,
        }
    }
}

impl fmt::Display for Took {
    /// `0.812 ms (on CPU 0.640 ms, preempted 0 times, blocked 0 times)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} ms", self.wall_ms)?;
        if let (Some(cpu), Some(p), Some(b)) = (self.cpu_ms, self.preempted, self.blocked) {
            write!(
                f,
                " (on CPU {cpu:.3} ms, preempted {p} times, blocked {b} times)"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_counts_work_and_not_sleep() {
        let w = Stopwatch::start();
        std::thread::sleep(Duration::from_millis(30));
        let slept = w.took();
        assert!(slept.wall_ms >= 30.0, "{slept}");
        let cpu = slept.cpu_ms.expect("Linux gives a thread's CPU time");
        assert!(cpu < 10.0, "asleep is not on CPU: {slept}");
        assert!(
            slept.blocked.unwrap() >= 1,
            "a sleep gives the CPU up: {slept}"
        );
        let w = Stopwatch::start();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let busy = w.took();
        assert!(busy.cpu_ms.unwrap() >= 5.0, "a busy loop is on CPU: {busy}");
        assert!(busy.preempted.unwrap() >= 0);
        let text = busy.to_string();
        assert!(
            text.contains(" ms (on CPU ")
                && text.contains(", preempted ")
                && text.ends_with(" times)"),
            "{text}"
        );
    }

    #[test]
    fn without_the_kernel_s_figures_only_the_wall_clock_is_shown() {
        let t = Took {
            wall_ms: 0.5,
            cpu_ms: None,
            preempted: None,
            blocked: None,
        };
        assert_eq!(t.to_string(), "0.500 ms");
    }
}
