//! `cpuplan-hook`: the OCI hook binary and its command line.
//!
//! `no_main`: the C `main` below is the entry point, so Rust's runtime start-up (`lang_start`)
//! does not run at every container start: it costs a read of `/proc/self/maps` (glibc's
//! `pthread_getattr_np` for the main thread's stack guard), an alternate signal stack and two
//! signal handlers, about an eighth of poststop's instructions. What of it the hook needs is
//! done here: fds 0, 1 and 2 are opened on `/dev/null` where they are closed (so no file the
//! hook opens becomes its stdout or stderr), and `SIGPIPE` is ignored (a closed pipe is an
//! error, not a kill). A stack overflow is then a plain `SIGSEGV`, without Rust's message.
#![no_main]

use std::io::Write;

use cpuplan_hook::{escape, main_with, CliError, Exit};

/// The allocator: dlmalloc behind a one-flag lock ([`cpuplan_hook::heap`]), not the C library's.
/// The shipped binary is linked statically against musl (scripts/build-static.sh), whose
/// allocator returns memory to the kernel as it frees (`munmap`, `madvise`): with it a
/// createRuntime took 1.13× the glibc build's time, with dlmalloc 0.87×, and the NRI plugin's
/// CreateContainer p50 1.34× (docs/performance.md, the allocator).
#[global_allocator]
static ALLOC: cpuplan_hook::heap::Heap = cpuplan_hook::heap::Heap::new();

/// The process's entry point (see the module's comment).
///
/// # Safety
/// Called by the C runtime only, with the process's `argc` and `argv`.
#[no_mangle]
pub unsafe extern "C" fn main(
    argc: nix::libc::c_int,
    argv: *const *const nix::libc::c_char,
) -> nix::libc::c_int {
    start_up();
    // SAFETY: the C runtime passes argc and argv as the kernel laid them out (this function's
    // contract): argc pointers to NUL-terminated strings, which live as long as the process.
    let code = match unsafe { words_of(argc, argv) } {
        Ok(words) => run(words),
        Err(e) => {
            eprintln!("cpuplan-hook: {e}");
            2
        }
    };
    let _ = std::io::stdout().flush();
    nix::libc::c_int::from(code)
}

/// What Rust's runtime start-up did that the hook needs: fds 0-2 open, `SIGPIPE` ignored.
fn start_up() {
    use nix::libc;
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: poll reads and writes the three pollfd structs it is given; open and signal
    // take a NUL-terminated path and a handler constant.
    unsafe {
        let polled = libc::poll(fds.as_mut_ptr(), 3, 0) >= 0;
        for pfd in &fds {
            let closed = if polled {
                pfd.revents & libc::POLLNVAL != 0
            } else {
                libc::fcntl(pfd.fd, libc::F_GETFD) == -1
            };
            if closed && libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) != pfd.fd {
                libc::abort();
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// The command line's words after the program's name, from `main`'s `argv`. Not
/// `std::env::args`, which has no words under `no_main` with musl (glibc alone passes them to
/// the binary's initialisers); a word that is not UTF-8 is an error naming it.
///
/// # Safety
/// `argv` holds `argc` valid pointers to NUL-terminated strings.
unsafe fn words_of(
    argc: nix::libc::c_int,
    argv: *const *const nix::libc::c_char,
) -> Result<Vec<String>, String> {
    let n = usize::try_from(argc).unwrap_or(0);
    (1..n)
        .map(|i| {
            // SAFETY: i < argc, so argv[i] is one of the caller's strings.
            let word = unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) };
            word.to_str().map(str::to_owned).map_err(|_| {
                format!(
                    "argument {i} is not UTF-8: {}",
                    escape(&word.to_string_lossy())
                )
            })
        })
        .collect()
}

/// The command line run, its exit status.
fn run(mut words: Vec<String>) -> u8 {
    // The release profile unwinds panics (for the shim's C ABI); this binary stops at its first
    // panic, in any thread (an NRI plugin thread too), after the usual message, except in the
    // runtime's stages, which catch it to fail open (cli::PANIC_ABORTS).
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        if cpuplan_hook::panic_aborts() {
            std::process::abort();
        }
    }));
    if cpuplan_hook::nri::launched_by_runtime(&words) {
        words.push("nri".into()); // launched by an NRI runtime from its plugin directory
    }
    let mut out = std::io::stdout().lock();
    // Not `std::io::stdin().is_terminal()`: `stdin()` allocates its 8 KiB buffer, which the
    // runtime's stages (they read the state from fd 0 unbuffered) never use.
    let ran = main_with(words, &mut out, nix::unistd::isatty(0).unwrap_or(false));
    let _ = out.flush();
    match ran {
        Ok(Exit::Ok) => 0,
        Ok(Exit::Code(c)) => c,
        Err(e) => {
            let typed = e.downcast_ref::<CliError>();
            if let Some(CliError::Usage(_)) = typed {
                // The usage text spans lines on purpose.
                eprintln!("cpuplan-hook: {e}");
            } else {
                // Errors may quote what a container supplied: one line, whatever it holds.
                eprintln!("cpuplan-hook: {}", escape(&e.to_string()));
            }
            typed.map_or(1, CliError::exit_code)
        }
    }
}
