//! etcd v3 operations: typed results for paginated ranges at a fixed
//! revision, puts, deletes, compaction and a watch stream.
//!
//! Reads (`Range`: listings, single keys, the current revision) use etcd's
//! native gRPC through [`super::grpc`], with the messages of [`super::pb`]:
//! etcd serves them for a fraction of the CPU its JSON gateway needs, and
//! they dominate an initial sync.  Writes, compaction and the watch use the
//! JSON gateway on the same port (`/v3/kv/*`, `/v3/watch`: keys and values
//! are base64 strings, 64-bit integers decimal strings) through
//! [`super::http`].  Both transports share the endpoints and TLS settings.
//!
//! With several endpoints, a request that cannot connect moves on to the
//! next endpoint (remembering which one worked); any other failure is
//! returned to the caller, who decides whether to retry.

use std::io::BufReader;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::de::{self, Deserializer};
use serde::Deserialize;

use bytes::Bytes;
use prost::Message;

use super::config::EtcdConfig;
use super::grpc::{CallLimits, GrpcError, GrpcTransport, Pending};
use super::http::{self, Endpoint, HttpError, Limits};
use super::pb;
use super::tls::{self, TlsFiles};

/// gRPC status code etcd uses for "required revision has been compacted".
const CODE_OUT_OF_RANGE: i64 = 11;
/// gRPC status code for "unavailable" (etcd stopping, no leader, ...).
const CODE_UNAVAILABLE: i32 = 14;
/// Largest unary response accepted (a page of large values).
const MAX_RESPONSE: usize = 256 * 1024 * 1024;
/// gRPC method of a range read.
const RANGE: &str = "/etcdserverpb.KV/Range";

/// Failure of an etcd operation.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint could be reached, or the connection broke.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// TLS with the endpoint(s) failed (untrusted or misnamed server
    /// certificate, client certificate refused).
    #[error("etcd TLS failure: {0}")]
    Tls(String),
    /// The revision asked for has been compacted away.
    #[error("etcd revision {revision} has been compacted (compact revision {compact_revision})")]
    Compacted {
        /// The revision asked for.
        revision: i64,
        /// The oldest revision etcd still has.
        compact_revision: i64,
    },
    /// etcd answered with an error.
    #[error("etcd error (code {code}): {message}")]
    Server {
        /// gRPC status code.
        code: i64,
        /// etcd's error message.
        message: String,
    },
    /// The answer could not be understood.
    #[error("unexpected answer from etcd: {0}")]
    Protocol(String),
    /// The caller's stop flag was raised.
    #[error("stopped")]
    Stopped,
}

impl From<HttpError> for EtcdError {
    fn from(e: HttpError) -> Self {
        match e {
            HttpError::Stopped => EtcdError::Stopped,
            HttpError::Protocol { .. } => EtcdError::Protocol(e.to_string()),
            HttpError::Tls { .. } => EtcdError::Tls(e.to_string()),
            HttpError::Connect { .. } | HttpError::Io { .. } => {
                EtcdError::Unavailable(e.to_string())
            }
        }
    }
}

impl From<GrpcError> for EtcdError {
    fn from(e: GrpcError) -> Self {
        match e {
            GrpcError::Stopped => EtcdError::Stopped,
            GrpcError::Tls(_) => EtcdError::Tls(e.to_string()),
            GrpcError::Connect(_) | GrpcError::Io { .. } => EtcdError::Unavailable(e.to_string()),
            GrpcError::Status { code, .. } if code == CODE_UNAVAILABLE => {
                EtcdError::Unavailable(e.to_string())
            }
            GrpcError::Status { code, message } => EtcdError::Server {
                code: i64::from(code),
                message,
            },
            GrpcError::Protocol { .. } => EtcdError::Protocol(e.to_string()),
        }
    }
}

