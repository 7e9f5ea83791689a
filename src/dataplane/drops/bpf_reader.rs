//! eBPF mode's drop reader: consumes the policy interpreter's `cali_drops` ring buffer
//! (`felix_bpf::drops`) and turns each report into a [`super::DropRecord`], resolving its
//! numbers with the names `driver/bpf`'s policy writer keeps
//! ([`crate::dataplane::bpf::policy::SharedDropNames`]).
//!
//! The ring is pinned by `driver/bpf` when it starts, which is after in-sync, and re-created
//! when a teardown removed the pins; the thread opens it once it exists and re-opens it when
//! the pin names another map (checked every [`RECHECK`]). Every ring operation goes through
//! the seam (`map_open`, `ring_poll`), so it is counted and faultable.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use felix_actors::ActorSeam;
use felix_bpf::drops::{pinned_ring_id, DropRingReader};
use felix_bpf::BpfOps;
use parking_lot::Mutex;

use crate::calc::view::DataplaneView;
use crate::dataplane::bpf::policy::SharedDropNames;

use super::attribute::bpf_record;
use super::reader::{DropReader, POLL};
use super::DropRing;

/// How often the thread checks that it reads the ring currently pinned.
pub const RECHECK: Duration = Duration::from_secs(2);

/// Starts the thread that reads the ring pinned under `root` into `ring`.
pub fn start(
    root: PathBuf,
    seam: &ActorSeam,
    names: SharedDropNames,
    view: Arc<Mutex<DataplaneView>>,
    ring: DropRing,
) -> std::io::Result<DropReader> {
    let ops = BpfOps::new(seam.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("drop-reader-bpf".into())
        .spawn(move || {
            let mut reader: Option<DropRingReader> = None;
            let mut checked = felix_actors::clock::real_now();
            let mut warned = false;
            while !flag.load(Ordering::Acquire) {
                let recheck = checked.elapsed() >= RECHECK;
                if reader.is_none() || recheck {
                    checked = felix_actors::clock::real_now();
                    let current = pinned_ring_id(&ops, &root).ok().flatten();
                    if reader.as_ref().map(DropRingReader::id) != current {
                        let (names, view, ring) = (names.clone(), view.clone(), ring.clone());
                        let opened = DropRingReader::open(&ops, &root, move |e| match e {
                            Ok(e) => {
                                let time =
                                    humantime::format_rfc3339_millis(SystemTime::now()).to_string();
                                ring.push(bpf_record(&view.lock(), &names, &e, time));
                            }
                            Err(err) => tracing::warn!(error = %err, "unreadable drop report"),
                        });
                        match opened {
                            Ok(r) => {
                                if let Some(r) = &r {
                                    tracing::info!(map_id = r.id(), "drop attribution: reading the BPF drop ring");
                                }
                                reader = r;
                                warned = false;
                            }
                            Err(e) => {
                                if !warned {
                                    tracing::warn!(error = %e, "cannot open the BPF drop ring; retrying");
                                    warned = true;
                                }
                                reader = None;
                            }
                        }
                    }
                }
                match &reader {
                    Some(r) => {
                        if let Err(e) = r.poll(&ops, POLL) {
                            tracing::warn!(error = %e, "polling the BPF drop ring failed; re-opening");
                            reader = None;
                            std::thread::sleep(POLL);
                        }
                    }
                    None => std::thread::sleep(POLL),
                }
            }
        })?;
    Ok(DropReader::new(stop, thread))
}
