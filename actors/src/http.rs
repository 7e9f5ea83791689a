//! A deliberately small HTTP/1.1 server and client for the admin socket and health port.
//!
//! Scope: one request per connection (`Connection: close` on every response), bodies framed by
//! `Content-Length` only (chunked requests are refused with 411), request head at most 16 KiB,
//! body at most 1 MiB, and a 10 s deadline to receive a request. Handlers are synchronous and
//! quick (they read shared snapshots). Each server runs on its own thread with its own
//! single-threaded tokio runtime, so it answers even while the actor system is busy.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 1024 * 1024;
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Method, e.g. `GET`.
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// Body bytes as text (lossy).
    pub body: String,
}

/// A response to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

impl Response {
    /// A JSON response.
    pub fn json(status: u16, body: String) -> Self {
        Self {
            status,
            content_type: "application/json",
            body,
        }
    }

    /// A plain-text response.
    pub fn text(status: u16, body: String) -> Self {
        Self {
            status,
            content_type: "text/plain; version=0.0.4",
            body,
        }
    }

    /// `{"error": msg}` with `status`.
    pub fn error(status: u16, msg: &str) -> Self {
        Self::json(status, serde_json::json!({ "error": msg }).to_string())
    }
}

/// A synchronous request handler.
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Head fields the server and client need.
struct Head {
    first_line: String,
    content_length: Option<usize>,
    content_type: String,
    chunked: bool,
}

fn parse_head(raw: &[u8]) -> Result<Head, &'static str> {
    let text = std::str::from_utf8(raw).map_err(|_| "head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let first_line = lines.next().ok_or("empty head")?.to_string();
    let mut content_length = None;
    let mut content_type = String::new();
    let mut chunked = false;
    for line in lines.filter(|l| !l.is_empty()) {
        let (k, v) = line.split_once(':').ok_or("malformed header")?;
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            content_length = Some(v.parse::<usize>().map_err(|_| "bad content-length")?);
        } else if k.eq_ignore_ascii_case("content-type") {
            content_type = v.to_string();
        } else if k.eq_ignore_ascii_case("transfer-encoding") && !v.eq_ignore_ascii_case("identity")
        {
            chunked = true;
        }
    }
    Ok(Head {
        first_line,
        content_length,
        content_type,
        chunked,
    })
}

