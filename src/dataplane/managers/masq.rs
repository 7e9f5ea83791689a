//! `manager/masq-v4` / `-v6`: owns NAT-outgoing. It keeps two IP sets — all
//! IP pools of this family (`network-ip-pools`, except pools used only for
//! load balancers, whose traffic must still be masqueraded) and the pools
//! with `natOutgoing` (`masq-ipam-pools`) — and the `cali-nat-outgoing`
//! chain in the nat table, which masquerades traffic from a masquerade pool
//! to anywhere outside all pools (with no masquerade pool the set is empty
//! and the rule matches nothing).
//!
//! With `NATOutgoingExclusions=IPPoolsAndHostIPs` ([`MasqManager::excluding_host_ips`])
//! it also keeps `all-hosts-net`, the addresses of every node of its family
//! (from `HostMetadataUpdate`), and the chain leaves traffic to those
//! unmasqueraded too. Invariant: the chain names the host set if and only if
//! the manager writes it.
//!
//! One dirty flag: pool and node changes are rare, so the pass rewrites the
//! sets and the chain.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use felix_actors::{ApplyCtx, ApplyError, Manager};
use felix_proto::{HostMetadataUpdate, IpamPool};
use ipnet::IpNet;

use crate::dataplane::generictables::Chain;
use crate::dataplane::ipsets::IpSetType;
use crate::dataplane::rules::TableName;
use crate::dataplane::IpVersion;

use super::render::ChainSource;
use super::targets::{SetInputs, TableInputs};
use super::Payload;
use crate::dataplane::desired::SetSpec;

/// Set ID of all pools (upstream's name).
pub const IPSET_ID_ALL_POOLS: &str = "network-ip-pools";
/// Set ID of the masquerade pools (upstream's name).
pub const IPSET_ID_MASQ_POOLS: &str = "masq-ipam-pools";
/// Set ID of every node's address (upstream's name).
pub const IPSET_ID_ALL_HOSTS: &str = "all-hosts-net";

/// See the module docs.
pub struct MasqManager {
    name: String,
    ipv: IpVersion,
    source: Arc<dyn ChainSource>,
    tables: TableInputs,
    sets: SetInputs,
    pools: BTreeMap<String, (IpNet, IpamPool)>,
    /// `Some` (hostname to address of this family) iff host IPs are excluded.
    hosts: Option<BTreeMap<String, IpAddr>>,
    dirty: bool,
}

impl MasqManager {
    /// A manager writing as `name`.
    pub fn new(
        name: &str,
        ipv: IpVersion,
        source: Arc<dyn ChainSource>,
        tables: TableInputs,
        sets: SetInputs,
    ) -> Self {
        MasqManager {
            name: name.to_string(),
            ipv,
            source,
            tables,
            sets,
            pools: BTreeMap::new(),
            hosts: None,
            dirty: true,
        }
    }

    /// `NATOutgoingExclusions=IPPoolsAndHostIPs`: also leave traffic to any
    /// node's address unmasqueraded (keeping `all-hosts-net`).
    #[must_use]
    pub fn excluding_host_ips(mut self, exclude: bool) -> Self {
        self.hosts = exclude.then(BTreeMap::new);
        self
    }

    /// True for the messages this manager consumes.
    pub fn wants(msg: &Payload) -> bool {
        matches!(
            msg,
            Payload::IpamPoolUpdate(_)
                | Payload::IpamPoolRemove(_)
                | Payload::HostMetadataUpdate(_)
                | Payload::HostMetadataRemove(_)
        )
    }

    /// The node address of this family in `u` (a trailing `/len` ignored).
    fn host_addr(&self, u: &HostMetadataUpdate) -> Option<IpAddr> {
        let raw = match self.ipv {
            IpVersion::V4 => &u.ipv4_addr,
            IpVersion::V6 => &u.ipv6_addr,
        };
        let bare = raw.split('/').next().unwrap_or_default();
        bare.parse::<IpAddr>()
            .ok()
            .filter(|a| a.is_ipv4() == (self.ipv == IpVersion::V4))
    }

    fn family_ok(&self, net: &IpNet) -> bool {
        matches!(
            (net, self.ipv),
            (IpNet::V4(_), IpVersion::V4) | (IpNet::V6(_), IpVersion::V6)
        )
    }
}

fn load_balancer_only(p: &IpamPool) -> bool {
    p.allowed_uses.len() == 1 && p.allowed_uses[0] == "LoadBalancer"
}

impl Manager<Payload> for MasqManager {
    fn on_update(&mut self, msg: &Payload) {
        match msg {
            Payload::IpamPoolUpdate(u) => {
                let pool = u.pool.clone().unwrap_or_default();
                let parsed = pool
                    .cidr
                    .parse::<IpNet>()
                    .ok()
                    .filter(|n| self.family_ok(n));
                let changed = match parsed {
                    Some(net) => {
                        self.pools.insert(u.id.clone(), (net.trunc(), pool));
                        true
                    }
                    None => self.pools.remove(&u.id).is_some(),
                };
                self.dirty |= changed;
            }
            Payload::IpamPoolRemove(r) => {
                self.dirty |= self.pools.remove(&r.id).is_some();
            }
            Payload::HostMetadataUpdate(u) => {
                let addr = self.host_addr(u);
                if let Some(hosts) = self.hosts.as_mut() {
                    let changed = match addr {
                        Some(a) => hosts.insert(u.hostname.clone(), a) != Some(a),
                        None => hosts.remove(&u.hostname).is_some(),
                    };
                    self.dirty |= changed;
                }
            }
            Payload::HostMetadataRemove(r) => {
                if let Some(hosts) = self.hosts.as_mut() {
                    self.dirty |= hosts.remove(&r.hostname).is_some();
                }
            }
            _ => {}
        }
    }

    fn complete_deferred_work(&mut self, ctx: &mut ApplyCtx) -> Result<(), ApplyError> {
        if !self.dirty && !ctx.full_rewrite() {
            return Ok(());
        }
        let all: BTreeSet<String> = self
            .pools
            .values()
            .filter(|(_, p)| !load_balancer_only(p))
            .map(|(n, _)| n.to_string())
            .collect();
        let masq: BTreeSet<String> = self
            .pools
            .values()
            .filter(|(_, p)| p.masquerade)
            .map(|(n, _)| n.to_string())
            .collect();
        let owner = self.name.as_str();
        let net_set = |members| SetSpec {
            set_type: IpSetType::HashNet,
            members,
        };
        let mut owned = vec![
            (IPSET_ID_ALL_POOLS.to_string(), net_set(all)),
            (IPSET_ID_MASQ_POOLS.to_string(), net_set(masq)),
        ];
        if let Some(hosts) = &self.hosts {
            // Two nodes may share an address: the set dedups.
            let members = hosts.values().map(IpAddr::to_string).collect();
            owned.push((IPSET_ID_ALL_HOSTS.to_string(), net_set(members)));
        }
        self.sets.write(ctx, |d| d.replace_owned(owner, owned));
        let hosts_set = self
            .hosts
            .is_some()
            .then(|| self.source.ipset_name(IPSET_ID_ALL_HOSTS));
        let chains: Vec<Chain> = self.source.masquerade_chains(
            &self.source.ipset_name(IPSET_ID_MASQ_POOLS),
            &self.source.ipset_name(IPSET_ID_ALL_POOLS),
            hosts_set.as_deref(),
        );
        self.tables.write(ctx, TableName::Nat, |d| {
            d.chains
                .replace_owned(owner, chains.into_iter().map(|c| (c.name.clone(), c)));
        });
        self.dirty = false;
        Ok(())
    }
}
