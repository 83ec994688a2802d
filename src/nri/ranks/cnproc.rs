//! The kernel's process events (the proc connector): a `NETLINK_CONNECTOR` socket bound to the
//! `CN_IDX_PROC` group, subscribed with `PROC_CN_MCAST_LISTEN`, delivering a message per fork,
//! exec and exit of every process of the host. It needs `CAP_NET_ADMIN` in the initial user
//! and network namespaces (a privileged DaemonSet on the host network); the pids are the
//! initial pid namespace's (host PID).
//!
//! The layouts are `linux/netlink.h`'s `nlmsghdr`, `linux/connector.h`'s `cn_msg` and
//! `linux/cn_proc.h`'s `proc_event` (native byte order), read field by field from the bytes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `CN_IDX_PROC` and `CN_VAL_PROC`: the proc connector's id.
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
/// `PROC_CN_MCAST_LISTEN`.
const MCAST_LISTEN: u32 = 1;
/// `NLMSG_DONE`: the type of every connector message.
const NLMSG_DONE: u16 = 3;
/// `sizeof(struct nlmsghdr)` and `sizeof(struct cn_msg)`.
const NLMSG_HDR: usize = 16;
const CN_MSG: usize = 20;
/// `proc_event.what` values.
const PROC_EVENT_FORK: u32 = 0x0000_0001;
const PROC_EVENT_EXEC: u32 = 0x0000_0002;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
/// The socket's receive buffer asked for: room for a burst of events while one is handled.
const RCVBUF: libc::c_int = 4 << 20;

/// One process event, with the host pids it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcEvent {
    /// A process or thread was made: `child_pid != child_tgid` for a thread.
    Fork {
        /// The parent's thread group (its process id).
        parent_tgid: i32,
        /// The child's thread id.
        child_pid: i32,
        /// The child's thread group.
        child_tgid: i32,
    },
    /// A process ran `execve`.
    Exec {
        /// Its process id.
        tgid: i32,
    },
    /// A thread exited (`pid == tgid`: the process's main thread).
    Exit {
        /// The thread.
        pid: i32,
        /// Its process.
        tgid: i32,
    },
}

/// What a receive gave.
#[derive(Debug)]
pub enum Received {
    /// The events of one datagram (any other kind of event left out).
    Events(Vec<ProcEvent>),
    /// The socket's buffer overran (`ENOBUFS`): events were lost.
    Overrun,
}

/// The subscribed socket.
#[derive(Debug)]
pub struct ProcConnector {
    fd: OwnedFd,
    buf: Vec<u8>,
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl ProcConnector {
    /// Opens, binds and subscribes the socket (fails without the privileges).
    pub fn open() -> io::Result<ProcConnector> {
        // SAFETY: plain socket calls on a descriptor this function owns; every pointer passed
        // is to a live local of the size given.
        let fd = unsafe {
            let raw = check(libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_CONNECTOR,
            ))?;
            OwnedFd::from_raw_fd(raw)
        };
        let size = RCVBUF;
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let ptr = (&size as *const libc::c_int).cast();
        // SAFETY: as above. SO_RCVBUFFORCE needs CAP_NET_ADMIN, which the socket needs anyway;
        // SO_RCVBUF (capped by the host's rmem_max) is the fallback.
        unsafe {
            if libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                ptr,
                len,
            ) < 0
            {
                let _ =
                    libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, ptr, len);
            }
            // A receive returns at least once a second, events or not.
            let timeout = libc::timeval {
                tv_sec: 1,
                tv_usec: 0,
            };
            let _ = libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
            addr.nl_groups = CN_IDX_PROC;
            check(libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            ))?;
        }
        let msg = subscribe_message();
        // SAFETY: `msg` is a live buffer of its length.
        let sent = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ProcConnector {
            fd,
            buf: vec![0; 64 << 10],
        })
    }

    /// Waits (at most a second) for the next datagram and parses it: no event when none came.
    pub fn receive(&mut self) -> io::Result<Received> {
        loop {
            // SAFETY: `buf` is a live buffer of its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n >= 0 {
                return Ok(Received::Events(parse(&self.buf[..n as usize])));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(Received::Events(Vec::new())),
                Some(libc::ENOBUFS) => return Ok(Received::Overrun),
                _ => return Err(e),
            }
        }
    }
}

