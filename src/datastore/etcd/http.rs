//! A deliberately small blocking HTTP/1.1 client, just enough to talk to
//! etcd's JSON gateway (`POST /v3/...` with a JSON body).
//!
//! Supported: `http://` and `https://` endpoints (TLS by rustls with the
//! configuration of [`super::tls`]; the handshake is completed before the
//! request is sent, so certificate problems surface as
//! [`HttpError::Tls`] naming the endpoint), request bodies with
//! `Content-Length`, response bodies framed by `Content-Length`, `chunked`
//! transfer encoding or connection close.  Every request uses a fresh TCP
//! connection (`Connection: close`); on loopback and LAN that costs far less
//! than the JSON work per request.
//!
//! # Blocking and cancellation
//!
//! Sockets get a short read timeout ([`POLL`]).  The reader retries after
//! each timeout, first checking the caller's stop flag and the request
//! deadline, so a blocked read (for example an idle watch stream) ends
//! within [`POLL`] of a stop request without any extra thread.  TCP
//! keep-alive is enabled so that a peer that vanished without closing the
//! connection is noticed within about half a minute.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// Read-timeout granularity: how often a blocked read checks its stop flag.
pub(crate) const POLL: Duration = Duration::from_millis(200);
/// Longest accepted status line or header line.
const MAX_HEADER_LINE: usize = 16 * 1024;
/// Most header lines accepted in one response.
const MAX_HEADERS: usize = 100;

/// A parsed `http[s]://host:port` endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Host as written (name, IPv4, or IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// `https://`: speak TLS.
    pub tls: bool,
}

impl Endpoint {
    /// Parses `http[s]://HOST[:PORT][/]`.  The port defaults to 2379
    /// (etcd's client port).  Anything else (another scheme, a path, user
    /// info) is an error naming the problem.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, String> {
        let (rest, tls) = if let Some(rest) = url.strip_prefix("http://") {
            (rest, false)
        } else if let Some(rest) = url.strip_prefix("https://") {
            (rest, true)
        } else {
            return Err(format!(
                "{url}: expected http://HOST:PORT or https://HOST:PORT"
            ));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains(['/', '@', '?', '#']) {
            return Err(format!("{url}: expected http://HOST:PORT"));
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let Some((host, tail)) = v6.split_once(']') else {
                return Err(format!("{url}: unterminated IPv6 address"));
            };
            match tail {
                "" => (host, None),
                t => match t.strip_prefix(':') {
                    Some(p) => (host, Some(p)),
                    None => return Err(format!("{url}: expected ':' after the IPv6 address")),
                },
            }
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (rest, None),
            }
        };
        if host.is_empty() {
            return Err(format!("{url}: missing host"));
        }
        let port = match port {
            None => 2379,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("{url}: invalid port {p:?}"))?,
        };
        Ok(Endpoint {
            host: host.to_owned(),
            port,
            tls,
        })
    }

    /// `host:port` as sent in the `Host` header.
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The endpoint as a URL.
    pub(crate) fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.authority())
    }

    fn addrs(&self) -> io::Result<Vec<SocketAddr>> {
        Ok((self.host.as_str(), self.port).to_socket_addrs()?.collect())
    }
}

/// Failure of one HTTP exchange.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// No connection could be made.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect { endpoint: String, source: io::Error },
    /// The connection failed after it was made (reset, closed early, timed
    /// out).
    #[error("connection to {endpoint} failed: {source}")]
    Io { endpoint: String, source: io::Error },
    /// TLS failed: handshake (certificate not trusted, wrong name, client
    /// certificate refused) or a TLS-level error later on.
    #[error("TLS with {endpoint} failed: {reason}")]
    Tls { endpoint: String, reason: String },
    /// The peer did not speak the HTTP we expect.
    #[error("bad HTTP response from {endpoint}: {reason}")]
    Protocol { endpoint: String, reason: String },
    /// The caller asked us to stop.
    #[error("stopped")]
    Stopped,
}

/// What bounds a blocking read.
#[derive(Clone)]
pub(crate) struct Limits {
    /// Set to abandon the exchange.
    pub stop: Option<Arc<AtomicBool>>,
    /// Give up (as a timed-out I/O error) after this instant.
    pub deadline: Option<Instant>,
}

/// A socket whose reads honour [`Limits`].
struct Sock {
    stream: TcpStream,
    limits: Limits,
}

