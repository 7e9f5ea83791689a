//! `felix run`'s side of drop attribution: starts the NFLOG reader when
//! `DropAttributionEnabled` is on in iptables or nftables mode, or the reader of the
//! interpreter's ring buffer in eBPF mode, and serves `GET /drops`; otherwise `GET /drops`
//! says why there is nothing (409).

use std::sync::Arc;

use felix_actors::http::{Request, Response};
use felix_actors::{AdminContext, Seam};
use felix_config::{Config, DataplaneMode};
use parking_lot::Mutex;

use crate::calc::view::DataplaneView;
use crate::dataplane::drops::reader::{start, DropReader};
use crate::dataplane::drops::DropRing;

use super::dataplane::Shared;

fn refuse(admin: &AdminContext, why: String) {
    admin.route(
        "GET",
        "/drops",
        Arc::new(move |_: &Request| Response::error(409, &why)),
    );
}

/// Starts drop attribution per `cfg` and routes `GET /drops`.
pub(super) fn start_drops(
    cfg: &Config,
    shared: &Shared,
    view: Arc<Mutex<DataplaneView>>,
    admin: &AdminContext,
) -> Option<DropReader> {
    if !cfg.drop_attribution_enabled() {
        refuse(
            admin,
            "drop attribution is off (set DropAttributionEnabled=true)".into(),
        );
        return None;
    }
    let seam = Seam::new(shared.faults.clone(), shared.metrics.clone()).for_actor("drops");
    let ring = DropRing::new();
    let started = if cfg.dataplane_mode() == DataplaneMode::Bpf {
        let root = felix_bpf::Options::default().root;
        let names = shared.bpf_drop_names.clone();
        crate::dataplane::drops::bpf_reader::start(root, &seam, names, view, ring.clone())
            .map_err(|e| e.to_string())
    } else {
        let group = u16::try_from(cfg.drop_attribution_nflog_group()).unwrap_or(30);
        start(group, &seam, view, ring.clone())
            .inspect(|_| tracing::info!(group, "drop attribution: reading NFLOG group"))
            .map_err(|e| e.to_string())
    };
    match started {
        Ok(r) => {
            admin.route("GET", "/drops", ring.handler());
            Some(r)
        }
        Err(e) => {
            tracing::error!(error = %e, "drop attribution cannot start");
            refuse(admin, format!("drop attribution cannot start: {e}"));
            None
        }
    }
}
