//! NRI's connection multiplexer (`pkg/net/multiplex`): several logical byte streams over one
//! unix socket (the trunk). Each frame is a 4-byte big-endian connection id, a 4-byte
//! big-endian payload length, then the payload. Frames for an id nobody listens on are dropped,
//! as NRI does; there is no per-connection close on the wire: only the trunk closes.
//!
//! Here each logical connection is a local [`UnixStream`] (one end of a socket pair, or a
//! connection to a private listener) that a ttrpc server or client uses as if it were the
//! socket itself; the mux pumps bytes between those streams and the trunk with one reader
//! thread (trunk to streams) and one writer thread per stream (stream to trunk).

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The mux connection on which the plugin serves NRI's `Plugin` service (runtime calls plugin).
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// The mux connection on which the runtime serves NRI's `Runtime` service (plugin calls runtime).
pub const RUNTIME_SERVICE_CONN: u32 = 2;
/// Bytes in a frame header: connection id and payload length.
pub const HEADER_LEN: usize = 8;
/// The largest payload NRI writes in one frame (16 MiB); a longer frame is a protocol error.
pub const MAX_PAYLOAD: usize = 1 << 24;
/// The most bytes this mux puts in one outgoing frame.
pub const WRITE_CHUNK: usize = 64 << 10;

/// Why the trunk closed.
#[derive(Debug)]
pub enum Closed {
    /// The peer closed the trunk between frames, or [`Mux::close`] was called.
    Eof,
    /// Reading or writing the trunk failed, or the peer broke the framing.
    Error(io::Error),
}

/// A running multiplexer over one trunk.
pub struct Mux {
    trunk: UnixStream,
    threads: Vec<JoinHandle<()>>,
}

impl Mux {
    /// Starts pumping between `trunk` and the local streams `conns` (each with its connection
    /// id); `on_close` is called once, from the reader thread, after the trunk closed and every
    /// local stream was shut down.
    pub fn start(
        trunk: UnixStream,
        conns: Vec<(u32, UnixStream)>,
        on_close: impl FnOnce(Closed) + Send + 'static,
    ) -> io::Result<Mux> {
        let writer = Arc::new(Mutex::new(trunk.try_clone()?));
        let mut readers = Vec::new();
        let mut locals = Vec::new();
        for (id, s) in &conns {
            readers.push((*id, s.try_clone()?));
            locals.push((*id, s.try_clone()?));
        }
        let mut threads = Vec::new();
        for (id, local) in readers {
            let writer = Arc::clone(&writer);
            let trunk = trunk.try_clone()?;
            threads.push(
                std::thread::Builder::new()
                    .name(format!("nri-mux-out-{id}"))
                    .spawn(move || pump_out(id, local, &writer, &trunk))?,
            );
        }
        let mut reader = trunk.try_clone()?;
        threads.push(
            std::thread::Builder::new()
                .name("nri-mux-in".into())
                .spawn(move || {
                    let why = pump_in(&mut reader, &mut locals);
                    let _ = reader.shutdown(Shutdown::Both);
                    for (_, s) in &locals {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                    drop(conns);
                    on_close(why);
                })?,
        );
        Ok(Mux { trunk, threads })
    }

    /// Closes the trunk: the peer sees EOF, the local streams are shut down, and `on_close`
    /// runs (with [`Closed::Eof`] unless the trunk had already failed).
    pub fn close(&self) {
        let _ = self.trunk.shutdown(Shutdown::Both);
    }

    /// Waits for the pump threads to end (after the trunk closed).
    pub fn join(mut self) {
        self.join_threads();
    }

    fn join_threads(&mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Dropping a mux closes its trunk and waits for its threads: the owner of a connection
/// (a runtime's [`Session`](crate::runtime::Session), a plugin's
/// [`Link`](crate::transport::Link)) ends it by dropping it.
impl Drop for Mux {
    fn drop(&mut self) {
        self.close();
        self.join_threads();
    }
}

/// Reads frames from the trunk and writes their payloads to the local stream of their id,
/// until the trunk ends; returns why.
fn pump_in(trunk: &mut UnixStream, locals: &mut Vec<(u32, UnixStream)>) -> Closed {
    let mut header = [0u8; HEADER_LEN];
    let mut payload = Vec::new();
    loop {
        match read_full(trunk, &mut header) {
            Ok(0) => return Closed::Eof,
            Ok(n) if n < HEADER_LEN => {
                return Closed::Error(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("trunk closed inside a frame header ({n} of {HEADER_LEN} bytes)"),
                ))
            }
            Ok(_) => {}
            Err(e) => return Closed::Error(e),
        }
        let id = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
        let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
        if len > MAX_PAYLOAD {
            return Closed::Error(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("frame for connection {id} of {len} bytes (more than {MAX_PAYLOAD})"),
            ));
        }
        payload.resize(len, 0);
        match read_full(trunk, &mut payload) {
            Ok(n) if n == len => {}
            Ok(n) => {
                return Closed::Error(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("trunk closed inside a frame ({n} of {len} bytes)"),
                ))
            }
            Err(e) => return Closed::Error(e),
        }
        let Some(i) = locals.iter().position(|(c, _)| *c == id) else {
            log::debug!("nri mux: dropped {len} bytes for unknown connection {id}");
            continue;
        };
        if let Err(e) = locals[i].1.write_all(&payload) {
            // The local side went away: later frames for it are dropped, as for an unknown id.
            log::debug!("nri mux: connection {id} closed locally ({e})");
            locals.remove(i);
        }
    }
}

