//! The soak's datastore as a model: workloads with labels, allow policies,
//! a network set, and the oracle that says, from the model alone, whether a
//! new TCP connection from one workload to another must pass.
//!
//! Policy layout (all in the default tier, Calico semantics):
//!
//! | order | policy | selects | ingress |
//! |---|---|---|---|
//! | 10 | `soak-stable` | `stable == 'true'` | allow from `stable == 'true'` |
//! | 50 | `soak-quarantine` | `has(soak)` | deny from `quarantine == 'true'` |
//! | 100 | `allow-g<G>-a<A>` (churned) | `group == 'g<G>'` | allow TCP 8080 from `access == 'a<A>'` |
//! | 100 | `soak-netset` | `group in {'g0', 'g1', 'g2'}` | allow TCP 8080 from `netset == 'trusted'` |
//! | 1000 | `soak-default` | `has(soak)` | none (end of tier: deny) |
//!
//! No policy has egress rules, so egress falls to the namespace profile,
//! which allows. The network set `trusted` holds /32s of workloads.
//!
//! Invariants: the oracle depends only on the model; a workload whose
//! endpoint is absent from the datastore neither sends nor receives; a
//! stable workload is never removed, relabelled or quarantined (it carries
//! the long-lived connections).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::netfv::datastore::Wep;

/// The port every workload serves and every allow policy names.
pub const PORT: u16 = 8080;
/// Label groups (`g0`..).
pub const GROUPS: u8 = 8;
/// Access classes (`a0`..).
pub const ACCESS: u8 = 6;
/// Groups the network-set policy selects.
pub const NETSET_GROUPS: [u8; 3] = [0, 1, 2];

/// One workload's datastore state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WepState {
    /// Its endpoint is in the datastore.
    pub present: bool,
    /// `group` label.
    pub group: u8,
    /// `access` label.
    pub access: u8,
    /// `quarantine` label is `'true'`.
    pub quarantined: bool,
    /// Never churned; carries long-lived connections.
    pub stable: bool,
}

/// The whole churned datastore.
#[derive(Clone, Debug)]
pub struct Model {
    /// Workloads by index.
    pub weps: Vec<WepState>,
    /// Allow policies present: (group, access).
    pub policies: BTreeSet<(u8, u8)>,
    /// Workloads whose /32 is in the network set.
    pub netset: BTreeSet<usize>,
}

/// Workload `i`'s name (`w007`).
pub fn name(i: usize) -> String {
    format!("w{i:03}")
}

/// Workload `i`'s host interface (`calisk007`).
pub fn iface(i: usize) -> String {
    format!("calisk{i:03}")
}

/// Workload `i`'s IPv4 address (10.65.1.10 onwards).
pub fn ip4(i: usize) -> Ipv4Addr {
    let i = i as u32 + 10;
    Ipv4Addr::new(10, 65, 1 + (i / 250) as u8, (i % 250) as u8)
}

/// Workload `i`'s IPv6 address.
pub fn ip6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x65, 0, 0, 0, 0, 1, i as u16 + 10)
}

impl Model {
    /// Whether a new TCP connection from `src` to `dst` on [`PORT`], over
    /// IPv6 when `v6`, must pass (see the table in the module docs; the
    /// network set holds IPv4 /32s only).
    pub fn allowed(&self, src: usize, dst: usize, v6: bool) -> bool {
        let (s, d) = (&self.weps[src], &self.weps[dst]);
        if src == dst || !s.present || !d.present {
            return false;
        }
        if s.stable && d.stable {
            return true;
        }
        if s.quarantined {
            return false;
        }
        self.policies.contains(&(d.group, s.access))
            || (!v6 && NETSET_GROUPS.contains(&d.group) && self.netset.contains(&src))
    }

    /// The facts [`Model::allowed`] decides `src` -> `dst` on, for reports.
    pub fn explain(&self, src: usize, dst: usize) -> String {
        let show = |i: usize| {
            let w = &self.weps[i];
            format!(
                "{}{{present={} group=g{} access=a{} quarantine={} stable={} netset={}}}",
                name(i),
                w.present,
                w.group,
                w.access,
                w.quarantined,
                w.stable,
                self.netset.contains(&i)
            )
        };
        let (s, d) = (&self.weps[src], &self.weps[dst]);
        format!(
            "now: {} -> {}, policy allow-g{}-a{} {}",
            show(src),
            show(dst),
            d.group,
            s.access,
            if self.policies.contains(&(d.group, s.access)) {
                "present"
            } else {
                "absent"
            }
        )
    }