/// One stored key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key's bytes.
    pub key: Vec<u8>,
    /// The value's bytes.
    pub value: Vec<u8>,
    /// Revision of the last change to the key.
    pub mod_revision: i64,
    /// Revision at which the key was created.
    pub create_revision: i64,
}

/// One page of a range read.
#[derive(Debug)]
pub struct RangePage {
    /// The revision the read was served at.
    pub revision: i64,
    /// The keys read, in key order.
    pub kvs: Vec<KeyValue>,
    /// More keys follow the last one returned.
    pub more: bool,
}

/// A key change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// The key was created or changed.
    Put(KeyValue),
    /// The key was deleted.
    Delete {
        /// The deleted key.
        key: Vec<u8>,
        /// Revision of the deletion.
        mod_revision: i64,
    },
}

/// One message of a watch stream.
#[derive(Debug)]
pub enum WatchMessage {
    /// The watch is established.
    Created {
        /// Revision of the response header.
        revision: i64,
    },
    /// Changes, all at or below `revision`.
    Events {
        /// Revision of the response header.
        revision: i64,
        /// The changes, in order.
        events: Vec<WatchEvent>,
    },
    /// A progress notification: nothing changed up to `revision`.
    Progress {
        /// Revision up to which nothing changed.
        revision: i64,
    },
    /// etcd cancelled the watch; `compact_revision > 0` when the start
    /// revision had been compacted.
    Canceled {
        /// The oldest revision etcd still has; 0 if not compacted.
        compact_revision: i64,
        /// etcd's reason for cancelling.
        reason: String,
    },
}

/// A client for one etcd cluster (a list of member URLs).
#[derive(Debug)]
pub struct EtcdClient {
    endpoints: Vec<Endpoint>,
    /// TLS settings, present when an endpoint is `https://`.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Index of the endpoint that last answered.
    current: AtomicUsize,
    connect_timeout: Duration,
    request_timeout: Duration,
    stop: Option<Arc<AtomicBool>>,
    /// Native gRPC for reads.
    grpc: GrpcTransport,
}

/// A page of a range read whose keys and values share the answer's
/// buffer; see [`EtcdClient::finish_range_shared`].
pub(crate) struct SharedPage {
    pub revision: i64,
    pub kvs: Vec<pb::KeyValue>,
    pub more: bool,
    /// Keys in the whole range read (from this page's first key to the range's end).
    pub count: i64,
}

/// A range read started by [`EtcdClient::start_range`].
pub struct PendingRange {
    pending: Pending,
    revision: i64,
}

impl EtcdClient {
    /// A client for `urls` (each `http[s]://HOST[:PORT]`; `https` trusts
    /// the system CAs).  `stop`, when given, abandons blocked requests
    /// once raised.
    pub fn new(urls: &[String], stop: Option<Arc<AtomicBool>>) -> Result<EtcdClient, String> {
        EtcdClient::with_tls(urls, &TlsFiles::default(), stop)
    }

    /// A client for the endpoints and TLS files of `config`.
    pub fn from_config(
        config: &EtcdConfig,
        stop: Option<Arc<AtomicBool>>,
    ) -> Result<EtcdClient, String> {
        EtcdClient::with_tls(&config.endpoints, &config.tls_files(), stop)
    }

