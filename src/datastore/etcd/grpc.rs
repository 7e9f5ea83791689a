//! Blocking gRPC unary calls to etcd over HTTP/2 (the `h2` crate).
//!
//! etcd serves native gRPC on its client port next to the JSON gateway:
//! `http://` endpoints are spoken to as h2c with prior knowledge,
//! `https://` ones over TLS with ALPN `h2` (same trust settings as the
//! gateway, see [`super::tls`]).  A call is framed by hand: `POST
//! /<service>/<method>`, `content-type: application/grpc`, `te: trailers`,
//! one length-prefixed uncompressed message each way, and the
//! `grpc-status` (trailers, or the headers of a trailers-only answer) is
//! turned into [`GrpcError::Status`].
//!
//! # Threads and connections
//!
//! A [`GrpcTransport`] owns a one-worker tokio runtime (created on first
//! use) that drives its HTTP/2 connection; callers block on their call
//! from their own thread, and [`GrpcTransport::spawn`] starts a call that
//! proceeds in the background (a page prefetch) until it is waited for.
//! One connection is kept and shared by all calls (HTTP/2 multiplexes
//! them).  A call that fails on a kept connection is retried once on a
//! fresh one (etcd may have restarted since; the calls made here are
//! reads, so a retry is harmless); a call that cannot connect moves on to
//! the next endpoint.
//!
//! # Limits
//!
//! Every call honours the caller's stop flag (checked every
//! [`STOP_POLL`]) and a deadline; answers larger than the given maximum
//! are refused.  Flow-control windows are large so that a multi-megabyte
//! page streams without waiting for window updates.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use h2::client::SendRequest;
use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::http::{tls_cause, tls_hint, Endpoint};

/// How often a blocked call checks its stop flag.
pub(crate) const STOP_POLL: Duration = Duration::from_millis(50);
/// HTTP/2 stream and connection receive windows.
const WINDOW: u32 = 32 * 1024 * 1024;
/// Largest HTTP/2 frame we accept.
const MAX_FRAME: u32 = 1024 * 1024;

/// Failure of one gRPC call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GrpcError {
    /// No connection could be made to any endpoint.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// TLS with an endpoint failed (handshake or ALPN).
    #[error("{0}")]
    Tls(String),
    /// The connection broke, or the call ran past its deadline.
    #[error("connection to {endpoint} failed: {reason}")]
    Io { endpoint: String, reason: String },
    /// The server answered with a non-OK gRPC status.
    #[error("gRPC status {code}: {message}")]
    Status { code: i32, message: String },
    /// The server's answer was not a well-formed gRPC answer.
    #[error("bad gRPC answer from {endpoint}: {reason}")]
    Protocol { endpoint: String, reason: String },
    /// The caller's stop flag was raised.
    #[error("stopped")]
    Stopped,
}

/// An established HTTP/2 connection to one endpoint.
#[derive(Clone)]
struct Conn {
    /// Index into the endpoint list.
    index: usize,
    send: SendRequest<Bytes>,
    tls_error: TlsSlot,
}

/// gRPC over HTTP/2 to a list of etcd endpoints; see the module docs.
pub(crate) struct GrpcTransport {
    endpoints: Vec<Endpoint>,
    /// TLS settings with ALPN `h2`, present when an endpoint is `https://`.
    tls: Option<Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
    runtime: OnceLock<Result<Runtime, String>>,
    /// The kept connection (replaced by a call that had to reconnect).
    conn: Arc<Mutex<Option<Conn>>>,
    /// Endpoint to try first.
    preferred: Mutex<usize>,
}

impl std::fmt::Debug for GrpcTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTransport")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

/// The transport's runtime, shut down without waiting when dropped (so a
/// client may be dropped anywhere, even inside another runtime).
struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// What bounds a blocking call.
#[derive(Clone)]
pub(crate) struct CallLimits {
    pub stop: Option<Arc<AtomicBool>>,
    pub deadline: Instant,
    /// Largest accepted message.
    pub max_message: usize,
}