async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> Result<Request, Response> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = find_head_end(&buf) {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return Err(Response::error(413, "request head too large"));
        }
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|_| Response::error(400, "read error"))?;
        if n == 0 {
            return Err(Response::error(400, "connection closed mid-request"));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = parse_head(&buf[..head_end]).map_err(|e| Response::error(400, e))?;
    let mut parts = head.first_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(Response::error(400, "malformed request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Response::error(400, "unsupported HTTP version"));
    }
    if head.chunked {
        return Err(Response::error(411, "chunked bodies are not supported"));
    }
    let len = head.content_length.unwrap_or(0);
    if len > MAX_BODY {
        return Err(Response::error(413, "request body too large"));
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|_| Response::error(400, "read error"))?;
        if n == 0 {
            return Err(Response::error(400, "connection closed mid-body"));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    let path = target.split('?').next().unwrap_or(target).to_string();
    Ok(Request {
        method: method.to_string(),
        path,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

async fn write_response<S: AsyncWrite + Unpin>(s: &mut S, r: &Response) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(r.body.as_bytes()).await?;
    s.flush().await?;
    s.shutdown().await
}

/// Serves one connection: reads a request, runs `handler`, writes the response.
pub async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, handler: Handler) {
    let resp = match tokio::time::timeout(REQUEST_DEADLINE, read_request(&mut s)).await {
        Ok(Ok(req)) => {
            // On the blocking pool: a handler that waits (a read-back behind an apply) must
            // not hold up the server's other connections.
            let h = Arc::clone(&handler);
            tokio::task::spawn_blocking(move || h(&req))
                .await
                .unwrap_or_else(|_| Response::error(500, "handler panicked"))
        }
        Ok(Err(resp)) => resp,
        Err(_) => Response::error(408, "request timed out"),
    };
    if let Err(e) = write_response(&mut s, &resp).await {
        tracing::debug!(error = %e, "failed to write HTTP response");
    }
}

/// Error of the client side.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting, writing or reading failed.
    #[error("I/O error talking to {target}: {source}")]
    Io {
        /// Where we were talking to.
        target: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The response could not be parsed.
    #[error("malformed HTTP response: {0}")]
    Malformed(String),
    /// No complete response within the deadline.
    #[error("timed out waiting for a response")]
    Timeout,
}

/// Sends one request over `s` and returns `(status, body)`.
pub async fn request_over<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    target: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), ClientError> {
    let io = |source| ClientError::Io {
        target: target.to_string(),
        source,
    };
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.map_err(io)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.map_err(io)?;
    let end = find_head_end(&raw).ok_or_else(|| ClientError::Malformed("no head".into()))?;
    let head = parse_head(&raw[..end]).map_err(|e| ClientError::Malformed(e.into()))?;
    let status = head
        .first_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| ClientError::Malformed(head.first_line.clone()))?;
    let mut rest = raw[end..].to_vec();
    if let Some(len) = head.content_length {
        rest.truncate(len);
    }
    Ok((status, String::from_utf8_lossy(&rest).into_owned()))
}

/// Sends one request to the Unix socket `socket` from a blocking context (an admin handler
/// forwarding to another process's admin socket) and returns `(status, content type, body)`.
/// `timeout` bounds each read and write.
pub fn request_blocking(
    socket: &std::path::Path,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String, String), ClientError> {
    use std::io::{Read, Write};
    let target = socket.display().to_string();
    let io = |source| ClientError::Io {
        target: target.clone(),
        source,
    };
    let mut s = std::os::unix::net::UnixStream::connect(socket).map_err(io)?;
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_write_timeout(Some(timeout)).map_err(io)?;
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout,
        _ => io(e),
    })?;
    let end = find_head_end(&raw).ok_or_else(|| ClientError::Malformed("no head".into()))?;
    let head = parse_head(&raw[..end]).map_err(|e| ClientError::Malformed(e.into()))?;
    let status = head
        .first_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| ClientError::Malformed(head.first_line.clone()))?;
    let mut rest = raw[end..].to_vec();
    if let Some(len) = head.content_length {
        rest.truncate(len);
    }
    Ok((
        status,
        head.content_type,
        String::from_utf8_lossy(&rest).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trip_over_duplex() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let handler: Handler = Arc::new(|r: &Request| {
            Response::json(
                200,
                format!(
                    "{{\"m\":\"{}\",\"p\":\"{}\",\"b\":{}}}",
                    r.method, r.path, r.body
                ),
            )
        });
        let srv = tokio::spawn(serve_connection(server, handler));
        let (code, body) = request_over(client, "duplex", "POST", "/faults?x=1", Some("[1]"))
            .await
            .unwrap();
        srv.await.unwrap();
        assert_eq!(code, 200);
        assert_eq!(body, r#"{"m":"POST","p":"/faults","b":[1]}"#);
    }

    #[tokio::test]
    async fn malformed_request_gets_400_and_chunked_411() {
        for (raw, want) in [
            ("NONSENSE\r\n\r\n", 400u16),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
            ("GET / HTTP/1.1\r\nContent-Length: zz\r\n\r\n", 400),
        ] {
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            let handler: Handler = Arc::new(|_r: &Request| Response::json(200, "{}".into()));
            let srv = tokio::spawn(serve_connection(server, handler));
            client.write_all(raw.as_bytes()).await.unwrap();
            let mut out = String::new();
            client.read_to_string(&mut out).await.unwrap();
            srv.await.unwrap();
            assert!(
                out.starts_with(&format!("HTTP/1.1 {want} ")),
                "{raw:?} -> {out}"
            );
        }
    }
}