/// The `nlmsghdr` + `cn_msg` + `PROC_CN_MCAST_LISTEN` message that subscribes.
fn subscribe_message() -> Vec<u8> {
    let total = NLMSG_HDR + CN_MSG + 4;
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_ne_bytes()); // nlmsg_len
    m.extend_from_slice(&NLMSG_DONE.to_ne_bytes()); // nlmsg_type
    m.extend_from_slice(&0u16.to_ne_bytes()); // nlmsg_flags
    m.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid (the kernel fills it)
    m.extend_from_slice(&CN_IDX_PROC.to_ne_bytes()); // id.idx
    m.extend_from_slice(&CN_VAL_PROC.to_ne_bytes()); // id.val
    m.extend_from_slice(&0u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // ack
    m.extend_from_slice(&4u16.to_ne_bytes()); // len
    m.extend_from_slice(&0u16.to_ne_bytes()); // flags
    m.extend_from_slice(&MCAST_LISTEN.to_ne_bytes());
    m
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The fork, exec and exit events of one datagram (its netlink messages, each a `cn_msg` of
/// the proc connector holding one `proc_event`); anything short or of another kind is skipped.
pub fn parse(datagram: &[u8]) -> Vec<ProcEvent> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDR <= datagram.len() {
        let Some(len) = u32_at(datagram, at).map(|l| l as usize) else {
            break;
        };
        if len < NLMSG_HDR || at + len > datagram.len() {
            break;
        }
        let msg = &datagram[at + NLMSG_HDR..at + len];
        if let Some(e) = event(msg) {
            out.push(e);
        }
        // NLMSG_ALIGN: messages are 4-byte aligned.
        at += (len + 3) & !3;
    }
    out
}

/// The event of one `cn_msg`, if it is the proc connector's fork, exec or exit.
fn event(cn: &[u8]) -> Option<ProcEvent> {
    if u32_at(cn, 0)? != CN_IDX_PROC || u32_at(cn, 4)? != CN_VAL_PROC {
        return None;
    }
    // proc_event: what (4), cpu (4), timestamp_ns (8), then the event's data.
    let ev = cn.get(CN_MSG..)?;
    let data = 16;
    match u32_at(ev, 0)? {
        PROC_EVENT_FORK => Some(ProcEvent::Fork {
            parent_tgid: i32_at(ev, data + 4)?,
            child_pid: i32_at(ev, data + 8)?,
            child_tgid: i32_at(ev, data + 12)?,
        }),
        PROC_EVENT_EXEC => Some(ProcEvent::Exec {
            tgid: i32_at(ev, data + 4)?,
        }),
        PROC_EVENT_EXIT => Some(ProcEvent::Exit {
            pid: i32_at(ev, data)?,
            tgid: i32_at(ev, data + 4)?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram of one netlink message holding a proc event `what` with `fields`.
    fn datagram(what: u32, fields: &[i32]) -> Vec<u8> {
        let mut ev = Vec::new();
        ev.extend_from_slice(&what.to_ne_bytes());
        ev.extend_from_slice(&0u32.to_ne_bytes());
        ev.extend_from_slice(&0u64.to_ne_bytes());
        for f in fields {
            ev.extend_from_slice(&f.to_ne_bytes());
        }
        let mut m = subscribe_message();
        m.truncate(NLMSG_HDR + CN_MSG);
        m.extend_from_slice(&ev);
        let len = m.len() as u32;
        m[..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    #[test]
    fn fork_exec_and_exit_are_read_and_the_rest_skipped() {
        let mut all = datagram(PROC_EVENT_FORK, &[10, 10, 11, 11]);
        while !all.len().is_multiple_of(4) {
            all.push(0);
        }
        all.extend(datagram(PROC_EVENT_EXEC, &[11, 11]));
        all.extend(datagram(0x200, &[11, 11])); // comm: skipped
        all.extend(datagram(PROC_EVENT_EXIT, &[12, 11, 0, 0, 10, 10]));
        assert_eq!(
            parse(&all),
            [
                ProcEvent::Fork {
                    parent_tgid: 10,
                    child_pid: 11,
                    child_tgid: 11
                },
                ProcEvent::Exec { tgid: 11 },
                ProcEvent::Exit { pid: 12, tgid: 11 },
            ]
        );
    }

    #[test]
    fn the_kernel_s_exec_event_of_a_child_arrives() {
        // As root (the tests run as root): the real socket.
        let mut socket = ProcConnector::open().expect("the proc connector (run as root)");
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let (mut forked, mut execed) = (false, false);
        for _ in 0..10_000 {
            if let Received::Events(events) = socket.receive().unwrap() {
                for e in events {
                    match e {
                        ProcEvent::Fork { child_tgid, .. } if child_tgid == pid => forked = true,
                        ProcEvent::Exec { tgid } if tgid == pid => execed = true,
                        _ => {}
                    }
                }
            }
            if forked && execed {
                break;
            }
        }
        assert!(
            forked && execed,
            "fork {forked}, exec {execed} of pid {pid}"
        );
        let _ = child.wait_with_output();
    }

    #[test]
    fn short_and_lying_datagrams_are_no_events() {
        let good = datagram(PROC_EVENT_EXEC, &[11, 11]);
        for cut in 0..good.len() {
            assert!(parse(&good[..cut]).is_empty(), "cut at {cut}");
        }
        let mut lying = good.clone();
        lying[..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(parse(&lying).is_empty());
        let mut zero = good;
        zero[..4].copy_from_slice(&0u32.to_ne_bytes());
        assert!(parse(&zero).is_empty(), "a zero length ends the walk");
    }
}