/// A call started by [`GrpcTransport::spawn`]; dropping it abandons
/// the call.
pub(crate) struct Pending {
    handle: tokio::task::JoinHandle<Result<Bytes, GrpcError>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

impl GrpcTransport {
    /// A transport for `endpoints`; `tls` is the gateway's TLS
    /// configuration (its ALPN is replaced by `h2`).
    pub(crate) fn new(
        endpoints: Vec<Endpoint>,
        tls: Option<&Arc<rustls::ClientConfig>>,
        connect_timeout: Duration,
    ) -> GrpcTransport {
        let tls = tls.map(|c| {
            let mut c = (**c).clone();
            c.alpn_protocols = vec![b"h2".to_vec()];
            Arc::new(c)
        });
        GrpcTransport {
            endpoints,
            tls,
            connect_timeout,
            runtime: OnceLock::new(),
            conn: Arc::new(Mutex::new(None)),
            preferred: Mutex::new(0),
        }
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime, GrpcError> {
        let rt = self.runtime.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("etcd-grpc")
                .enable_all()
                .build()
                .map(|rt| Runtime(Some(rt)))
                .map_err(|e| format!("cannot start the gRPC runtime: {e}"))
        });
        match rt {
            Ok(Runtime(Some(rt))) => Ok(rt),
            Ok(Runtime(None)) => Err(GrpcError::Connect("gRPC runtime shut down".into())),
            Err(e) => Err(GrpcError::Connect(e.clone())),
        }
    }

    /// Calls `path` with the encoded message `request` and waits for the
    /// answer's message (without its gRPC framing).
    pub(crate) fn call(
        &self,
        path: &'static str,
        request: Bytes,
        limits: &CallLimits,
    ) -> Result<Bytes, GrpcError> {
        let pending = self.spawn(path, request, limits)?;
        self.wait(pending, limits)
    }