    /// A client for `urls`, with `files` for the `https://` ones (the
    /// files are read here, once; the error names the file at fault).
    pub fn with_tls(
        urls: &[String],
        files: &TlsFiles,
        stop: Option<Arc<AtomicBool>>,
    ) -> Result<EtcdClient, String> {
        if urls.is_empty() {
            return Err("no etcd endpoints given".into());
        }
        let endpoints = urls
            .iter()
            .map(|u| Endpoint::parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        let tls = if endpoints.iter().any(|e| e.tls) {
            Some(tls::client_config(files)?)
        } else {
            None
        };
        let connect_timeout = Duration::from_secs(2);
        let grpc = GrpcTransport::new(endpoints.clone(), tls.as_ref(), connect_timeout);
        Ok(EtcdClient {
            endpoints,
            tls,
            current: AtomicUsize::new(0),
            connect_timeout,
            request_timeout: Duration::from_secs(30),
            stop,
            grpc,
        })
    }

    /// A second client with the same endpoints and settings (and a fresh
    /// endpoint preference).
    pub fn clone_settings(&self) -> EtcdClient {
        EtcdClient {
            endpoints: self.endpoints.clone(),
            tls: self.tls.clone(),
            current: AtomicUsize::new(0),
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            stop: self.stop.clone(),
            grpc: GrpcTransport::new(
                self.endpoints.clone(),
                self.tls.as_ref(),
                self.connect_timeout,
            ),
        }
    }

    /// Changes the per-request timeout (default 30 s).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The endpoints as URLs.
    pub fn urls(&self) -> Vec<String> {
        self.endpoints.iter().map(Endpoint::url).collect()
    }

    /// Opens an exchange with the first endpoint that accepts a connection,
    /// starting from the one that last worked.
    fn open(
        &self,
        path: &str,
        body: &[u8],
        limits: Limits,
    ) -> Result<(u16, http::Body), EtcdError> {
        let n = self.endpoints.len();
        let start = self.current.load(Ordering::Relaxed) % n;
        let mut failures = Vec::new();
        let mut tls_failed = false;
        for i in 0..n {
            let idx = (start + i) % n;
            match http::post(
                &self.endpoints[idx],
                self.tls.as_ref(),
                path,
                body,
                self.connect_timeout,
                limits.clone(),
            ) {
                Ok(r) => {
                    self.current.store(idx, Ordering::Relaxed);
                    return Ok(r);
                }
                Err(e @ HttpError::Connect { .. }) => failures.push(e.to_string()),
                Err(e @ HttpError::Tls { .. }) => {
                    tls_failed = true;
                    failures.push(e.to_string());
                }
                Err(e) => return Err(e.into()),
            }
        }
        if tls_failed {
            Err(EtcdError::Tls(failures.join("; ")))
        } else {
            Err(EtcdError::Unavailable(failures.join("; ")))
        }
    }

    /// A unary call: POST `body`, parse the JSON answer.
    fn call<T: for<'de> Deserialize<'de>>(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<T, EtcdError> {
        let bytes = self.call_raw(path, body)?;
        parse(path, &bytes)
    }

    /// A unary call returning the raw 200 answer.
    fn call_raw(&self, path: &str, body: &serde_json::Value) -> Result<Vec<u8>, EtcdError> {
        let body = serde_json::to_vec(body).map_err(|e| EtcdError::Protocol(e.to_string()))?;
        let limits = Limits {
            stop: self.stop.clone(),
            deadline: Some(felix_actors::clock::real_now() + self.request_timeout),
        };
        let (code, reader) = self.open(path, &body, limits)?;
        let bytes = reader.read_all(MAX_RESPONSE)?;
        if code != 200 {
            return Err(gateway_error(code, &bytes));
        }
        Ok(bytes)
    }

    /// Reads up to `limit` keys in `[key, range_end)` at `revision`
    /// (0: the latest revision).
    pub fn range(
        &self,
        key: &[u8],
        range_end: &[u8],
        revision: i64,
        limit: i64,
    ) -> Result<RangePage, EtcdError> {
        self.range_inner(key, range_end, revision, limit, false)
    }

    /// As [`EtcdClient::range`], but without values (keys and revisions
    /// only; `value` is empty).
    pub fn range_keys(
        &self,
        key: &[u8],
        range_end: &[u8],
        revision: i64,
        limit: i64,
    ) -> Result<RangePage, EtcdError> {
        self.range_inner(key, range_end, revision, limit, true)
    }

    fn range_inner(
        &self,
        key: &[u8],
        range_end: &[u8],
        revision: i64,
        limit: i64,
        keys_only: bool,
    ) -> Result<RangePage, EtcdError> {
        let pending = self.start_range_inner(key, range_end, revision, limit, keys_only)?;
        self.finish_range(pending)
    }

    /// Starts [`EtcdClient::range`] in the background (the next page of
    /// a listing, read while the previous one is processed); the answer
    /// is collected by [`EtcdClient::finish_range`].
    pub fn start_range(
        &self,
        key: &[u8],
        range_end: &[u8],
        revision: i64,
        limit: i64,
    ) -> Result<PendingRange, EtcdError> {
        self.start_range_inner(key, range_end, revision, limit, false)
    }

    fn start_range_inner(
        &self,
        key: &[u8],
        range_end: &[u8],
        revision: i64,
        limit: i64,
        keys_only: bool,
    ) -> Result<PendingRange, EtcdError> {
        let request = pb::RangeRequest {
            key: key.to_vec(),
            range_end: range_end.to_vec(),
            limit,
            revision,
            keys_only,
            ..Default::default()
        };
        let pending = self
            .grpc
            .spawn(RANGE, Bytes::from(request.encode_to_vec()), &self.limits())
            .map_err(|e| range_error(e, revision))?;
        Ok(PendingRange { pending, revision })
    }

    /// Waits for a range read started by [`EtcdClient::start_range`].
    pub fn finish_range(&self, pending: PendingRange) -> Result<RangePage, EtcdError> {
        let page = self.finish_range_shared(pending)?;
        let kvs = page
            .kvs
            .into_iter()
            .map(|kv| KeyValue {
                key: kv.key.to_vec(),
                value: kv.value.to_vec(),
                mod_revision: kv.mod_revision,
                create_revision: kv.create_revision,
            })
            .collect();
        Ok(RangePage {
            revision: page.revision,
            kvs,
            more: page.more,
        })
    }

    /// As [`EtcdClient::finish_range`], with keys and values left as
    /// slices of the answer (no copy; the answer stays allocated while any
    /// of them is alive).
    pub(crate) fn finish_range_shared(
        &self,
        pending: PendingRange,
    ) -> Result<SharedPage, EtcdError> {
        let revision = pending.revision;
        let bytes = self
            .grpc
            .wait(pending.pending, &self.limits())
            .map_err(|e| range_error(e, revision))?;
        let resp = pb::RangeResponse::decode(bytes)
            .map_err(|e| EtcdError::Protocol(format!("RangeResponse: {e}")))?;
        Ok(SharedPage {
            revision: resp.header.map_or(0, |h| h.revision),
            kvs: resp.kvs,
            more: resp.more,
            count: resp.count,
        })
    }

    /// As [`EtcdClient::range`], over the JSON gateway.  The syncer does
    /// not use it; it is kept as the reference the gRPC path is tested
    /// against, and for diagnosing a server whose gRPC misbehaves.
    pub fn range_gateway(
        &self,
        key: &[u8],
        range_end: &[u8],
        revision: i64,
        limit: i64,
    ) -> Result<RangePage, EtcdError> {
        let mut req = serde_json::json!({
            "key": B64.encode(key),
            "range_end": B64.encode(range_end),
            "limit": limit.to_string(),
        });
        if revision > 0 {
            req["revision"] = serde_json::Value::String(revision.to_string());
        }
        let bytes = self.call_raw("/v3/kv/range", &req).map_err(|e| match e {
            EtcdError::Server { code, message }
                if code == CODE_OUT_OF_RANGE && message.contains("compacted") =>
            {
                EtcdError::Compacted {
                    revision,
                    compact_revision: 0,
                }
            }
            other => other,
        })?;
        // Keys and values borrow the base64 text from `bytes` (it has no
        // escapes) and are decoded straight into their buffers.
        let resp: PageResp<'_> = parse("/v3/kv/range", &bytes)?;
        let kvs = resp
            .kvs
            .iter()
            .map(PageKv::decode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RangePage {
            revision: resp.header.revision,
            kvs,
            more: resp.more,
        })
    }

    /// The bounds of one gRPC call.
    fn limits(&self) -> CallLimits {
        CallLimits {
            stop: self.stop.clone(),
            deadline: felix_actors::clock::real_now() + self.request_timeout,
            max_message: MAX_RESPONSE,
        }
    }

    /// Reads every key with `prefix` at one revision, page by page, and
    /// returns them with that revision.  Meant for small listings (the CLI
    /// and tests); the syncer pages itself to bound memory.
    pub fn get_prefix(&self, prefix: &[u8], page: i64) -> Result<(i64, Vec<KeyValue>), EtcdError> {
        let end = prefix_end(prefix);
        let mut start = prefix.to_vec();
        let mut revision = 0;
        let mut out = Vec::new();
        loop {
            let p = self.range(&start, &end, revision, page)?;
            if revision == 0 {
                revision = p.revision;
            }
            let more = p.more;
            if let Some(last) = p.kvs.last() {
                start = last.key.clone();
                start.push(0);
            }
            out.extend(p.kvs);
            if !more {
                return Ok((revision, out));
            }
        }
    }

    /// Reads one key.
    pub fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, EtcdError> {
        let page = self.range_inner(key, &[], 0, 1, false)?;
        Ok(page.kvs.into_iter().next())
    }

    /// Stores `value` under `key`; returns the new revision.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<i64, EtcdError> {
        let req = serde_json::json!({ "key": B64.encode(key), "value": B64.encode(value) });
        let resp: HeaderOnly = self.call("/v3/kv/put", &req)?;
        Ok(resp.header.revision)
    }

    /// Stores several keys in one transaction (etcd limits a transaction
    /// to 128 operations by default); returns the new revision.
    pub fn put_many(&self, pairs: &[(&[u8], &[u8])]) -> Result<i64, EtcdError> {
        let ops: Vec<serde_json::Value> = pairs
            .iter()
            .map(|(k, v)| {
                serde_json::json!({ "request_put": { "key": B64.encode(k), "value": B64.encode(v) } })
            })
            .collect();
        let req = serde_json::json!({ "success": ops });
        let resp: HeaderOnly = self.call("/v3/kv/txn", &req)?;
        Ok(resp.header.revision)
    }

    /// Grants a lease of `ttl` seconds; returns its id.
    pub fn lease_grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        let req = serde_json::json!({ "TTL": ttl });
        let resp: LeaseResp = self.call("/v3/lease/grant", &req)?;
        Ok(resp.id)
    }

