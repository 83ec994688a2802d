//! `cpuplan-hook`'s allocator: dlmalloc behind a lock of one atomic flag.
//!
//! The shipped binary is linked statically against musl, whose own allocator returns memory
//! to the kernel as it frees (`munmap`, `madvise`); dlmalloc keeps it (docs/performance.md,
//! the allocator). dlmalloc's own global allocator (its `global` feature) takes a
//! pthread mutex around every call, and musl's mutex costs a locked compare-exchange to take and
//! a locked swap with a check for waiters to release: 5.7 % of a createRuntime's user time, more
//! than dlmalloc's own `malloc` and `free`, for about a thousand allocator calls on one thread
//! (a `perf record` of 400 createRuntime spawns). [`Heap`] takes its flag with one
//! compare-exchange and releases it with a plain store. A thread that finds it taken (the NRI
//! plugin runs a few) spins a little, then gives up its CPU until the holder, which holds it for
//! one dlmalloc call, has let it go.
//!
//! Fork: a child forked while another thread holds the flag would wait for ever at its first
//! allocation. Nothing here allocates between `fork` and `exec` (std's `Command` does not, and
//! the installer's one `pre_exec` calls only `chroot` and `chdir`).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// dlmalloc with its lock (see the module's comment).
pub struct Heap {
    taken: AtomicBool,
    dl: UnsafeCell<dlmalloc::Dlmalloc>,
}

// SAFETY: `dl` is reached only by `with`, which holds `taken` (an acquire-release lock) for the
// whole of each use, so no two threads ever touch it at once.
unsafe impl Sync for Heap {}

impl Heap {
    /// An empty heap: dlmalloc asks the kernel for memory at the first allocation.
    pub const fn new() -> Heap {
        Heap {
            taken: AtomicBool::new(false),
            dl: UnsafeCell::new(dlmalloc::Dlmalloc::new()),
        }
    }

    /// Runs `f` on dlmalloc with the lock held. Never inlined: the allocator's calls would
    /// otherwise be inlined, dlmalloc's and all, into every allocation and drop of the program
    /// (thin LTO did: 750 KB more text, and more of it touched at every start).
    #[inline(never)]
    fn with<R>(&self, f: impl FnOnce(&mut dlmalloc::Dlmalloc) -> R) -> R {
        if self
            .taken
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.wait();
        }
        // SAFETY: the lock is held (above), so this is the only reference to `dl`.
        let out = f(unsafe { &mut *self.dl.get() });
        self.taken.store(false, Ordering::Release);
        out
    }

    /// Takes the lock another thread holds: a short spin (the holder is in one dlmalloc call),
    /// then `sched_yield` until it is free (the holder may be waiting for this CPU).
    #[cold]
    fn wait(&self) {
        let mut spins = 0u32;
        loop {
            while self.taken.load(Ordering::Relaxed) {
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if self
                .taken
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

impl Default for Heap {
    fn default() -> Heap {
        Heap::new()
    }
}

// SAFETY: each call is dlmalloc's own, made with the lock held, with the layout the caller gave
// (dlmalloc honours the size and alignment it is asked for, and returns null when out of memory).
unsafe impl GlobalAlloc for Heap {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.with(|dl| unsafe { dl.malloc(layout.size(), layout.align()) })
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.with(|dl| unsafe { dl.free(ptr, layout.size(), layout.align()) })
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.with(|dl| unsafe { dl.calloc(layout.size(), layout.align()) })
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.with(|dl| unsafe { dl.realloc(ptr, layout.size(), layout.align(), new_size) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_that_share_it_never_get_the_same_block() {
        static HEAP: Heap = Heap::new();
        let layout = Layout::from_size_align(48, 16).unwrap();
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for round in 0..2000usize {
                        // SAFETY: a non-zero layout; each block is written within it and freed once.
                        unsafe {
                            let p = HEAP.alloc(layout);
                            assert!(!p.is_null());
                            assert_eq!(p as usize % 16, 0);
                            std::ptr::write_bytes(p, t, 48);
                            held.push(p as usize);
                            if round % 3 == 2 {
                                let q = held.swap_remove(round % held.len()) as *mut u8;
                                assert!((0..48).all(|i| *q.add(i) == t), "a block was shared");
                                HEAP.dealloc(q, layout);
                            }
                        }
                    }
                    for p in held {
                        // SAFETY: a block of this layout from this heap, freed once.
                        unsafe {
                            let p = p as *mut u8;
                            assert!((0..48).all(|i| *p.add(i) == t), "a block was shared");
                            HEAP.dealloc(p, layout);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_and_zeroed_is_zero() {
        static HEAP: Heap = Heap::new();
        let small = Layout::from_size_align(16, 8).unwrap();
        // SAFETY: layouts of non-zero size; each block is used within its size and freed once.
        unsafe {
            let p = HEAP.alloc(small);
            std::ptr::copy_nonoverlapping(b"0123456789abcdef".as_ptr(), p, 16);
            let q = HEAP.realloc(p, small, 4096);
            assert_eq!(std::slice::from_raw_parts(q, 16), b"0123456789abcdef");
            HEAP.dealloc(q, Layout::from_size_align(4096, 8).unwrap());
            let big = Layout::from_size_align(1 << 20, 64).unwrap();
            let z = HEAP.alloc_zeroed(big);
            assert_eq!(z as usize % 64, 0);
            assert!(std::slice::from_raw_parts(z, 1 << 20)
                .iter()
                .all(|b| *b == 0));
            HEAP.dealloc(z, big);
        }
    }
}
