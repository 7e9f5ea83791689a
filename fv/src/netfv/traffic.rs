//! Real TCP traffic between namespaces: an in-process echo server per
//! workload (threads that entered the workload's namespace, one dual-stack
//! listener per port) and probes that connect from a namespace, send a line
//! and require the server's identity back, so a probe only succeeds when
//! the SYN, the SYN-ACK and the data in both directions all got through.
//!
//! Invariant: servers stop (and release their sockets, hence their
//! namespace) when their [`Server`] is dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Result};

use felix_netns::enter_netns;

/// How long a probe waits for the connection and for the reply.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1200);

/// Echo servers listening on `[::]:port` (dual stack) in one namespace; each
/// connection gets `<identity>\n` back after the client's first line, or
/// `<identity> <peer address>\n` when that line is `peer` (the source
/// address the server saw), or, when it is `hold`, every further line
/// echoed back until the client closes (a long-lived connection).
pub struct Server {
    _threads: PortThreads,
}

/// One thread per port inside a namespace, each serving a socket it bound there, until the
/// value is dropped (then every thread is stopped and joined). Shared by the TCP [`Server`]
/// and the UDP `probes::UdpServer`.
pub struct PortThreads {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl PortThreads {
    /// For each of `ports`, a thread that enters `netns`, binds with `bind(port)` and, once
    /// bound (reported before this returns), runs `serve(socket, identity, stop)`; `what`
    /// names the server in errors.
    pub fn start<S: 'static>(
        netns: &str,
        identity: &str,
        ports: &[u16],
        what: &str,
        bind: fn(u16) -> std::io::Result<S>,
        serve: fn(S, &str, &AtomicBool),
    ) -> Result<PortThreads> {
        let mut me = PortThreads {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        for &port in ports {
            let (tx, rx) = std::sync::mpsc::channel();
            let ns = netns.to_string();
            let id = identity.to_string();
            let stop = me.stop.clone();
            me.threads.push(std::thread::spawn(move || {
                match enter_netns(&ns).and_then(|_| bind(port)) {
                    Ok(sock) => {
                        let _ = tx.send(Ok(()));
                        serve(sock, &id, &stop);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            }));
            rx.recv()
                .map_err(|_| anyhow!("{what} thread for port {port} died"))??;
        }
        Ok(me)
    }
}

impl Drop for PortThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Server {
    /// Starts one listener per port inside namespace `netns`.
    pub fn start(netns: &str, identity: &str, ports: &[u16]) -> Result<Server> {
        let bind = |port: u16| -> std::io::Result<TcpListener> {
            let l = TcpListener::bind(("::", port))?;
            l.set_nonblocking(true)?;
            Ok(l)
        };
        PortThreads::start(netns, identity, ports, "server", bind, serve)
            .map(|t| Server { _threads: t })
    }
}

fn serve(l: TcpListener, identity: &str, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, peer)) => {
                let id = identity.to_string();
                std::thread::spawn(move || {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(PROBE_TIMEOUT));
                    let mut r = BufReader::new(&s);
                    let mut line = String::new();
                    if r.read_line(&mut line).is_err() {
                        return;
                    }
                    let mut w = &s;
                    match line.trim() {
                        "peer" => {
                            let ip = peer.ip().to_canonical();
                            let _ = w.write_all(format!("{id} {ip}\n").as_bytes());
                        }
                        "hold" => {
                            let _ = s.set_read_timeout(None);
                            let _ = w.write_all(format!("{id}\n").as_bytes());
                            loop {
                                line.clear();
                                match r.read_line(&mut line) {
                                    Ok(n) if n > 0 => {
                                        if w.write_all(line.as_bytes()).is_err() {
                                            break;
                                        }
                                    }
                                    _ => break,
                                }
                            }
                        }
                        _ => {
                            let _ = w.write_all(format!("{id}\n").as_bytes());
                        }
                    }
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Connects from namespace `netns` to `ip:port`; `Ok(Some(identity))` when
/// the server answered, `Ok(None)` when the connection or the reply was
/// blocked (timeout, reset, unreachable).
pub fn probe(netns: &str, ip: IpAddr, port: u16) -> Result<Option<String>> {
    enter_netns(netns)?;
    let addr = SocketAddr::new(ip, port);
    let Ok(s) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
        return Ok(None);
    };
    s.set_read_timeout(Some(PROBE_TIMEOUT))?;
    s.set_write_timeout(Some(PROBE_TIMEOUT))?;
    let mut w = &s;
    if w.write_all(b"ping\n").is_err() {
        return Ok(None);
    }
    let mut line = String::new();
    match BufReader::new(&s).read_line(&mut line) {
        Ok(n) if n > 0 => Ok(Some(line.trim().to_string())),
        _ => Ok(None),
    }
}

/// Like [`probe`], but asks the server for the source address it saw:
/// `Ok(Some((identity, peer)))` when it answered.
pub fn probe_peer(netns: &str, ip: IpAddr, port: u16) -> Result<Option<(String, IpAddr)>> {
    enter_netns(netns)?;
    let addr = SocketAddr::new(ip, port);
    let Ok(s) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
        return Ok(None);
    };
    s.set_read_timeout(Some(PROBE_TIMEOUT))?;
    s.set_write_timeout(Some(PROBE_TIMEOUT))?;
    let mut w = &s;
    if w.write_all(b"peer\n").is_err() {
        return Ok(None);
    }
    let mut line = String::new();
    match BufReader::new(&s).read_line(&mut line) {
        Ok(n) if n > 0 => {
            let (id, peer) = line
                .trim()
                .split_once(' ')
                .ok_or_else(|| anyhow!("server answered {line:?} without a peer address"))?;
            let peer: IpAddr = peer
                .parse()
                .map_err(|e| anyhow!("server reported peer {peer:?}: {e}"))?;
            Ok(Some((id.to_string(), peer)))
        }
        _ => Ok(None),
    }
}

/// A long-lived TCP connection from a namespace to an echo server, in
/// `hold` mode: each [`Conn::roundtrip`] sends a line and needs it back.
pub struct Conn {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    /// The identity of the server that accepted the connection.
    pub server: String,
}

impl Conn {
    /// Connects from namespace `netns` to `ip:port` (on a thread that
    /// enters the namespace; the socket stays in it) and starts `hold` mode.
    pub fn open(netns: &str, ip: IpAddr, port: u16) -> Result<Conn> {
        let ns = netns.to_string();
        let stream = std::thread::spawn(move || -> Result<TcpStream> {
            enter_netns(&ns)?;
            Ok(TcpStream::connect_timeout(
                &SocketAddr::new(ip, port),
                PROBE_TIMEOUT,
            )?)
        })
        .join()
        .map_err(|_| anyhow!("connect thread panicked"))??;
        stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
        stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        (&stream).write_all(b"hold\n")?;
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(anyhow!("{ip}:{port} closed the connection at once"));
        }
        Ok(Conn {
            stream,
            reader,
            server: line.trim().to_string(),
        })
    }

    /// Sends `msg` (one line) and requires the same line back within the
    /// probe timeout.
    pub fn roundtrip(&mut self, msg: &str) -> Result<()> {
        (&self.stream).write_all(format!("{msg}\n").as_bytes())?;
        let mut line = String::new();
        let n = self.reader.read_line(&mut line)?;
        if n == 0 {
            return Err(anyhow!("connection closed by the server"));
        }
        if line.trim() != msg {
            return Err(anyhow!("sent {msg:?}, got {:?} back", line.trim()));
        }
        Ok(())
    }
}

/// Runs many probes concurrently (one thread each, since each thread enters
/// its own namespace); results are in input order.
pub fn probe_all(probes: &[(String, IpAddr, u16)]) -> Vec<Result<Option<String>>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = probes
            .iter()
            .map(|(ns, ip, port)| s.spawn(move || probe(ns, *ip, *port)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("probe thread panicked")))
            })
            .collect()
    })
}