    /// Stores `value` under `key`, attached to `lease` (the key goes when the lease ends).
    pub fn put_with_lease(&self, key: &[u8], value: &[u8], lease: i64) -> Result<i64, EtcdError> {
        let req = serde_json::json!({
            "key": B64.encode(key),
            "value": B64.encode(value),
            "lease": lease.to_string(),
        });
        let resp: HeaderOnly = self.call("/v3/kv/put", &req)?;
        Ok(resp.header.revision)
    }

    /// Deletes `key`; returns how many keys were deleted (0 or 1).
    pub fn delete(&self, key: &[u8]) -> Result<i64, EtcdError> {
        let req = serde_json::json!({ "key": B64.encode(key) });
        let resp: DeleteResp = self.call("/v3/kv/deleterange", &req)?;
        Ok(resp.deleted)
    }

    /// Deletes every key starting with `prefix`; returns how many.
    pub fn delete_prefix(&self, prefix: &[u8]) -> Result<i64, EtcdError> {
        let req = serde_json::json!({
            "key": B64.encode(prefix),
            "range_end": B64.encode(prefix_end(prefix)),
        });
        let resp: DeleteResp = self.call("/v3/kv/deleterange", &req)?;
        Ok(resp.deleted)
    }

    /// Compacts the key history up to `revision`.
    pub fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let req = serde_json::json!({ "revision": revision.to_string(), "physical": true });
        let _: HeaderOnly = self.call("/v3/kv/compaction", &req)?;
        Ok(())
    }

    /// The store's current revision.
    pub fn current_revision(&self) -> Result<i64, EtcdError> {
        let request = pb::RangeRequest {
            key: b"\0".to_vec(),
            count_only: true,
            ..Default::default()
        };
        let bytes = self
            .grpc
            .call(RANGE, Bytes::from(request.encode_to_vec()), &self.limits())?;
        let resp = pb::RangeResponse::decode(bytes)
            .map_err(|e| EtcdError::Protocol(format!("RangeResponse: {e}")))?;
        Ok(resp.header.map_or(0, |h| h.revision))
    }

    /// Starts watching `[key, range_end)` from `start_revision`.  The
    /// stream blocks until the next message; it ends (returns `None`) when
    /// the connection closes.
    pub fn watch(
        &self,
        key: &[u8],
        range_end: &[u8],
        start_revision: i64,
    ) -> Result<WatchStream, EtcdError> {
        let req = serde_json::json!({
            "create_request": {
                "key": B64.encode(key),
                "range_end": B64.encode(range_end),
                "start_revision": start_revision.to_string(),
                "progress_notify": true,
            }
        });
        let body = serde_json::to_vec(&req).map_err(|e| EtcdError::Protocol(e.to_string()))?;
        let limits = Limits {
            stop: self.stop.clone(),
            deadline: None,
        };
        let (code, reader) = self.open("/v3/watch", &body, limits)?;
        if code != 200 {
            let bytes = reader.read_all(1024 * 1024)?;
            return Err(gateway_error(code, &bytes));
        }
        let de = serde_json::Deserializer::from_reader(BufReader::with_capacity(64 * 1024, reader));
        Ok(WatchStream {
            inner: de.into_iter(),
        })
    }
}

