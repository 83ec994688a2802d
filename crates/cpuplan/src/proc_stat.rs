//! A process's liveness: its state and start time from `/proc/<pid>/stat`.

use std::path::Path;

use crate::error::Error;
use crate::fsutil::{read_optional, under};

/// The start time (field 22 of `<root>/proc/<pid>/stat`, ticks since boot) of a process that
/// still runs; `None` if it is gone, or is a zombie (state `Z`) or dead (`X`) awaiting its reaper,
/// or if `pid` is the id of a thread that does not lead its thread group (`/proc/<tid>` answers
/// for any thread: such an id is no process's pid, though its start time may equal one).
pub fn live_start_time(root: &Path, pid: u32) -> Result<Option<u64>, Error> {
    let path = under(root, format!("/proc/{pid}/stat"));
    match read_optional(&path)? {
        None => Ok(None),
        Some(text) => match parse_stat(&text) {
            Some(('Z' | 'X' | 'x', _)) => Ok(None),
            Some(_) if is_other_thread(&text) => Ok(None),
            Some((_, start)) => Ok(Some(start)),
            None => Err(Error::malformed(
                &path,
                "no state (field 3) and start time (field 22) after the last ')'",
                text,
            )),
        },
    }
}

/// Whether a `/proc/<id>/stat` line is that of a thread other than its group's leader: field 38,
/// the exit signal, is -1 for those alone (the kernel gives every `CLONE_THREAD` child -1, and a
/// process any valid signal or 0). A line without field 38 (a planted host's) is a process's.
pub fn is_other_thread(stat: &str) -> bool {
    stat.rsplit_once(')')
        .and_then(|(_, after_comm)| after_comm.split_whitespace().nth(35))
        == Some("-1")
}

/// Field 3 (the state, `R`, `S`, `Z`…) and field 22 (the start time) of a `/proc/<pid>/stat`
/// line; the comm field may hold spaces and `)`, so fields count from the last `)`.
pub fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let (_, after_comm) = stat.rsplit_once(')')?;
    let mut fields = after_comm.split_whitespace();
    // After the comm come field 3 (state) onwards: field 22 is the 20th.
    let state = fields.next()?;
    let mut chars = state.chars();
    let (Some(state), None) = (chars.next(), chars.next()) else {
        return None;
    };
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}
