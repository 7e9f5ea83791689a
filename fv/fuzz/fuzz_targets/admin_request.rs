//! Fuzz target: the admin socket's request reader (`actors/src/http.rs`: request head,
//! `Content-Length` body) and the request bodies its endpoints parse (`POST /faults`,
//! `POST /explain` over the view of `examples/datastore`), through `serve_connection` as
//! the admin server runs it, over an in-memory connection.
//!
//! Input: one control byte (the connection hands the server at most that many bytes per
//! read, or everything at once when 0), then the bytes a client sends.
//!
//! Checked, whatever the bytes:
//! * no panic, and the answer is one well-formed HTTP/1.1 response whose `Content-Length`
//!   is its body's length;
//! * a request that reaches the endpoints is well-formed (a method without spaces, a path
//!   without its query string, at most `Content-Length` bytes of body), and sent again in
//!   canonical form it is read as the same request and answered with the same status;
//! * how the bytes are split into reads changes nothing;
//! * a request that does not reach the endpoints is answered 4xx.

#![no_main]

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use felix::calc::view::DataplaneView;
use felix_actors::http::{serve_connection, Handler, Request};
use felix_actors::metrics::Metrics;
use felix_actors::seam::FaultRegistry;
use felix_actors::status::{StatusHandle, StatusSnapshot};
use felix_actors::AdminContext;
use libfuzzer_sys::fuzz_target;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A client connection: reads hand out `input` at most `step` bytes at a time, then end;
/// writes are collected.
struct Conn {
    input: Vec<u8>,
    at: usize,
    step: usize,
    output: Vec<u8>,
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = (self.input.len() - self.at)
            .min(buf.remaining())
            .min(self.step);
        let at = self.at;
        buf.put_slice(&self.input[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.output.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    view: Arc<Mutex<DataplaneView>>,
    settings: felix::explain::Settings,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/datastore");
        let paths = [dir];
        let loaded = felix::cli::calc::load_states(&paths).expect("examples/datastore loads");
        let view = felix::cli::calc::replay("node1", &paths, loaded.states, |_, _, _| Ok(()))
            .expect("examples/datastore replays");
        Fixture {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a tokio runtime"),
            view: Arc::new(Mutex::new(view)),
            settings: felix::explain::Settings::from_config(&felix_config::Config::default()),
        }
    })
}

/// What the server answered (status, body) and the request its endpoints saw, if any.
fn serve(input: &[u8], step: usize) -> (u16, String, Option<Request>) {
    let f = fixture();
    let status = StatusHandle::new(StatusSnapshot {
        in_sync: true,
        dataplane: "nftables".into(),
        applies: 0,
        last_apply: None,
        actors: Vec::new(),
    });
    let ctx = AdminContext::new(status, FaultRegistry::new(), Metrics::new());
    ctx.route(
        "POST",
        "/explain",
        felix::explain::admin::explain_handler(f.view.clone(), f.settings.clone(), "node1".into()),
    );
    let seen: Arc<Mutex<Option<Request>>> = Arc::default();
    let inner = ctx.handler();
    let record = seen.clone();
    let handler: Handler = Arc::new(move |r: &Request| {
        *record.lock() = Some(r.clone());
        inner(r)
    });
    let mut conn = Conn {
        input: input.to_vec(),
        at: 0,
        step,
        output: Vec::new(),
    };
    f.rt.block_on(serve_connection(&mut conn, handler));
    let (code, body) = parse_response(&conn.output);
    let seen = seen.lock().take();
    (code, body, seen)
}

/// Checks the response's form; returns its status and body.
fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = std::str::from_utf8(raw).expect("the response is UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "{status_line:?}");
    let code: u16 = parts
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("status line {status_line:?}"));
    let length: usize = lines
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length in {head:?}"));
    assert_eq!(length, body.len(), "Content-Length of {head:?}");
    (code, body.to_string())
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, input)) = data.split_first() else {
        return;
    };
    let step = if step == 0 {
        usize::MAX
    } else {
        usize::from(step)
    };
    let (code, _, seen) = serve(input, step);
    if step != usize::MAX {
        let (code_whole, _, seen_whole) = serve(input, usize::MAX);
        assert_eq!(seen, seen_whole, "read size changes the request");
        assert_eq!(code, code_whole, "read size changes the status");
    }
    let Some(req) = seen else {
        assert!(
            (400..500).contains(&code),
            "status {code} without a request"
        );
        return;
    };
    assert!(!req.method.contains(' '), "{req:?}");
    assert!(
        !req.path.contains(' ') && !req.path.contains('?'),
        "{req:?}"
    );
    let canonical = format!(
        "{} {} HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}",
        req.method,
        req.path,
        req.body.len(),
        req.body
    );
    let (code_again, _, again) = serve(canonical.as_bytes(), usize::MAX);
    assert_eq!(again.as_ref(), Some(&req), "canonical form {canonical:?}");
    assert_eq!(code_again, code, "canonical form {canonical:?}");
});