    /// Workload `i`'s endpoint (its file's content).
    pub fn wep(&self, i: usize) -> Wep {
        let w = &self.weps[i];
        Wep::new(&name(i), "soak", &iface(i), ip4(i), ip6(i))
            .label("soak", "true")
            .label("group", &format!("g{}", w.group))
            .label("access", &format!("a{}", w.access))
            .label("quarantine", if w.quarantined { "true" } else { "false" })
            .label("stable", if w.stable { "true" } else { "false" })
    }

    /// The network set's file.
    pub fn netset_yaml(&self) -> String {
        let nets: Vec<String> = self
            .netset
            .iter()
            .map(|&i| format!("{}/32", ip4(i)))
            .collect();
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: trusted\n  \
             labels: {{netset: trusted}}\nspec:\n  nets: [{}]\n",
            nets.join(", ")
        )
    }
}

/// The file name of allow policy (group, access).
pub fn policy_file(group: u8, access: u8) -> String {
    format!("pol-allow-g{group}-a{access}")
}

/// Allow policy (group, access).
pub fn policy_yaml(group: u8, access: u8) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  \
         name: allow-g{group}-a{access}\nspec:\n  order: 100\n  selector: group == 'g{group}'\n  \
         types: [Ingress]\n  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      \
         selector: access == 'a{access}'\n    destination:\n      ports: [{PORT}]\n"
    )
}

/// The fixed policies (stable, quarantine, network set, default deny).
pub fn fixed_policies_yaml() -> String {
    let groups: Vec<String> = NETSET_GROUPS.iter().map(|g| format!("'g{g}'")).collect();
    let mut s = String::new();
    let _ = write!(
        s,
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: soak-stable\n\
         spec:\n  order: 10\n  selector: stable == 'true'\n  types: [Ingress]\n  ingress:\n  \
         - action: Allow\n    source:\n      selector: stable == 'true'\n---\n\
         apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: soak-quarantine\n\
         spec:\n  order: 50\n  selector: has(soak)\n  types: [Ingress]\n  ingress:\n  \
         - action: Deny\n    source:\n      selector: quarantine == 'true'\n---\n\
         apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: soak-netset\n\
         spec:\n  order: 100\n  selector: group in {{{}}}\n  types: [Ingress]\n  ingress:\n  \
         - action: Allow\n    protocol: TCP\n    source:\n      selector: netset == 'trusted'\n    \
         destination:\n      ports: [{PORT}]\n---\n\
         apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: soak-default\n\
         spec:\n  order: 1000\n  selector: has(soak)\n  types: [Ingress]\n",
        groups.join(", ")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wep(group: u8, access: u8) -> WepState {
        WepState {
            present: true,
            group,
            access,
            quarantined: false,
            stable: false,
        }
    }

    #[test]
    fn oracle_follows_the_policy_table() {
        let mut m = Model {
            weps: vec![wep(3, 1), wep(4, 2), wep(0, 5)],
            policies: [(4, 1)].into(),
            netset: BTreeSet::new(),
        };
        assert!(
            m.allowed(0, 1, false),
            "allow-g4-a1 admits access a1 into g4"
        );
        assert!(!m.allowed(1, 0, false), "no policy for g3 from a2");
        assert!(!m.allowed(0, 0, false), "no self flow");
        assert!(!m.allowed(1, 2, false), "g0 only via the network set");
        m.netset.insert(1);
        assert!(m.allowed(1, 2, false));
        assert!(!m.allowed(1, 2, true), "the network set is IPv4 only");
        m.weps[0].quarantined = true;
        assert!(!m.allowed(0, 1, false), "quarantine deny comes first");
        m.weps[0].quarantined = false;
        m.weps[1].present = false;
        assert!(
            !m.allowed(0, 1, false) && !m.allowed(1, 2, false),
            "absent endpoints pass nothing"
        );
        m.weps[0].stable = true;
        m.weps[2].stable = true;
        m.weps[0].quarantined = false;
        assert!(
            m.allowed(0, 2, false) && m.allowed(2, 0, false),
            "stable pairs always pass"
        );
    }
}
