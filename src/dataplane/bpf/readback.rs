//! `driver/bpf`'s read-back (`GET /readback`, `GET /drift`): BPF writes return handles the
//! driver keeps (program and link file descriptors), so it cannot be probed on a recording
//! seam like the other drivers; it compares the kernel with the desired state itself, reading
//! only.
//!
//! What it compares: for every desired interface that exists, both hooks recorded and still
//! attached (the recorded program on the hook, `BpfDataplane::is_attached`) and a READY
//! `cali_iface` entry under its name; for every recorded hook and `cali_iface` entry, that its
//! interface is desired, or is a retired workload's (a workload hook whose entry names an
//! interface that lives under that ifindex: kept, denying, with the entry NOT READY). Not
//! compared: the contents of the policy, IP-set and routes maps.

use std::collections::{BTreeMap, BTreeSet};

use felix_actors::{ReadBack, RecordedOp};
use felix_bpf::layout::{IFACE_STATE_V4_READY, IFACE_STATE_V6_READY};
use felix_bpf::ops::op;
use felix_bpf::{BpfDataplane, BpfError, BpfOps, Hook};

use super::desired::BpfDesired;

fn entry(op: &str, detail: String) -> RecordedOp {
    RecordedOp {
        op: op.to_string(),
        detail,
    }
}

/// Reads the hooks and `cali_iface` entries of `dp` and lists what a resync would change
/// for `desired`; `ifindex_of` resolves an interface name (`None`: no such interface, which
/// waits for the interface monitor and is no change).
pub(super) fn read_back(
    dp: Option<&BpfDataplane>,
    ops: &BpfOps,
    desired: &BpfDesired,
    ifindex_of: &dyn Fn(&str) -> Result<Option<u32>, BpfError>,
) -> Result<ReadBack, BpfError> {
    let mut rb = ReadBack::default();
    let Some(dp) = dp else {
        for name in desired.ifaces.keys() {
            rb.changes.push(entry(
                "attach",
                format!("{name}: both hooks (the BPF dataplane has not started)"),
            ));
        }
        return Ok(rb);
    };
    let map = dp.iface_map();
    let mut entries = BTreeMap::new();
    for ifindex in map.ifindices(ops)? {
        if let Some(st) = map.get(ops, ifindex)? {
            rb.actual.push(entry(
                op::MAP_LOOKUP,
                format!("cali_iface {ifindex}: {} flags {:#x}", st.name, st.flags),
            ));
            entries.insert(ifindex, st);
        }
    }
    let mut attached = BTreeMap::new();
    for ((ifindex, hook), rec) in dp.records() {
        let on = dp.is_attached(ifindex, hook, rec)?;
        rb.actual.push(entry(
            op::TC_QUERY,
            format!(
                "ifindex {ifindex} {hook:?}: {:?} program {} {}",
                rec.mechanism,
                rec.prog_id,
                if on { "attached" } else { "NOT attached" }
            ),
        ));
        attached.insert((ifindex, hook), on);
    }
    let mut wanted = BTreeSet::new();
    let ready = IFACE_STATE_V4_READY | IFACE_STATE_V6_READY;
    for name in desired.ifaces.keys() {
        let Some(ifindex) = ifindex_of(name)? else {
            continue;
        };
        wanted.insert(ifindex);
        for hook in Hook::ALL {
            match attached.get(&(ifindex, hook)) {
                None => rb
                    .changes
                    .push(entry("attach", format!("{name} ({ifindex}) {hook:?}"))),
                Some(false) => rb.changes.push(entry(
                    "attach",
                    format!("{name} ({ifindex}) {hook:?}: recorded but not on the hook"),
                )),
                Some(true) => {}
            }
        }
        match entries.get(&ifindex) {
            Some(st) if st.name == *name && st.flags & ready == ready => {}
            Some(st) => rb.changes.push(entry(
                op::MAP_UPDATE,
                format!(
                    "cali_iface {ifindex}: {name} READY (now {} flags {:#x})",
                    st.name, st.flags
                ),
            )),
            None => rb.changes.push(entry(
                op::MAP_UPDATE,
                format!("cali_iface {ifindex}: add {name} READY"),
            )),
        }
    }
    // Retired workloads: their hooks stay while their interface lives.
    let mut retired = BTreeSet::new();
    for (ifindex, st) in &entries {
        if !wanted.contains(ifindex)
            && super::driver::is_workload_hook(dp, *ifindex)
            && ifindex_of(&st.name)? == Some(*ifindex)
        {
            retired.insert(*ifindex);
        }
    }
    for (ifindex, hook) in attached.keys() {
        if !wanted.contains(ifindex) && !retired.contains(ifindex) {
            rb.changes.push(entry(
                "detach",
                format!("ifindex {ifindex} {hook:?}: no desired interface"),
            ));
        }
    }
    for (ifindex, st) in &entries {
        if retired.contains(ifindex) {
            if st.flags & ready != 0 {
                rb.changes.push(entry(
                    op::MAP_UPDATE,
                    format!(
                        "cali_iface {ifindex}: {} NOT READY (its endpoint is gone)",
                        st.name
                    ),
                ));
            }
        } else if !wanted.contains(ifindex) {
            rb.changes.push(entry(
                op::MAP_DELETE,
                format!("cali_iface {ifindex}: {} is not desired", st.name),
            ));
        }
    }
    Ok(rb)
}