/// Marker inside an `io::Error` for "stop requested".
#[derive(Debug)]
struct StopMarker;

impl std::fmt::Display for StopMarker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stop requested")
    }
}

impl std::error::Error for StopMarker {}

pub(crate) fn is_stop(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<StopMarker>())
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.stream.read(buf) {
                Ok(n) => return Ok(n),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if self
                        .limits
                        .stop
                        .as_ref()
                        .is_some_and(|s| s.load(Ordering::SeqCst))
                    {
                        return Err(io::Error::other(StopMarker));
                    }
                    if self
                        .limits
                        .deadline
                        .is_some_and(|d| felix_actors::clock::real_now() >= d)
                    {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no response before the request timeout",
                        ));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// The byte stream under HTTP: the socket itself, or TLS over it.
enum Transport {
    Plain(Sock),
    Tls(Box<StreamOwned<ClientConnection, Sock>>),
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(s) => s.flush(),
        }
    }
}

/// The TLS error inside an I/O error, if any.
pub(crate) fn tls_cause(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// Runs the TLS handshake to completion (so that certificate problems are
/// reported as such, before any request is sent).
fn handshake(
    endpoint: &Endpoint,
    config: &Arc<ClientConfig>,
    mut sock: Sock,
) -> Result<Transport, HttpError> {
    let name = endpoint.url();
    let tls_err = |reason: String| HttpError::Tls {
        endpoint: name.clone(),
        reason,
    };
    let server = ServerName::try_from(endpoint.host.clone())
        .map_err(|e| tls_err(format!("invalid server name {:?}: {e}", endpoint.host)))?;
    let mut conn =
        ClientConnection::new(config.clone(), server).map_err(|e| tls_err(e.to_string()))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| io_error(&name, e))?;
    }
    Ok(Transport::Tls(Box::new(StreamOwned::new(conn, sock))))
}

/// Turns on TCP keep-alive with short probe timings (idle 10 s, then every
/// 5 s, 3 probes).  Best effort: failures are ignored.
fn enable_keepalive(stream: &TcpStream) {
    let fd = stream.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, value: libc::c_int| {
        // SAFETY: `fd` is a valid open socket owned by `stream` for the
        // duration of this call, and the option value is a c_int whose
        // address and size are passed correctly.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                std::ptr::addr_of!(value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
}

/// How a response body is framed.
enum Framing {
    Length(u64),
    /// Bytes left in the current chunk; `None` before the first chunk
    /// header or after a chunk's trailing CRLF was consumed.
    Chunked {
        left: u64,
        done: bool,
    },
    UntilClose,
}

/// A response body as a byte stream (de-chunked).
pub(crate) struct Body {
    reader: BufReader<Transport>,
    framing: Framing,
    endpoint: String,
}

impl Body {
    fn chunk_header(&mut self) -> io::Result<u64> {
        let line = read_line(&mut self.reader)?;
        let size = line.split(';').next().unwrap_or("").trim();
        u64::from_str_radix(size, 16).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad chunk size line {line:?}"),
            )
        })
    }

    /// Reads the whole body (at most `max` bytes).
    pub(crate) fn read_all(mut self, max: usize) -> Result<Vec<u8>, HttpError> {
        let mut out = Vec::new();
        let endpoint = self.endpoint.clone();
        let mut limited = (&mut self).take(max as u64 + 1);
        limited
            .read_to_end(&mut out)
            .map_err(|e| io_error(&endpoint, e))?;
        if out.len() > max {
            return Err(HttpError::Protocol {
                endpoint,
                reason: format!("response body larger than {max} bytes"),
            });
        }
        Ok(out)
    }
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match &mut self.framing {
            Framing::Length(left) => {
                if *left == 0 {
                    return Ok(0);
                }
                let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let n = self.reader.read(&mut buf[..want])?;
                if n == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside the response body",
                    ));
                }
                *left -= n as u64;
                Ok(n)
            }
            Framing::UntilClose => self.reader.read(buf),
            Framing::Chunked { .. } => loop {
                let Framing::Chunked { left, done } = &mut self.framing else {
                    return Ok(0);
                };
                if *done {
                    return Ok(0);
                }
                if *left > 0 {
                    let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    let n = self.reader.read(&mut buf[..want])?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connection closed inside a chunk",
                        ));
                    }
                    *left -= n as u64;
                    if *left == 0 {
                        // The CRLF that ends the chunk's data.
                        let rest = read_line(&mut self.reader)?;
                        if !rest.is_empty() {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                "chunk data not followed by CRLF",
                            ));
                        }
                    }
                    return Ok(n);
                }
                let size = self.chunk_header()?;
                if size == 0 {
                    // Trailers up to the empty line.
                    loop {
                        if read_line(&mut self.reader)?.is_empty() {
                            break;
                        }
                    }
                    self.framing = Framing::Chunked {
                        left: 0,
                        done: true,
                    };
                    return Ok(0);
                }
                self.framing = Framing::Chunked {
                    left: size,
                    done: false,
                };
            },
        }
    }
}

