//! Threads that start on the process mask, whatever their creator's mask.
//!
//! A new thread starts with its creator's CPU mask, so a thread or pool that a
//! pinned thread starts would share its CPU. [`spawn`] and [`Builder`] start
//! theirs on the process mask; [`on_process_mask`] is what any other pool's start
//! handler calls (for rayon: `ThreadPoolBuilder::start_handler(|_| { on_process_mask(); })`).

use std::io;
use std::thread::JoinHandle;

use cpuplan::CpuSet;

use crate::affinity::set_thread_affinity;
use crate::error::Result;
use crate::state::process_mask;

/// Moves the calling thread onto the process mask; returns the mask.
pub fn on_process_mask() -> Result<CpuSet> {
    let mask = process_mask();
    set_thread_affinity(&mask)?;
    Ok(mask)
}

/// [`std::thread::spawn`] for a thread that moves onto the process mask before it runs `f`.
///
/// Panics, as `std::thread::spawn` does, if the OS cannot create a thread; [`Builder::spawn`] returns the error.
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new()
        .spawn(f)
        .expect("failed to spawn thread (as std::thread::spawn)")
}

/// [`std::thread::Builder`] for threads that move onto the process mask before they run their closure.
#[derive(Debug)]
pub struct Builder {
    inner: std::thread::Builder,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// A builder with the standard library's defaults.
    pub fn new() -> Self {
        Builder {
            inner: std::thread::Builder::new(),
        }
    }

    /// Names the thread.
    pub fn name(self, name: String) -> Self {
        Builder {
            inner: self.inner.name(name),
        }
    }

    /// Sets the thread's stack size in bytes.
    pub fn stack_size(self, size: usize) -> Self {
        Builder {
            inner: self.inner.stack_size(size),
        }
    }

    /// Starts the thread; it moves onto the process mask (as of this call), then runs `f`.
    ///
    /// If the kernel refuses the move, the thread logs a warning and runs `f` where it is.
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let mask = process_mask();
        self.inner.spawn(move || {
            if let Err(e) = set_thread_affinity(&mask) {
                log::warn!("cpuplan: a new thread stays on its creator's cpus: {e}");
            }
            f()
        })
    }
}