/// A live watch; see [`EtcdClient::watch`].
pub struct WatchStream {
    inner: serde_json::StreamDeserializer<
        'static,
        serde_json::de::IoRead<BufReader<http::Body>>,
        WatchEnvelope,
    >,
}

impl WatchStream {
    /// The next message; `None` when the connection closed cleanly.
    pub fn next_message(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        let envelope = match self.inner.next()? {
            Ok(e) => e,
            Err(e) => {
                if e.is_io() {
                    let io: std::io::Error = e.into();
                    if http::is_stop(&io) {
                        return Some(Err(EtcdError::Stopped));
                    }
                    return Some(Err(EtcdError::Unavailable(format!(
                        "watch connection failed: {io}"
                    ))));
                }
                if e.is_eof() {
                    return Some(Err(EtcdError::Unavailable(
                        "watch connection closed mid-message".into(),
                    )));
                }
                return Some(Err(EtcdError::Protocol(format!("watch stream: {e}"))));
            }
        };
        Some(envelope.into_message())
    }
}

/// A range failure as an [`EtcdError`], compaction of `revision` typed.
fn range_error(e: GrpcError, revision: i64) -> EtcdError {
    match e {
        GrpcError::Status { code, ref message }
            if i64::from(code) == CODE_OUT_OF_RANGE && message.contains("compacted") =>
        {
            EtcdError::Compacted {
                revision,
                compact_revision: 0,
            }
        }
        other => other.into(),
    }
}

