//! `manager/ipsets-v4` / `-v6`: owns the calc graph's IP sets (selector,
//! named-port and network sets). `IPSetUpdate` replaces a set,
//! `IPSetDeltaUpdate` adds and removes members, `IPSetRemove` drops it. In
//! iptables mode the sets go to the `ipset` driver; in nftables mode into
//! our nftables table (the same [`SetInputs`] either way).
//!
//! Each family's manager keeps only its family's members (the calc graph's
//! sets mix both): the other family's members would only be dropped by the
//! driver, after costing a copy each in the manager, the message and the
//! driver (on a dual-stack node with large IPv4 sets, most of the work).
//!
//! Dirty tracking is per set ID; the programming pass writes only the dirty
//! sets (a full rewrite replaces this manager's whole share). The drivers
//! create sets before the tables that reference them and delete them after.

use std::collections::{BTreeMap, BTreeSet};

use felix_actors::{ApplyCtx, ApplyError, Manager};
use felix_proto::ip_set_update::IpSetType as PbSetType;

use crate::dataplane::family::IpVersion;
use crate::dataplane::ipsets::IpSetType;

use super::targets::SetInputs;
use super::Payload;
use crate::dataplane::desired::SetSpec;

/// Kernel set type of a calc-graph set type.
pub fn set_type_of(t: i32) -> IpSetType {
    match PbSetType::try_from(t) {
        Ok(PbSetType::IpAndPort) => IpSetType::HashIpPort,
        Ok(PbSetType::Net) => IpSetType::HashNet,
        // Unknown values (a newer peer) fall back to plain addresses, as
        // proto3 maps unknown enum values to the default.
        _ => IpSetType::HashIp,
    }
}

/// Whether a calc-graph set member (`addr`, `addr/len` or `addr,proto:port`) belongs to
/// `ipv`: IPv6 addresses always contain a colon, IPv4 addresses never do.  Malformed
/// members are left to the drivers, which drop what does not parse.
pub fn member_of_family(member: &str, ipv: IpVersion) -> bool {
    let addr = member.split_once(',').map_or(member, |(a, _)| a);
    addr.contains(':') == (ipv == IpVersion::V6)
}

/// See the module docs.
pub struct IpSetsManager {
    name: String,
    ipv: IpVersion,
    sets: BTreeMap<String, SetSpec>,
    dirty: BTreeSet<String>,
    out: SetInputs,
}

impl IpSetsManager {
    /// A manager of `ipv`'s members writing as `name` into `out`.
    pub fn new(name: &str, ipv: IpVersion, out: SetInputs) -> Self {
        IpSetsManager {
            name: name.to_string(),
            ipv,
            sets: BTreeMap::new(),
            dirty: BTreeSet::new(),
            out,
        }
    }

    /// True for the messages this manager consumes.
    pub fn wants(msg: &Payload) -> bool {
        matches!(
            msg,
            Payload::IpsetUpdate(_) | Payload::IpsetDeltaUpdate(_) | Payload::IpsetRemove(_)
        )
    }
}

impl Manager<Payload> for IpSetsManager {
    fn on_update(&mut self, msg: &Payload) {
        match msg {
            Payload::IpsetUpdate(u) => {
                let ipv = self.ipv;
                self.sets.insert(
                    u.id.clone(),
                    SetSpec {
                        set_type: set_type_of(u.r#type),
                        members: u
                            .members
                            .iter()
                            .filter(|m| member_of_family(m, ipv))
                            .cloned()
                            .collect(),
                    },
                );
                self.dirty.insert(u.id.clone());
            }
            Payload::IpsetDeltaUpdate(d) => {
                // A delta for an unknown set breaks the sequencer's contract;
                // ignore it rather than invent a set of unknown type.
                let ipv = self.ipv;
                if let Some(s) = self.sets.get_mut(&d.id) {
                    for m in &d.removed_members {
                        s.members.remove(m);
                    }
                    s.members.extend(
                        d.added_members
                            .iter()
                            .filter(|m| member_of_family(m, ipv))
                            .cloned(),
                    );
                    self.dirty.insert(d.id.clone());
                } else {
                    tracing::warn!(set = %d.id, "IP set delta for unknown set ignored");
                }
            }
            Payload::IpsetRemove(r) => {
                self.sets.remove(&r.id);
                self.dirty.insert(r.id.clone());
            }
            _ => {}
        }
    }

    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError> {
        let owner = self.name.as_str();
        if ctx.full_rewrite() {
            let all = self.sets.iter().map(|(k, v)| (k.clone(), v.clone()));
            self.out.write(ctx, |d| d.replace_owned(owner, all));
        } else if !self.dirty.is_empty() {
            let sets = &self.sets;
            let dirty = &self.dirty;
            self.out.write(ctx, |d| {
                for id in dirty {
                    match sets.get(id) {
                        Some(spec) => {
                            d.set(owner, id.clone(), spec.clone());
                        }
                        None => {
                            d.remove(id);
                        }
                    }
                }
            });
        }
        self.dirty.clear();
        Ok(())
    }
}
