//! The calling thread's CPU affinity: `sched_getaffinity` / `sched_setaffinity` on thread 0 (the caller).

use std::path::Path;

use cpuplan::{CpuSet, MAX_CPU};
use nix::libc;

use crate::error::{Result, ShimError};

/// Words in a mask buffer: room for CPUs 0 to [`MAX_CPU`].
const WORDS: usize = (MAX_CPU + 1) / 64;

/// The CPUs the calling thread may run on.
pub fn thread_affinity() -> Result<CpuSet> {
    let mut words = [0u64; WORDS];
    // SAFETY: `words` is a live, writable buffer of exactly `size_of_val(&words)` bytes, and
    // the kernel writes at most that many; pid 0 names the calling thread.
    let rc = unsafe {
        libc::sched_getaffinity(
            0,
            std::mem::size_of_val(&words),
            words.as_mut_ptr().cast::<libc::cpu_set_t>(),
        )
    };
    if rc != 0 {
        return Err(ShimError::GetAffinity(std::io::Error::last_os_error()));
    }
    Ok(words_to_set(&words))
}

/// Confines the calling thread to `cpus` (the kernel drops CPUs outside the cgroup's cpuset).
pub fn set_thread_affinity(cpus: &CpuSet) -> Result<()> {
    if cpus.is_empty() {
        return Err(ShimError::EmptyCpus);
    }
    let words = set_to_words(cpus);
    // SAFETY: `words` is a live buffer of exactly `size_of_val(&words)` bytes that the kernel
    // only reads; pid 0 names the calling thread.
    let rc = unsafe {
        libc::sched_setaffinity(
            0,
            std::mem::size_of_val(&words),
            words.as_ptr().cast::<libc::cpu_set_t>(),
        )
    };
    if rc != 0 {
        return Err(ShimError::SetAffinity {
            cpus: cpus.clone(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The calling thread's kernel thread id (what `/proc/self/task/<tid>` names).
pub fn thread_id() -> i32 {
    nix::unistd::gettid().as_raw()
}

/// The CPUs thread `tid` of this process may run on, from `/proc/self/task/<tid>/status`.
pub fn task_cpus(tid: i32) -> Result<CpuSet> {
    let path = Path::new("/proc/self/task")
        .join(tid.to_string())
        .join("status");
    let text = std::fs::read_to_string(&path).map_err(|source| ShimError::Io {
        path: path.clone(),
        source,
    })?;
    cpus_allowed_list(&text).ok_or_else(|| ShimError::Var {
        source_name: path.display().to_string(),
        name: "Cpus_allowed_list".into(),
        value: text
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list"))
            .unwrap_or("")
            .into(),
        what: "missing or not a cpu list".into(),
    })
}

/// The `Cpus_allowed_list:` of a `/proc/<pid>/status` text; `None` if absent or malformed.
pub fn cpus_allowed_list(status: &str) -> Option<CpuSet> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|v| cpuplan::parse_cpu_list(v.trim()).ok())
}

fn words_to_set(words: &[u64]) -> CpuSet {
    let mut set = CpuSet::new();
    for (w, &bits) in words.iter().enumerate() {
        for b in 0..64 {
            if bits & (1u64 << b) != 0 {
                set.insert(w * 64 + b);
            }
        }
    }
    set
}

fn set_to_words(cpus: &CpuSet) -> [u64; WORDS] {
    let mut words = [0u64; WORDS];
    for cpu in cpus {
        words[cpu / 64] |= 1u64 << (cpu % 64);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_high_cpus() {
        let set = cpuplan::parse_cpu_list("0,63-64,1023,8191").unwrap();
        let words = set_to_words(&set);
        assert_eq!(words[0], 1 | (1 << 63));
        assert_eq!(words[1], 1);
        assert_eq!(words[127], 1 << 63);
        assert_eq!(words_to_set(&words), set);
    }

    #[test]
    fn reads_cpus_allowed_list_from_status() {
        let status = "Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1,4\nMems_allowed:\t1\n";
        assert_eq!(
            cpus_allowed_list(status),
            Some(cpuplan::parse_cpu_list("0-1,4").unwrap())
        );
        assert_eq!(cpus_allowed_list("Name:\tx\n"), None);
        assert_eq!(cpus_allowed_list("Cpus_allowed_list:\tzz\n"), None);
    }

    #[test]
    fn empty_set_is_refused() {
        assert!(matches!(
            set_thread_affinity(&CpuSet::new()),
            Err(ShimError::EmptyCpus)
        ));
    }

    #[test]
    fn own_affinity_matches_proc() {
        let mine = thread_affinity().unwrap();
        assert!(!mine.is_empty());
        assert_eq!(task_cpus(thread_id()).unwrap(), mine);
    }
}
