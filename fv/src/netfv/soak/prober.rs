//! Real traffic during the soak: a stream of new TCP connections (a batch of
//! allowed and denied flows every 50 ms, each from the client workload's
//! namespace, successful only when the addressed server's identity comes
//! back) and long-lived connections between stable workloads, each
//! exercised every 50 ms.
//!
//! Invariants checked here, each a violation with the flow, the probe's
//! start and end and the chaos events around it:
//! * `denied-never-connects`: a probe of a flow denied since a change that
//!   was due before the probe started never connects;
//! * `allowed-connects`: a probe, started while felix is up, of a flow
//!   allowed since a change that was due before the probe started connects
//!   (to the addressed server) within the probe timeout (allowed probes that
//!   fail while felix is down or restarting are counted, not judged);
//! * `established-survives`: a long-lived connection's round trip never
//!   fails and never takes longer than the stall bound.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;

use super::model::{name, PORT};
use super::{lock, Shared};
use crate::netfv::traffic::Conn;

/// How often a batch of probes starts and a long-lived round trip runs.
pub const PERIOD: Duration = Duration::from_millis(50);

/// Where workload `i` lives: its namespace and addresses.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The workload's namespace.
    pub ns: String,
    /// Its IPv4 address.
    pub ip4: IpAddr,
    /// Its IPv6 address.
    pub ip6: IpAddr,
}

struct Outcome {
    flow: usize,
    start: Instant,
    end: Instant,
    answer: Result<String, String>,
}

/// A new connection from `ns` to `ip:port`, a line sent and the server's
/// identity read back, each step within `timeout`.
fn connect(ns: &str, ip: IpAddr, timeout: Duration) -> Result<String, String> {
    felix_netns::enter_netns(ns).map_err(|e| format!("entering {ns}: {e}"))?;
    let s = TcpStream::connect_timeout(&SocketAddr::new(ip, PORT), timeout)
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|_| s.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("socket options: {e}"))?;
    (&s).write_all(b"ping\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut line = String::new();
    match BufReader::new(&s).read_line(&mut line) {
        Ok(n) if n > 0 => Ok(line.trim().to_string()),
        Ok(_) => Err("closed without an answer".into()),
        Err(e) => Err(format!("no answer: {e}")),
    }
}

/// Runs the new-connection probes until `stop`: every [`PERIOD`], up to
/// `per_kind` allowed and `per_kind` denied flows, each probed on its own
/// thread with `timeout`; results are judged as they come in.
pub fn probe_loop(
    shared: &Shared,
    endpoints: &[Endpoint],
    per_kind: usize,
    timeout: Duration,
    stop: &AtomicBool,
    mut rng: StdRng,
) {
    let (tx, rx) = mpsc::channel::<Outcome>();
    let mut in_flight = 0usize;
    let mut next = felix_actors::clock::real_now();
    loop {
        while let Ok(o) = rx.try_recv() {
            in_flight -= 1;
            judge(shared, &o);
        }
        let stopping = stop.load(Ordering::Relaxed);
        if stopping && in_flight == 0 {
            return;
        }
        let now = felix_actors::clock::real_now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(10)));
            continue;
        }
        next += PERIOD;
        if stopping {
            continue;
        }
        let picks: Vec<(usize, crate::netfv::soak::flows::Flow)> = {
            let flows = lock(&shared.truth.flows);
            let mut p = flows.pick(true, per_kind, &mut rng);
            p.extend(flows.pick(false, per_kind, &mut rng));
            p.into_iter().map(|i| (i, flows.flows()[i])).collect()
        };
        for (i, f) in picks {
            let src = &endpoints[f.src];
            let dst = &endpoints[f.dst];
            let ip = if f.v6 { dst.ip6 } else { dst.ip4 };
            let ns = src.ns.clone();
            let tx = tx.clone();
            in_flight += 1;
            lock(&shared.report).probes += 1;
            std::thread::spawn(move || {
                let start = felix_actors::clock::real_now();
                let answer = connect(&ns, ip, timeout);
                let end = felix_actors::clock::real_now();
                let _ = tx.send(Outcome {
                    flow: i,
                    start,
                    end,
                    answer,
                });
            });
        }
    }
}