    /// Starts a call that proceeds in the background; see
    /// [`GrpcTransport::wait`].
    pub(crate) fn spawn(
        &self,
        path: &'static str,
        request: Bytes,
        limits: &CallLimits,
    ) -> Result<Pending, GrpcError> {
        if limits
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::SeqCst))
        {
            return Err(GrpcError::Stopped);
        }
        let rt = self.runtime()?;
        let conn = self.connection(limits)?;
        let fresh_needed = {
            let endpoints = self.endpoints.clone();
            let tls = self.tls.clone();
            let connect_timeout = self.connect_timeout;
            move |index: usize| connect(endpoints, tls, connect_timeout, index)
        };
        let endpoint = self.endpoints[conn.index].clone();
        let max = limits.max_message;
        let kept = self.conn.clone();
        let handle = rt.spawn(async move {
            let first = unary(&conn, &endpoint, path, request.clone(), max).await;
            match first {
                Err(GrpcError::Io { .. }) => {
                    // The kept connection may predate an etcd restart: one
                    // more try on a fresh connection to the same endpoint,
                    // which is kept from now on.
                    let (send, tls_error) = fresh_needed(conn.index).await?;
                    let fresh = Conn {
                        index: conn.index,
                        send,
                        tls_error,
                    };
                    *kept.lock() = Some(fresh.clone());
                    unary(&fresh, &endpoint, path, request, max).await
                }
                other => other,
            }
        });
        Ok(Pending { handle })
    }

    /// Waits for a call started by [`GrpcTransport::spawn`].  A call
    /// abandoned because of the stop flag or the deadline is aborted (when
    /// `pending` is dropped).
    pub(crate) fn wait(&self, pending: Pending, limits: &CallLimits) -> Result<Bytes, GrpcError> {
        let rt = self.runtime()?;
        let endpoint = self.describe_current();
        let mut pending = pending;
        let handle = &mut pending.handle;
        let stop = limits.stop.clone();
        let deadline = limits.deadline;
        let result = block_on(rt, async {
            let mut tick = tokio::time::interval(STOP_POLL);
            loop {
                tokio::select! {
                    r = &mut *handle => {
                        return match r {
                            Ok(r) => r,
                            Err(e) => Err(GrpcError::Io { endpoint, reason: format!("call task failed: {e}") }),
                        };
                    }
                    _ = tick.tick() => {
                        if stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
                            return Err(GrpcError::Stopped);
                        }
                        if felix_actors::clock::real_now() >= deadline {
                            return Err(GrpcError::Io { endpoint, reason: "no answer before the request timeout".into() });
                        }
                    }
                }
            }
        });
        if matches!(
            result,
            Err(GrpcError::Io { .. }) | Err(GrpcError::Connect(_))
        ) {
            // Do not reuse a connection that just failed.
            *self.conn.lock() = None;
        }
        result
    }

    fn describe_current(&self) -> String {
        let index = *self.preferred.lock() % self.endpoints.len().max(1);
        self.endpoints
            .get(index)
            .map(Endpoint::url)
            .unwrap_or_default()
    }

    /// The kept connection, or a new one to the first endpoint that
    /// accepts, starting from the preferred one.
    fn connection(&self, limits: &CallLimits) -> Result<Conn, GrpcError> {
        if let Some(conn) = self.conn.lock().as_ref() {
            return Ok(conn.clone());
        }
        let rt = self.runtime()?;
        let n = self.endpoints.len();
        let start = *self.preferred.lock() % n.max(1);
        let mut failures = Vec::new();
        let mut tls_failed = false;
        for i in 0..n {
            let index = (start + i) % n;
            let fut = connect(
                self.endpoints.clone(),
                self.tls.clone(),
                self.connect_timeout,
                index,
            );
            let stop = limits.stop.clone();
            let result = block_on(rt, async move {
                tokio::select! {
                    r = fut => r,
                    _ = wait_stop(stop) => Err(GrpcError::Stopped),
                }
            });
            match result {
                Ok((send, tls_error)) => {
                    let conn = Conn {
                        index,
                        send,
                        tls_error,
                    };
                    *self.preferred.lock() = index;
                    *self.conn.lock() = Some(conn.clone());
                    return Ok(conn);
                }
                Err(GrpcError::Stopped) => return Err(GrpcError::Stopped),
                Err(e @ GrpcError::Tls(_)) => {
                    tls_failed = true;
                    failures.push(e.to_string());
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        if tls_failed {
            Err(GrpcError::Tls(failures.join("; ")))
        } else {
            Err(GrpcError::Connect(failures.join("; ")))
        }
    }
}

/// Runs `fut` to completion on `rt` from a blocking caller; from inside
/// another runtime (where blocking on one is refused) it runs on a
/// helper thread.
fn block_on<F: Future + Send>(rt: &tokio::runtime::Runtime, fut: F) -> F::Output
where
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            match s.spawn(|| rt.block_on(fut)).join() {
                Ok(out) => out,
                // The future itself panicked: propagate.
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    } else {
        rt.block_on(fut)
    }
}

/// Resolves when `stop` is raised (never without a flag).
async fn wait_stop(stop: Option<Arc<AtomicBool>>) {
    let Some(stop) = stop else {
        return std::future::pending().await;
    };
    let mut tick = tokio::time::interval(STOP_POLL);
    loop {
        tick.tick().await;
        if stop.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// The first TLS error seen on a connection, with a hint at the setting
/// to check (h2 keeps only the text of I/O errors, so it is recorded
/// below h2, where the rustls error is still typed).
type TlsSlot = Arc<Mutex<Option<String>>>;

/// A byte stream that records its first TLS error in a [`TlsSlot`].
struct Watched<S> {
    inner: S,
    slot: TlsSlot,
}

impl<S> Watched<S> {
    fn note<T>(&self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r {
            if let Some(tls) = tls_cause(e) {
                self.slot.lock().get_or_insert_with(|| tls_hint(tls));
            }
        }
        r
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let r = ready!(Pin::new(&mut self.inner).poll_read(cx, buf));
        Poll::Ready(self.note(r))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = ready!(Pin::new(&mut self.inner).poll_write(cx, buf));
        Poll::Ready(self.note(r))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = ready!(Pin::new(&mut self.inner).poll_flush(cx));
        Poll::Ready(self.note(r))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Opens an HTTP/2 connection to `endpoints[index]`, spawns its driver on
/// the current runtime and checks it with a ping (so that a server that
/// refuses our client certificate, which TLS 1.3 reports only after the
/// handshake, is a connect-time [`GrpcError::Tls`]).
async fn connect(
    endpoints: Vec<Endpoint>,
    tls: Option<Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
    index: usize,
) -> Result<(SendRequest<Bytes>, TlsSlot), GrpcError> {
    let endpoint = &endpoints[index];
    let name = endpoint.url();
    let tcp = tokio::time::timeout(
        connect_timeout,
        TcpStream::connect((endpoint.host.as_str(), endpoint.port)),
    )
    .await
    .map_err(|_| GrpcError::Connect(format!("{name}: connect timed out")))?
    .map_err(|e| GrpcError::Connect(format!("{name}: {e}")))?;
    // Small request frames must not wait for Nagle.
    let _ = tcp.set_nodelay(true);
    let slot = TlsSlot::default();
    if !endpoint.tls {
        let send = establish(
            Watched {
                inner: tcp,
                slot: slot.clone(),
            },
            &name,
            &slot,
            connect_timeout,
        )
        .await?;
        return Ok((send, slot));
    }
    let Some(config) = tls else {
        return Err(GrpcError::Tls(format!(
            "TLS with {name} failed: no TLS configuration"
        )));
    };
    let server = ServerName::try_from(endpoint.host.clone())
        .map_err(|e| GrpcError::Tls(format!("TLS with {name} failed: invalid server name: {e}")))?;
    let stream = tokio::time::timeout(
        connect_timeout,
        tokio_rustls::TlsConnector::from(config).connect(server, tcp),
    )
    .await
    .map_err(|_| GrpcError::Connect(format!("{name}: TLS handshake timed out")))?
    .map_err(|e| match tls_cause(&e) {
        Some(tls) => GrpcError::Tls(format!("TLS with {name} failed: {}", tls_hint(tls))),
        None => GrpcError::Connect(format!("{name}: TLS handshake: {e}")),
    })?;
    if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(GrpcError::Tls(format!(
            "TLS with {name} failed: the server did not agree to HTTP/2 (ALPN h2)"
        )));
    }
    let send = establish(
        Watched {
            inner: stream,
            slot: slot.clone(),
        },
        &name,
        &slot,
        connect_timeout,
    )
    .await?;
    Ok((send, slot))
}

/// The HTTP/2 handshake and a ping on `stream`.
async fn establish<S>(
    stream: Watched<S>,
    name: &str,
    slot: &TlsSlot,
    timeout: Duration,
) -> Result<SendRequest<Bytes>, GrpcError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let failed = |what: &str, e: String| match slot.lock().clone() {
        Some(tls) => GrpcError::Tls(format!("TLS with {name} failed: {tls}")),
        None => GrpcError::Connect(format!("{name}: HTTP/2 {what}: {e}")),
    };
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_frame_size(MAX_FRAME)
        .enable_push(false);
    let (send, mut conn) = builder
        .handshake::<_, Bytes>(stream)
        .await
        .map_err(|e| failed("handshake", e.to_string()))?;
    let ping = conn.ping_pong();
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("etcd gRPC connection ended: {e}");
        }
    });
    if let Some(mut ping) = ping {
        let e = match tokio::time::timeout(timeout, ping.ping(h2::Ping::opaque())).await {
            Ok(Ok(_)) => return Ok(send),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer".into(),
        };
        // A server refusing our client certificate (TLS 1.3) sends its alert after the
        // handshake; our ping's write can fail (broken pipe) before the connection task has
        // read that alert. Give the reader a moment so the error names the real cause.
        for _ in 0..TLS_ALERT_WAIT_STEPS {
            if slot.lock().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        return Err(failed("ping", e));
    }
    Ok(send)
}

/// How many 10 ms steps a failed connection check waits for a TLS alert to be read.
const TLS_ALERT_WAIT_STEPS: usize = 30;

/// One gRPC unary exchange on `send`.
async fn unary(
    conn: &Conn,
    endpoint: &Endpoint,
    path: &str,
    message: Bytes,
    max: usize,
) -> Result<Bytes, GrpcError> {
    let name = endpoint.url();
    let io = |e: h2::Error| match conn.tls_error.lock().clone() {
        Some(tls) => GrpcError::Tls(format!("TLS with {name} failed: {tls}")),
        None => GrpcError::Io {
            endpoint: name.clone(),
            reason: e.to_string(),
        },
    };
    let protocol = |reason: String| GrpcError::Protocol {
        endpoint: name.clone(),
        reason,
    };
    let mut send = conn.send.clone().ready().await.map_err(io)?;
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("{}{path}", endpoint.url()))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(())
        .map_err(|e| protocol(format!("cannot build request: {e}")))?;
    let (response, mut body) = send.send_request(request, false).map_err(io)?;
    body.send_data(frame(&message), true).map_err(io)?;
    let response = response.await.map_err(io)?;
    let (parts, mut stream) = response.into_parts();
    if parts.status != http::StatusCode::OK {
        return Err(protocol(format!("HTTP status {}", parts.status)));
    }
    // A trailers-only answer carries the status in its headers.
    if let Some(status) = grpc_status(&parts.headers) {
        status?;
    }
    let mut buf = BytesMut::new();
    let mut sized = false;
    while let Some(chunk) = stream.data().await {
        let chunk = chunk.map_err(io)?;
        let _ = stream.flow_control().release_capacity(chunk.len());
        if buf.len() + chunk.len() > max.saturating_add(5) {
            return Err(protocol(format!("answer larger than {max} bytes")));
        }
        buf.extend_from_slice(&chunk);
        if !sized && buf.len() >= 5 {
            // The length prefix: allocate the whole message once instead
            // of growing (and re-faulting) a multi-megabyte page.
            sized = true;
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if len > max {
                return Err(protocol(format!("answer of {len} bytes, more than {max}")));
            }
            buf.reserve((5 + len).saturating_sub(buf.len()));
        }
    }
    let trailers = stream.trailers().await.map_err(io)?;
    match trailers.as_ref().and_then(grpc_status) {
        Some(status) => status?,
        None => return Err(protocol("answer without grpc-status".into())),
    }
    unframe(buf.freeze()).map_err(protocol)
}