/// Reads into all of `buf` unless the stream ends first; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads what the local stream `id` writes and sends it to the trunk as frames, until the local
/// stream ends; a failed trunk write shuts the trunk down (the reader then sees it end).
fn pump_out(id: u32, mut local: UnixStream, writer: &Mutex<UnixStream>, trunk: &UnixStream) {
    let mut buf = vec![0u8; HEADER_LEN + WRITE_CHUNK];
    buf[..4].copy_from_slice(&id.to_be_bytes());
    loop {
        let n = match local.read(&mut buf[HEADER_LEN..]) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        buf[4..HEADER_LEN].copy_from_slice(&(n as u32).to_be_bytes());
        let sent = match writer.lock() {
            Ok(mut w) => w.write_all(&buf[..HEADER_LEN + n]),
            Err(_) => Err(io::Error::other("trunk writer poisoned")),
        };
        if let Err(e) = sent {
            log::debug!("nri mux: writing connection {id} to the trunk failed: {e}");
            let _ = trunk.shutdown(Shutdown::Both);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn frame(id: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = id.to_be_bytes().to_vec();
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    struct Rig {
        peer: UnixStream,
        one: UnixStream,
        two: UnixStream,
        mux: Mux,
        closed: mpsc::Receiver<Closed>,
    }

    /// A mux on a socket-pair trunk whose other end is `peer`, with local streams 1 and 2 whose
    /// far ends (the ttrpc side) are `one` and `two`.
    fn rig() -> Rig {
        let (trunk, peer) = UnixStream::pair().unwrap();
        let (one, one_mux) = UnixStream::pair().unwrap();
        let (two, two_mux) = UnixStream::pair().unwrap();
        let (tx, closed) = mpsc::channel();
        let mux = Mux::start(
            trunk,
            vec![
                (PLUGIN_SERVICE_CONN, one_mux),
                (RUNTIME_SERVICE_CONN, two_mux),
            ],
            move |why| {
                let _ = tx.send(why);
            },
        )
        .unwrap();
        for s in [&peer, &one, &two] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        Rig {
            peer,
            one,
            two,
            mux,
            closed,
        }
    }

    fn read_n(s: &mut UnixStream, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        s.read_exact(&mut b).unwrap();
        b
    }

    #[test]
    fn split_frames_are_reassembled() {
        let mut r = rig();
        let f = frame(PLUGIN_SERVICE_CONN, b"hello, plugin");
        for piece in [&f[..3], &f[3..8], &f[8..10], &f[10..]] {
            r.peer.write_all(piece).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(read_n(&mut r.one, 13), b"hello, plugin");
        drop(r.peer);
        assert!(matches!(
            r.closed.recv_timeout(Duration::from_secs(5)),
            Ok(Closed::Eof)
        ));
        r.mux.join();
    }

    #[test]
    fn merged_frames_go_to_their_connections() {
        let mut r = rig();
        let mut both = frame(RUNTIME_SERVICE_CONN, b"to-two");
        both.extend(frame(PLUGIN_SERVICE_CONN, b"to-one"));
        both.extend(frame(RUNTIME_SERVICE_CONN, b"+again"));
        r.peer.write_all(&both).unwrap();
        assert_eq!(read_n(&mut r.one, 6), b"to-one");
        assert_eq!(read_n(&mut r.two, 12), b"to-two+again");
        r.mux.close();
        assert!(matches!(
            r.closed.recv_timeout(Duration::from_secs(5)),
            Ok(Closed::Eof)
        ));
        r.mux.join();
    }

    #[test]
    fn unknown_connection_is_dropped_and_the_rest_flows() {
        let mut r = rig();
        let mut bytes = frame(7, b"nobody listens");
        bytes.extend(frame(0, b""));
        bytes.extend(frame(PLUGIN_SERVICE_CONN, b"ok"));
        r.peer.write_all(&bytes).unwrap();
        assert_eq!(read_n(&mut r.one, 2), b"ok");
        assert!(
            r.closed.try_recv().is_err(),
            "an unknown id does not close the trunk"
        );
        r.mux.close();
        r.mux.join();
    }

    #[test]
    fn local_writes_become_frames_with_their_id() {
        let mut r = rig();
        r.two.write_all(b"register me").unwrap();
        assert_eq!(
            read_n(&mut r.peer, 8 + 11),
            frame(RUNTIME_SERVICE_CONN, b"register me")
        );
        r.one.write_all(b"reply").unwrap();
        assert_eq!(
            read_n(&mut r.peer, 8 + 5),
            frame(PLUGIN_SERVICE_CONN, b"reply")
        );
        r.mux.close();
        r.mux.join();
    }

    #[test]
    fn large_writes_are_split_into_frames_no_larger_than_a_chunk() {
        let mut r = rig();
        let big: Vec<u8> = (0..WRITE_CHUNK * 2 + 100).map(|i| i as u8).collect();
        let mut w = r.one.try_clone().unwrap();
        let data = big.clone();
        let t = std::thread::spawn(move || w.write_all(&data).unwrap());
        let mut got = Vec::new();
        while got.len() < big.len() {
            let h = read_n(&mut r.peer, HEADER_LEN);
            assert_eq!(h[..4], PLUGIN_SERVICE_CONN.to_be_bytes());
            let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
            assert!(len > 0 && len <= WRITE_CHUNK, "frame of {len} bytes");
            got.extend(read_n(&mut r.peer, len));
        }
        t.join().unwrap();
        assert_eq!(got, big);
        r.mux.close();
        r.mux.join();
    }

    #[test]
    fn peer_close_ends_the_local_streams() {
        let mut r = rig();
        drop(r.peer);
        assert!(matches!(
            r.closed.recv_timeout(Duration::from_secs(5)),
            Ok(Closed::Eof)
        ));
        let mut b = [0u8; 1];
        assert_eq!(r.one.read(&mut b).unwrap(), 0, "EOF on connection 1");
        assert_eq!(r.two.read(&mut b).unwrap(), 0, "EOF on connection 2");
        r.mux.join();
    }

    #[test]
    fn local_close_sends_nothing_and_drops_later_frames_for_it() {
        let mut r = rig();
        drop(r.one);
        std::thread::sleep(Duration::from_millis(50));
        r.peer
            .write_all(&frame(PLUGIN_SERVICE_CONN, b"lost"))
            .unwrap();
        r.peer
            .write_all(&frame(RUNTIME_SERVICE_CONN, b"kept"))
            .unwrap();
        assert_eq!(read_n(&mut r.two, 4), b"kept");
        r.peer
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 1];
        assert!(
            r.peer.read(&mut b).is_err(),
            "no frame announces a local close"
        );
        assert!(r.closed.try_recv().is_err());
        r.mux.close();
        r.mux.join();
    }

    #[test]
    fn our_close_is_eof_for_the_peer() {
        let mut r = rig();
        r.mux.close();
        let mut b = [0u8; 1];
        assert_eq!(r.peer.read(&mut b).unwrap(), 0);
        assert!(matches!(
            r.closed.recv_timeout(Duration::from_secs(5)),
            Ok(Closed::Eof)
        ));
        r.mux.join();
    }

    #[test]
    fn truncated_frame_is_an_error() {
        let r = rig();
        let f = frame(PLUGIN_SERVICE_CONN, b"cut short");
        (&r.peer).write_all(&f[..12]).unwrap();
        drop(r.peer);
        match r.closed.recv_timeout(Duration::from_secs(5)) {
            Ok(Closed::Error(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("want an error, got {other:?}"),
        }
        r.mux.join();
    }

    #[test]
    fn truncated_header_is_an_error() {
        let r = rig();
        (&r.peer).write_all(&[0, 0, 0]).unwrap();
        drop(r.peer);
        assert!(matches!(
            r.closed.recv_timeout(Duration::from_secs(5)),
            Ok(Closed::Error(_))
        ));
        r.mux.join();
    }

    #[test]
    fn oversized_frame_is_an_error() {
        let r = rig();
        let mut h = PLUGIN_SERVICE_CONN.to_be_bytes().to_vec();
        h.extend_from_slice(&((MAX_PAYLOAD + 1) as u32).to_be_bytes());
        (&r.peer).write_all(&h).unwrap();
        match r.closed.recv_timeout(Duration::from_secs(5)) {
            Ok(Closed::Error(e)) => assert_eq!(e.kind(), io::ErrorKind::InvalidData),
            other => panic!("want an error, got {other:?}"),
        }
        r.mux.join();
    }
}