/// The beginning of the key range after every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): to the end of the key space.
    vec![0]
}

/// Parses a JSON answer of `path`.
fn parse<'a, T: Deserialize<'a>>(path: &str, bytes: &'a [u8]) -> Result<T, EtcdError> {
    serde_json::from_slice(bytes)
        .map_err(|e| EtcdError::Protocol(format!("{path}: {e}: {}", preview(bytes))))
}

fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
    text.into_owned()
}

/// Turns a non-200 gateway answer into an error.
fn gateway_error(code: u16, bytes: &[u8]) -> EtcdError {
    match serde_json::from_slice::<GatewayError>(bytes) {
        Ok(g) => EtcdError::Server {
            code: g.code,
            message: g.message.or(g.error).unwrap_or_default(),
        },
        Err(_) if code == 503 || code == 502 => {
            EtcdError::Unavailable(format!("HTTP {code}: {}", preview(bytes)))
        }
        Err(_) => EtcdError::Protocol(format!("HTTP {code}: {}", preview(bytes))),
    }
}

// ---------------------------------------------------------------------------
// Gateway JSON shapes
// ---------------------------------------------------------------------------

/// Accepts an int64 as a JSON number or a decimal string (the gateway
/// writes strings); absent means 0.
fn de_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Num {
        N(i64),
        S(String),
    }
    match Option::<Num>::deserialize(d)? {
        None => Ok(0),
        Some(Num::N(n)) => Ok(n),
        Some(Num::S(s)) => s.parse().map_err(de::Error::custom),
    }
}