/// The gRPC length-prefixed framing of one uncompressed message.
fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.freeze()
}

/// The single message of a unary answer.
fn unframe(mut buf: Bytes) -> Result<Bytes, String> {
    if buf.len() < 5 {
        return Err(format!("answer of {} bytes has no message", buf.len()));
    }
    let compressed = buf.get_u8();
    if compressed != 0 {
        return Err("compressed answer (no compression was offered)".into());
    }
    let len = buf.get_u32() as usize;
    if buf.len() != len {
        return Err(format!(
            "message length {len} but {} bytes follow",
            buf.len()
        ));
    }
    Ok(buf)
}

/// `grpc-status` (and `grpc-message`) of a header block: `Some(Ok)` for
/// status 0, `Some(Err)` for another status, `None` when absent.
fn grpc_status(headers: &http::HeaderMap) -> Option<Result<(), GrpcError>> {
    let status = headers.get("grpc-status")?;
    let code = status
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .unwrap_or(2); // UNKNOWN
    if code == 0 {
        return Some(Ok(()));
    }
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Some(Err(GrpcError::Status { code, message }))
}

/// Decodes the percent-encoding gRPC applies to `grpc-message`.
fn percent_decode(text: &[u8]) -> String {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'%' && i + 2 < text.len() {
            let hex = std::str::from_utf8(&text[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(b) = hex {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_round_trips() {
        let framed = frame(b"hello");
        assert_eq!(&framed[..5], &[0, 0, 0, 0, 5]);
        assert_eq!(unframe(framed).unwrap(), Bytes::from_static(b"hello"));
        assert_eq!(unframe(frame(b"")).unwrap(), Bytes::new());
    }

    #[test]
    fn unframe_rejects_bad_framing() {
        assert!(unframe(Bytes::from_static(&[0, 0, 0])).is_err());
        assert!(unframe(Bytes::from_static(&[1, 0, 0, 0, 1, b'x'])).is_err());
        assert!(unframe(Bytes::from_static(&[0, 0, 0, 0, 2, b'x'])).is_err());
        assert!(unframe(Bytes::from_static(&[0, 0, 0, 0, 1, b'x', b'y'])).is_err());
    }

    #[test]
    fn grpc_status_is_typed() {
        let mut h = http::HeaderMap::new();
        assert!(grpc_status(&h).is_none());
        h.insert("grpc-status", "0".parse().unwrap());
        assert!(matches!(grpc_status(&h), Some(Ok(()))));
        h.insert("grpc-status", "11".parse().unwrap());
        h.insert(
            "grpc-message",
            "etcdserver: mvcc: required revision has been compacted%21"
                .parse()
                .unwrap(),
        );
        match grpc_status(&h) {
            Some(Err(GrpcError::Status { code, message })) => {
                assert_eq!(code, 11);
                assert_eq!(
                    message,
                    "etcdserver: mvcc: required revision has been compacted!"
                );
            }
            other => panic!("{other:?}"),
        }
        h.insert("grpc-status", "junk".parse().unwrap());
        assert!(matches!(
            grpc_status(&h),
            Some(Err(GrpcError::Status { code: 2, .. }))
        ));
    }

    #[test]
    fn percent_decoding_leaves_malformed_escapes() {
        assert_eq!(percent_decode(b"a%20b"), "a b");
        assert_eq!(percent_decode(b"100%"), "100%");
        assert_eq!(percent_decode(b"%zz%4"), "%zz%4");
    }
}