/// Reads one CRLF (or LF) terminated line without its terminator.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut raw = Vec::new();
    let n = reader
        .take(MAX_HEADER_LINE as u64 + 2)
        .read_until(b'\n', &mut raw)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    if raw.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "line too long or connection closed mid-line",
        ));
    }
    raw.pop();
    if raw.last() == Some(&b'\r') {
        raw.pop();
    }
    String::from_utf8(raw).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "non-UTF-8 line"))
}

fn io_error(endpoint: &str, e: io::Error) -> HttpError {
    if is_stop(&e) {
        HttpError::Stopped
    } else if let Some(tls) = tls_cause(&e) {
        HttpError::Tls {
            endpoint: endpoint.to_owned(),
            reason: tls_hint(tls),
        }
    } else {
        HttpError::Io {
            endpoint: endpoint.to_owned(),
            source: e,
        }
    }
}

/// A TLS error with a hint at the setting to check.
pub(crate) fn tls_hint(e: &rustls::Error) -> String {
    use rustls::{AlertDescription, CertificateError, Error};
    let hint = match e {
        Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            " (the server's certificate is not signed by a CA in EtcdCaFile)"
        }
        Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => " (the server's certificate does not name this host)",
        Error::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA,
        ) => " (the server refused our client certificate: check EtcdCertFile/EtcdKeyFile)",
        _ => "",
    };
    format!("{e}{hint}")
}