#[derive(Deserialize, Default)]
struct Header {
    #[serde(default, deserialize_with = "de_i64")]
    revision: i64,
}

#[derive(Deserialize)]
struct HeaderOnly {
    #[serde(default)]
    header: Header,
}

/// A range answer whose base64 fields borrow from the response text.
#[derive(Deserialize)]
struct PageResp<'a> {
    #[serde(default)]
    header: Header,
    #[serde(default, borrow)]
    kvs: Vec<PageKv<'a>>,
    #[serde(default)]
    more: bool,
}

#[derive(Deserialize)]
struct PageKv<'a> {
    #[serde(default, borrow)]
    key: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    value: std::borrow::Cow<'a, str>,
    #[serde(default, deserialize_with = "de_i64")]
    mod_revision: i64,
    #[serde(default, deserialize_with = "de_i64")]
    create_revision: i64,
}

impl PageKv<'_> {
    fn decode(&self) -> Result<KeyValue, EtcdError> {
        Ok(KeyValue {
            key: b64(&self.key, "key")?,
            value: b64(&self.value, "value")?,
            mod_revision: self.mod_revision,
            create_revision: self.create_revision,
        })
    }
}

fn b64(text: &str, what: &str) -> Result<Vec<u8>, EtcdError> {
    B64.decode(text.as_bytes())
        .map_err(|e| EtcdError::Protocol(format!("bad base64 {what}: {e}")))
}

#[derive(Deserialize)]
struct LeaseResp {
    #[serde(rename = "ID", default, deserialize_with = "de_i64")]
    id: i64,
}

#[derive(Deserialize)]
struct DeleteResp {
    #[serde(default, deserialize_with = "de_i64")]
    deleted: i64,
}

#[derive(Deserialize)]
struct RawKv {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default, deserialize_with = "de_i64")]
    mod_revision: i64,
    #[serde(default, deserialize_with = "de_i64")]
    create_revision: i64,
}

impl RawKv {
    fn decode(self) -> Result<KeyValue, EtcdError> {
        let key = B64
            .decode(self.key.as_bytes())
            .map_err(|e| EtcdError::Protocol(format!("bad base64 key: {e}")))?;
        let value = B64
            .decode(self.value.as_bytes())
            .map_err(|e| EtcdError::Protocol(format!("bad base64 value: {e}")))?;
        Ok(KeyValue {
            key,
            value,
            mod_revision: self.mod_revision,
            create_revision: self.create_revision,
        })
    }
}

#[derive(Deserialize)]
struct GatewayError {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default, deserialize_with = "de_i64")]
    code: i64,
}

#[derive(Deserialize)]
struct WatchEnvelope {
    #[serde(default)]
    result: Option<WatchResp>,
    #[serde(default)]
    error: Option<GatewayError>,
}

