//! The NFLOG socket of drop attribution and its thread: binds the group
//! (through the seam, op `nflog-bind`, so it is faultable and counted),
//! then turns every reported packet into a [`super::DropRecord`] on the ring.
//!
//! The thread wakes at least every [`POLL`] to notice [`DropReader::stop`].

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use felix_actors::{ActorSeam, Injected};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use parking_lot::Mutex;

use crate::calc::view::DataplaneView;

use super::attribute::record;
use super::nflog::{bind_request, copy_mode_request, parse_datagram, Message};
use super::DropRing;

/// How often the thread checks whether it should stop.
pub const POLL: Duration = Duration::from_millis(500);
/// Bytes of each packet the kernel copies (enough for IPv6 + ports).
const COPY_RANGE: u32 = 128;

/// Why the reader could not start.
#[derive(Debug, thiserror::Error)]
pub enum DropReaderError {
    /// A socket call failed.
    #[error("NFLOG group {group}: {op}: {source}")]
    Os {
        /// The group.
        group: u16,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The kernel refused the configuration.
    #[error("NFLOG group {group}: the kernel refused {op} (errno {errno}); is another reader bound to the group?")]
    Refused {
        /// The group.
        group: u16,
        /// Which request.
        op: &'static str,
        /// The errno.
        errno: i32,
    },
    /// An injected fault.
    #[error(transparent)]
    Injected(#[from] Injected),
}

/// The running reader.
#[derive(Debug)]
pub struct DropReader {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DropReader {
    /// A reader whose `thread` watches `stop`.
    pub(super) fn new(stop: Arc<AtomicBool>, thread: JoinHandle<()>) -> Self {
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DropReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn set_recv_timeout(sock: &Socket, t: Duration) -> std::io::Result<()> {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(t.subsec_micros() as i32),
    };
    // SAFETY: the fd is the open socket `sock` owns for the duration of the
    // call; the option value is a `timeval` whose address and size are
    // passed correctly.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::addr_of!(tv).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What the reader does after a failed `recv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterRecvError {
    /// Nothing was lost: read again (the timeout passed, or a signal arrived).
    Retry,
    /// The socket's buffer overflowed: some reports were lost; read on.
    Overflowed,
    /// The socket is unusable.
    Stop,
}

/// Classifies a `recv` error.
///
/// Invariant (review note "a signal never stops the drop reader"): the socket has a receive
/// timeout, and a `recv` with `SO_RCVTIMEO` set is never restarted after a signal
/// interrupted it, whatever `SA_RESTART` says (signal(7)): it fails with `EINTR`. Signals
/// reach this thread without any handler of ours: the tools felix runs exit with a
/// `SIGCHLD`, which the kernel queues to the process instead of discarding it whenever the
/// thread that started the tool has it blocked at that moment (seen here with `perf` on
/// `signal:signal_deliver`: `SIGCHLD`, default action, delivered to felix's threads), and
/// the `recv` it wakes fails. So `EINTR` is a retry, never the end of drop attribution.
fn after_recv_error(e: &std::io::Error) -> AfterRecvError {
    use std::io::ErrorKind::{Interrupted, TimedOut, WouldBlock};
    match e.kind() {
        WouldBlock | TimedOut | Interrupted => AfterRecvError::Retry,
        _ if e.raw_os_error() == Some(libc::ENOBUFS) => AfterRecvError::Overflowed,
        _ => AfterRecvError::Stop,
    }
}

/// Sends `req` and waits for its acknowledgement.
fn request(
    sock: &Socket,
    group: u16,
    op: &'static str,
    seq: u32,
    req: &[u8],
) -> Result<(), DropReaderError> {
    let os = |source| DropReaderError::Os { group, op, source };
    sock.send(req, 0).map_err(os)?;
    let mut buf = vec![0u8; 8192];
    for _ in 0..16 {
        let n = match sock.recv(&mut &mut buf[..], 0) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(os(e)),
        };
        for m in parse_datagram(&buf[..n]) {
            if let Message::Ack { seq: s, errno } = m {
                if s == seq {
                    return if errno == 0 {
                        Ok(())
                    } else {
                        Err(DropReaderError::Refused { group, op, errno })
                    };
                }
            }
        }
    }
    Err(os(std::io::Error::other("no acknowledgement")))
}

fn open(group: u16) -> Result<Socket, DropReaderError> {
    let os = |op, source| DropReaderError::Os { group, op, source };
    let mut sock = Socket::new(NETLINK_NETFILTER).map_err(|e| os("socket", e))?;
    sock.bind(&SocketAddr::new(0, 0))
        .map_err(|e| os("bind", e))?;
    set_recv_timeout(&sock, POLL).map_err(|e| os("setsockopt", e))?;
    let _ = sock.set_rx_buf_sz(1 << 20);
    request(&sock, group, "bind", 1, &bind_request(1, group))?;
    request(
        &sock,
        group,
        "copy mode",
        2,
        &copy_mode_request(2, group, COPY_RANGE),
    )?;
    Ok(sock)
}

/// Binds NFLOG `group` and starts the thread that fills `ring`, naming
/// endpoints and policies from `view`.
pub fn start(
    group: u16,
    seam: &ActorSeam,
    view: Arc<Mutex<DataplaneView>>,
    ring: DropRing,
) -> Result<DropReader, DropReaderError> {
    let sock = seam.op("nflog-bind", || open(group))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("drop-reader".into())
        .spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !flag.load(Ordering::Acquire) {
                let n = match sock.recv(&mut &mut buf[..], 0) {
                    Ok(n) => n,
                    Err(e) => match after_recv_error(&e) {
                        AfterRecvError::Retry => continue,
                        AfterRecvError::Overflowed => {
                            tracing::warn!(
                                group,
                                "drop reports overflowed the socket; some were lost"
                            );
                            continue;
                        }
                        AfterRecvError::Stop => {
                            tracing::error!(group, error = %e, "drop reader stopped");
                            ring.stopped(format!("NFLOG group {group}: {e}"));
                            return;
                        }
                    },
                };
                for m in parse_datagram(&buf[..n]) {
                    if let Message::Packet(p) = m {
                        let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
                        let r = record(&view.lock(), &p, time);
                        ring.push(r);
                    }
                }
            }
        })
        .map_err(|source| DropReaderError::Os {
            group,
            op: "spawn",
            source,
        })?;
    Ok(DropReader {
        stop,
        thread: Some(thread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_never_stops_the_drop_reader() {
        let eintr = std::io::Error::from_raw_os_error(libc::EINTR);
        assert_eq!(after_recv_error(&eintr), AfterRecvError::Retry);
        let timeout = std::io::Error::from_raw_os_error(libc::EAGAIN);
        assert_eq!(after_recv_error(&timeout), AfterRecvError::Retry);
        let overflow = std::io::Error::from_raw_os_error(libc::ENOBUFS);
        assert_eq!(after_recv_error(&overflow), AfterRecvError::Overflowed);
        let closed = std::io::Error::from_raw_os_error(libc::EBADF);
        assert_eq!(after_recv_error(&closed), AfterRecvError::Stop);
    }
}