/// Sends `POST path` with a JSON `body` and returns the status code and
/// the body reader (positioned after the headers).  `tls` is required for
/// `https://` endpoints.
pub(crate) fn post(
    endpoint: &Endpoint,
    tls: Option<&Arc<ClientConfig>>,
    path: &str,
    body: &[u8],
    connect_timeout: Duration,
    limits: Limits,
) -> Result<(u16, Body), HttpError> {
    let name = endpoint.url();
    let addrs = endpoint.addrs().map_err(|source| HttpError::Connect {
        endpoint: name.clone(),
        source,
    })?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "host has no addresses");
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, connect_timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let Some(stream) = stream else {
        return Err(HttpError::Connect {
            endpoint: name,
            source: last,
        });
    };
    let setup = |s: &TcpStream| -> io::Result<()> {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(POLL))?;
        s.set_write_timeout(Some(connect_timeout.max(Duration::from_secs(5))))?;
        Ok(())
    };
    setup(&stream).map_err(|e| io_error(&name, e))?;
    enable_keepalive(&stream);

    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.authority(),
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    let sock = Sock { stream, limits };
    let mut transport = match (endpoint.tls, tls) {
        (false, _) => Transport::Plain(sock),
        (true, Some(config)) => handshake(endpoint, config, sock)?,
        (true, None) => {
            return Err(HttpError::Tls {
                endpoint: name,
                reason: "no TLS configuration for an https endpoint".into(),
            })
        }
    };
    transport
        .write_all(&request)
        .and_then(|()| transport.flush())
        .map_err(|e| io_error(&name, e))?;

    let mut reader = BufReader::with_capacity(64 * 1024, transport);
    let status_line = read_line(&mut reader).map_err(|e| io_error(&name, e))?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().and_then(|c| c.parse::<u16>().ok());
    let Some(code) = code.filter(|_| version.starts_with("HTTP/1.")) else {
        return Err(HttpError::Protocol {
            endpoint: name,
            reason: format!("bad status line {status_line:?}"),
        });
    };
    let mut framing = Framing::UntilClose;
    let mut count = 0;
    loop {
        let line = read_line(&mut reader).map_err(|e| io_error(&name, e))?;
        if line.is_empty() {
            break;
        }
        count += 1;
        if count > MAX_HEADERS {
            return Err(HttpError::Protocol {
                endpoint: name,
                reason: "too many header lines".into(),
            });
        }
        let Some((field, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if field.eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().contains("chunked")
        {
            framing = Framing::Chunked {
                left: 0,
                done: false,
            };
        } else if field.eq_ignore_ascii_case("content-length")
            && !matches!(framing, Framing::Chunked { .. })
        {
            let n = value.parse::<u64>().map_err(|_| HttpError::Protocol {
                endpoint: name.clone(),
                reason: format!("bad Content-Length {value:?}"),
            })?;
            framing = Framing::Length(n);
        }
    }
    Ok((
        code,
        Body {
            reader,
            framing,
            endpoint: name,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn endpoint_parsing() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:2379").unwrap(),
            Endpoint {
                host: "127.0.0.1".into(),
                port: 2379,
                tls: false,
            }
        );
        assert_eq!(Endpoint::parse("http://etcd/").unwrap().port, 2379);
        let v6 = Endpoint::parse("http://[::1]:4001").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 4001));
        assert_eq!(v6.url(), "http://[::1]:4001");
        let tls = Endpoint::parse("https://x:1").unwrap();
        assert!(tls.tls);
        assert_eq!(tls.url(), "https://x:1");
        for bad in [
            "x:1",
            "http://",
            "http://h:0",
            "http://h:99999",
            "http://h:1/path",
            "http://u@h:1",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    /// Serves one canned response to one connection.
    fn serve_once(response: &'static [u8]) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            s.write_all(response).unwrap();
        });
        Endpoint {
            host: "127.0.0.1".into(),
            port,
            tls: false,
        }
    }

    fn limits() -> Limits {
        Limits {
            stop: None,
            deadline: Some(felix_actors::clock::real_now() + Duration::from_secs(5)),
        }
    }

    #[test]
    fn chunked_and_length_bodies_are_decoded() {
        let ep = serve_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n",
        );
        let (code, body) = post(&ep, None, "/x", b"{}", Duration::from_secs(1), limits()).unwrap();
        assert_eq!(code, 200);
        assert_eq!(body.read_all(100).unwrap(), b"hello world");

        let ep = serve_once(b"HTTP/1.1 400 Bad\r\nContent-Length: 3\r\n\r\nabcdef");
        let (code, body) = post(&ep, None, "/x", b"{}", Duration::from_secs(1), limits()).unwrap();
        assert_eq!(code, 400);
        assert_eq!(body.read_all(100).unwrap(), b"abc");
    }

    #[test]
    fn truncated_and_oversized_bodies_are_errors() {
        let ep = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
        let (_, body) = post(&ep, None, "/x", b"{}", Duration::from_secs(1), limits()).unwrap();
        assert!(matches!(body.read_all(100), Err(HttpError::Io { .. })));

        let ep = serve_once(b"HTTP/1.1 200 OK\r\n\r\n0123456789");
        let (_, body) = post(&ep, None, "/x", b"{}", Duration::from_secs(1), limits()).unwrap();
        assert!(matches!(body.read_all(5), Err(HttpError::Protocol { .. })));

        let ep = serve_once(b"SMTP ready\r\n\r\n");
        assert!(matches!(
            post(&ep, None, "/x", b"{}", Duration::from_secs(1), limits()),
            Err(HttpError::Protocol { .. })
        ));
    }

    #[test]
    fn a_blocked_read_ends_soon_after_stop() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap();
            std::thread::sleep(Duration::from_secs(3));
        });
        let stop = Arc::new(AtomicBool::new(false));
        let ep = Endpoint {
            host: "127.0.0.1".into(),
            port,
            tls: false,
        };
        let lim = Limits {
            stop: Some(stop.clone()),
            deadline: None,
        };
        let (_, body) = post(&ep, None, "/x", b"{}", Duration::from_secs(1), lim).unwrap();
        let s2 = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            s2.store(true, Ordering::SeqCst);
        });
        let t = felix_actors::clock::real_now();
        assert!(matches!(body.read_all(100), Err(HttpError::Stopped)));
        assert!(t.elapsed() < Duration::from_secs(2));
        hold.join().unwrap();
    }
}
