//! Drop attribution (`DropAttributionEnabled`): the dataplane reports denied
//! packets with the rule that denied them, and `GET /drops` / `felix admin
//! drops` show the latest.
//!
//! In iptables and nftables mode every deny the renderer writes (a policy's
//! or profile's deny rule, a tier's end, an endpoint chain's final deny) is
//! preceded by a rate-limited NFLOG of the same match
//! ([`crate::dataplane::rules::drop_prefix`]): at most `DropAttributionRateLimit`
//! reports per second per rule, so a flood costs bounded CPU. [`reader`]
//! receives them on the NFLOG group and [`attribute`] names the tier,
//! policy or profile, rule and endpoints from the desired view.
//!
//! In eBPF mode the policy interpreter itself reports each denied packet into a ring buffer
//! with the policy handle and record (or endpoint-list record) that denied it, rate-limited
//! per rule in the program (`felix_bpf::drops`); [`bpf_reader`] reads it and resolves the
//! numbers with the names `driver/bpf`'s writer keeps.
//!
//! | file | what |
//! |---|---|
//! | [`nflog`] | the nfnetlink_log messages and their parse |
//! | [`reader`] | the socket and its thread |
//! | [`attribute`] | prefix + packet (or eBPF report) -> [`DropRecord`] |
//! | [`bpf_reader`] | eBPF mode: the `cali_drops` ring buffer and its thread |

pub mod attribute;
pub mod bpf_reader;
pub mod nflog;
pub mod reader;

use std::collections::VecDeque;
use std::sync::Arc;

use felix_actors::http::{Handler, Request, Response};
use parking_lot::Mutex;
use serde::Serialize;

/// How many drops `GET /drops` keeps.
pub const KEPT: usize = 1000;

/// One reported drop.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DropRecord {
    /// Increasing number of the report (for `--follow`).
    pub seq: u64,
    /// When it was received (RFC 3339).
    pub time: String,
    /// Source address.
    pub src: Option<String>,
    /// Destination address.
    pub dst: Option<String>,
    /// IP protocol number.
    pub protocol: Option<u8>,
    /// Source port (TCP, UDP, SCTP).
    pub src_port: Option<u16>,
    /// Destination port (TCP, UDP, SCTP).
    pub dst_port: Option<u16>,
    /// The source's workload (`namespace/pod`) or host endpoint, if local.
    pub src_endpoint: Option<String>,
    /// The destination's.
    pub dst_endpoint: Option<String>,
    /// What denied it, in `felix explain`'s form, plus `direction`.
    pub decided_by: serde_json::Value,
    /// The raw NFLOG prefix.
    pub prefix: String,
}

/// The latest drops (bounded), shared by the reader and the admin socket.
///
/// Invariant: a reader that stopped says so. Once [`DropRing::stopped`] recorded why,
/// `GET /drops` answers 503 with the reason instead of a list that would silently stay
/// empty.
#[derive(Debug, Clone, Default)]
pub struct DropRing {
    inner: Arc<Mutex<(u64, VecDeque<DropRecord>)>>,
    stopped: Arc<Mutex<Option<String>>>,
}

impl DropRing {
    /// An empty ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a record (numbering it), dropping the oldest beyond [`KEPT`].
    pub fn push(&self, mut r: DropRecord) {
        let mut g = self.inner.lock();
        g.0 += 1;
        r.seq = g.0;
        g.1.push_back(r);
        while g.1.len() > KEPT {
            g.1.pop_front();
        }
    }

    /// The kept records, oldest first.
    pub fn list(&self) -> Vec<DropRecord> {
        self.inner.lock().1.iter().cloned().collect()
    }

    /// How many drops were ever reported.
    pub fn total(&self) -> u64 {
        self.inner.lock().0
    }

    /// Records that the reader stopped, and why.
    pub fn stopped(&self, why: String) {
        *self.stopped.lock() = Some(why);
    }

    /// `GET /drops`: the kept records as a JSON array, or 503 naming why the reader stopped.
    pub fn handler(&self) -> Handler {
        let me = self.clone();
        Arc::new(move |_req: &Request| {
            if let Some(why) = me.stopped.lock().as_deref() {
                return Response::error(503, &format!("the drop reader stopped: {why}"));
            }
            match serde_json::to_string(&me.list()) {
                Ok(b) => Response::json(200, b),
                Err(e) => Response::error(500, &e.to_string()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_latest_and_numbers_every_report() {
        let ring = DropRing::new();
        let rec = DropRecord {
            seq: 0,
            time: String::new(),
            src: None,
            dst: None,
            protocol: None,
            src_port: None,
            dst_port: None,
            src_endpoint: None,
            dst_endpoint: None,
            decided_by: serde_json::Value::Null,
            prefix: String::new(),
        };
        for _ in 0..KEPT + 5 {
            ring.push(rec.clone());
        }
        let l = ring.list();
        assert_eq!(l.len(), KEPT);
        assert_eq!((l[0].seq, l[KEPT - 1].seq), (6, KEPT as u64 + 5));
        assert_eq!(ring.total(), KEPT as u64 + 5);
    }

    #[test]
    fn a_reader_that_stopped_says_so() {
        let ring = DropRing::new();
        let get = Request {
            method: "GET".into(),
            path: "/drops".into(),
            body: String::new(),
        };
        assert_eq!((ring.handler())(&get).status, 200);
        ring.stopped("NFLOG group 30: Bad file descriptor".into());
        let r = (ring.handler())(&get);
        assert_eq!(r.status, 503);
        assert!(r.body.contains("Bad file descriptor"), "{}", r.body);
    }
}