fn judge(shared: &Shared, o: &Outcome) {
    let flows = lock(&shared.truth.flows);
    let f = flows.flows()[o.flow];
    let verdict = flows.verdict(o.flow, o.start, o.end);
    let history = flows.history(o.flow);
    drop(flows);
    let facts = lock(&shared.truth.model).explain(f.src, f.dst);
    let timeline = lock(&shared.timeline);
    let mut report = lock(&shared.report);
    let Some(v) = verdict else {
        report.unjudged += 1;
        return;
    };
    let Some(due) = timeline.due(v.since, shared.bounds.converge) else {
        report.unjudged += 1;
        return;
    };
    if o.start < due {
        report.unjudged += 1;
        return;
    }
    let what = format!(
        "{} -> {} tcp/{PORT} {} probed {}..{} ({} ms)",
        name(f.src),
        name(f.dst),
        if f.v6 { "v6" } else { "v4" },
        timeline.rel(o.start),
        timeline.rel(o.end),
        o.end.duration_since(o.start).as_millis()
    );
    let changes: Vec<String> = history
        .iter()
        .map(|(t, a)| {
            format!(
                "{} {}",
                timeline.rel(*t),
                if *a { "allowed" } else { "denied" }
            )
        })
        .collect();
    let why = format!(
        "verdict since {} (due {}); {}; verdicts [{}]; {facts}",
        timeline.rel(v.since),
        timeline.rel(due),
        timeline.around(o.start),
        changes.join(", ")
    );
    if v.allowed && !timeline.up_at(o.start) {
        // Issue 26 holds allowed flows to their deadline while felix is up;
        // what fails while it restarts is counted, not judged.
        report.unjudged += 1;
        if !matches!(&o.answer, Ok(id) if *id == name(f.dst)) {
            report.allowed_failed_while_down += 1;
        }
        return;
    }
    if v.allowed {
        report.judged_allowed += 1;
        match &o.answer {
            Ok(id) if *id == name(f.dst) => {}
            Ok(id) => report.violate(
                "allowed-connects",
                format!("{what}: answered by {id}, not {}; {why}", name(f.dst)),
            ),
            Err(e) => {
                report.allowed_failed += 1;
                report.violate("allowed-connects", format!("{what}: {e}; {why}"));
            }
        }
    } else {
        report.judged_denied += 1;
        if let Ok(id) = &o.answer {
            report.denied_passed += 1;
            report.violate(
                "denied-never-connects",
                format!("{what}: connected, answered by {id}; {why}"),
            );
        }
    }
}

/// A long-lived connection under watch.
struct Held {
    what: String,
    src: usize,
    dst: usize,
    v6: bool,
    conn: Option<Conn>,
}

/// Opens `pairs` (client, server, IPv6) as long-lived connections, then
/// exercises each every [`PERIOD`] until `stop`; a failed or stalled round
/// trip is a violation, and the connection is opened again.
pub fn hold_loop(
    shared: &Shared,
    endpoints: &[Endpoint],
    pairs: &[(usize, usize, bool)],
    stall: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let open = |src: usize, dst: usize, v6: bool| {
        let e = &endpoints[dst];
        Conn::open(&endpoints[src].ns, if v6 { e.ip6 } else { e.ip4 }, PORT)
    };
    let mut held = Vec::new();
    for &(src, dst, v6) in pairs {
        let conn = open(src, dst, v6)?;
        anyhow::ensure!(
            conn.server == name(dst),
            "long-lived connection to {} answered by {}",
            name(dst),
            conn.server
        );
        held.push(Held {
            what: format!(
                "{} -> {} {}",
                name(src),
                name(dst),
                if v6 { "v6" } else { "v4" }
            ),
            src,
            dst,
            v6,
            conn: Some(conn),
        });
    }
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let tick = felix_actors::clock::real_now();
        for h in &mut held {
            seq += 1;
            let start = felix_actors::clock::real_now();
            let res = match h.conn.as_mut() {
                Some(c) => c
                    .roundtrip(&format!("n{seq}"))
                    .map_err(|e| format!("{e:#}")),
                None => match open(h.src, h.dst, h.v6) {
                    Ok(c) => {
                        h.conn = Some(c);
                        continue;
                    }
                    Err(e) => Err(format!("reopening after a failure: {e:#}")),
                },
            };
            let took = start.elapsed();
            let mut report = lock(&shared.report);
            report.roundtrips += 1;
            report.max_roundtrip = report.max_roundtrip.max(took);
            let bad = match res {
                Err(e) => Some(e),
                Ok(()) if took > stall => Some(format!("stalled {} ms", took.as_millis())),
                Ok(()) => None,
            };
            if let Some(e) = bad {
                report.resets += 1;
                drop(report);
                let timeline = lock(&shared.timeline);
                let detail = format!(
                    "long-lived {} round trip at {} ({} ms): {e}; {}",
                    h.what,
                    timeline.rel(start),
                    took.as_millis(),
                    timeline.around(start)
                );
                drop(timeline);
                lock(&shared.report).violate("established-survives", detail);
                h.conn = None;
            }
        }
        let spent = tick.elapsed();
        std::thread::sleep(PERIOD.saturating_sub(spent));
    }
    Ok(())
}