#[derive(Deserialize)]
struct WatchResp {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    created: bool,
    #[serde(default)]
    canceled: bool,
    #[serde(default, deserialize_with = "de_i64")]
    compact_revision: i64,
    #[serde(default)]
    cancel_reason: String,
    #[serde(default)]
    events: Vec<RawEvent>,
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    kv: RawKv,
}

impl WatchEnvelope {
    fn into_message(self) -> Result<WatchMessage, EtcdError> {
        if let Some(e) = self.error {
            return Err(EtcdError::Server {
                code: e.code,
                message: e.message.or(e.error).unwrap_or_default(),
            });
        }
        let Some(r) = self.result else {
            return Err(EtcdError::Protocol("watch message without result".into()));
        };
        if r.canceled {
            return Ok(WatchMessage::Canceled {
                compact_revision: r.compact_revision,
                reason: r.cancel_reason,
            });
        }
        if r.created {
            return Ok(WatchMessage::Created {
                revision: r.header.revision,
            });
        }
        if r.events.is_empty() {
            return Ok(WatchMessage::Progress {
                revision: r.header.revision,
            });
        }
        let mut events = Vec::with_capacity(r.events.len());
        for e in r.events {
            let is_delete = e.kind.as_deref() == Some("DELETE");
            let kv = e.kv.decode()?;
            events.push(if is_delete {
                WatchEvent::Delete {
                    key: kv.key,
                    mod_revision: kv.mod_revision,
                }
            } else {
                WatchEvent::Put(kv)
            });
        }
        Ok(WatchMessage::Events {
            revision: r.header.revision,
            events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte() {
        assert_eq!(prefix_end(b"/calico/"), b"/calico0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn watch_messages_decode() {
        let created: WatchEnvelope =
            serde_json::from_str(r#"{"result":{"header":{"revision":"2"},"created":true}}"#)
                .unwrap();
        assert!(matches!(
            created.into_message().unwrap(),
            WatchMessage::Created { revision: 2 }
        ));
        let events: WatchEnvelope = serde_json::from_str(
            r#"{"result":{"header":{"revision":"3"},"events":[
                {"kv":{"key":"L2E=","create_revision":"2","mod_revision":"2","version":"1","value":"eyJ9"}},
                {"type":"DELETE","kv":{"key":"L2E=","mod_revision":"3"}}]}}"#,
        )
        .unwrap();
        match events.into_message().unwrap() {
            WatchMessage::Events { revision, events } => {
                assert_eq!(revision, 3);
                assert_eq!(
                    events,
                    vec![
                        WatchEvent::Put(KeyValue {
                            key: b"/a".to_vec(),
                            value: b"{\"}".to_vec(),
                            mod_revision: 2,
                            create_revision: 2
                        }),
                        WatchEvent::Delete {
                            key: b"/a".to_vec(),
                            mod_revision: 3
                        }
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        let canceled: WatchEnvelope = serde_json::from_str(
            r#"{"result":{"header":{},"canceled":true,"compact_revision":"7"}}"#,
        )
        .unwrap();
        assert!(matches!(
            canceled.into_message().unwrap(),
            WatchMessage::Canceled {
                compact_revision: 7,
                ..
            }
        ));
        let err: WatchEnvelope =
            serde_json::from_str(r#"{"error":{"code":14,"message":"unavailable"}}"#).unwrap();
        assert!(matches!(
            err.into_message(),
            Err(EtcdError::Server { code: 14, .. })
        ));
    }

    #[test]
    fn gateway_errors_map_to_typed_errors() {
        let e = gateway_error(
            400,
            br#"{"error":"etcdserver: mvcc: required revision has been compacted","message":"etcdserver: mvcc: required revision has been compacted","code":11}"#,
        );
        assert!(matches!(e, EtcdError::Server { code: 11, .. }));
        assert!(matches!(
            gateway_error(503, b"down"),
            EtcdError::Unavailable(_)
        ));
        assert!(matches!(
            gateway_error(404, b"nope"),
            EtcdError::Protocol(_)
        ));
    }
}
