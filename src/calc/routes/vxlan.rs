//! The VXLAN resolver: one VXLAN tunnel endpoint (VTEP) per node, as
//! `VxlanTunnelEndpointUpdate` / `VxlanTunnelEndpointRemove`.
//!
//! A node's IPv4 half is complete when the node has a BGP IPv4 address
//! (`spec.bgp.ipv4Address`, the VTEP's parent device IP) and an IPv4 VXLAN
//! tunnel address; the IPv6 half likewise with the IPv6 fields.  The MAC of
//! each half is the node's configured tunnel MAC or, when none is set, the
//! address the node's VXLAN device derives for itself: `0x66` followed by
//! the first five bytes of SHA-1 over the node name (over `<name>-v6` for
//! the IPv6 device), as upstream.
//!
//! Invariants:
//! * A VTEP is sent only while at least one half is complete, and it
//!   carries exactly the complete halves; when neither is, a VTEP that was
//!   sent is removed.
//! * Only differences are emitted: an unchanged VTEP is not re-sent; a
//!   changed one is sent again (the sequencer coalesces upstream's
//!   remove-then-add into one update).
//! * Output is gated (see `routes` module docs): while disabled nothing is
//!   sent and everything sent is withdrawn.
//! * Addresses are taken from the BGP spec only, never from
//!   `spec.addresses` (as upstream).

use std::collections::BTreeSet;
use std::net::IpAddr;

use felix_proto as pb;

use super::VtepSink;
use crate::hash::FastMap as HashMap;
use crate::model::Node;

/// The inputs of one node's VTEP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct VtepInputs {
    ipv4: Option<IpAddr>,
    tunnel_v4: Option<IpAddr>,
    mac_v4: Option<String>,
    ipv6: Option<IpAddr>,
    tunnel_v6: Option<IpAddr>,
    mac_v6: Option<String>,
}

impl VtepInputs {
    fn from_node(n: &Node) -> VtepInputs {
        let mac = |m: &Option<String>| m.clone().filter(|s| !s.is_empty());
        VtepInputs {
            ipv4: n.ipv4_address.map(|a| a.addr()),
            tunnel_v4: n.ipv4_vxlan_tunnel_addr,
            mac_v4: mac(&n.vxlan_tunnel_mac),
            ipv6: n.ipv6_address.map(|a| a.addr()),
            tunnel_v6: n.ipv6_vxlan_tunnel_addr,
            mac_v6: mac(&n.vxlan_tunnel_mac_v6),
        }
    }
}

/// See the module docs.
#[derive(Default)]
pub struct VxlanResolver {
    nodes: HashMap<String, VtepInputs>,
    dirty: BTreeSet<String>,
    sent: HashMap<String, pb::VxlanTunnelEndpointUpdate>,
    enabled: bool,
}

impl VxlanResolver {
    /// A resolver with no nodes, nothing sent.
    pub fn new() -> Self {
        Self::default()
    }

    /// A node was created, changed or deleted (`None`).
    pub fn on_node(&mut self, name: &str, node: Option<&Node>) {
        let new = node.map(VtepInputs::from_node);
        if self.nodes.get(name) == new.as_ref() {
            return;
        }
        match new {
            Some(i) => {
                self.nodes.insert(name.to_string(), i);
            }
            None => {
                self.nodes.remove(name);
            }
        }
        self.dirty.insert(name.to_string());
    }

    /// The VTEP the current state calls for (ignoring the gate).
    pub fn vtep(&self, name: &str) -> Option<pb::VxlanTunnelEndpointUpdate> {
        let i = self.nodes.get(name)?;
        let mut v = pb::VxlanTunnelEndpointUpdate {
            node: name.to_string(),
            ..Default::default()
        };
        let mut any = false;
        if let (Some(ip), Some(tun)) = (i.ipv4, i.tunnel_v4) {
            any = true;
            v.parent_device_ip = ip.to_string();
            v.ipv4_addr = tun.to_string();
            v.mac = i.mac_v4.clone().unwrap_or_else(|| vtep_mac(name, false));
        }
        if let (Some(ip), Some(tun)) = (i.ipv6, i.tunnel_v6) {
            any = true;
            v.parent_device_ipv6 = ip.to_string();
            v.ipv6_addr = tun.to_string();
            v.mac_v6 = i.mac_v6.clone().unwrap_or_else(|| vtep_mac(name, true));
        }
        any.then_some(v)
    }

    /// Number of VTEPs currently sent.
    pub fn num_sent(&self) -> usize {
        self.sent.len()
    }

    /// Emits the differences since the last flush; `enabled` is the gate.
    pub fn flush(&mut self, enabled: bool, sink: &mut impl VtepSink) {
        if enabled != self.enabled {
            self.enabled = enabled;
            self.dirty.extend(self.nodes.keys().cloned());
            self.dirty.extend(self.sent.keys().cloned());
        }
        for name in std::mem::take(&mut self.dirty) {
            let want = if enabled { self.vtep(&name) } else { None };
            match want {
                Some(v) => {
                    if self.sent.get(&name) != Some(&v) {
                        self.sent.insert(name, v.clone());
                        sink.vtep_update(v);
                    }
                }
                None => {
                    if self.sent.remove(&name).is_some() {
                        sink.vtep_remove(&name);
                    }
                }
            }
        }
    }
}

/// The MAC a node's VXLAN device derives for itself when none is
/// configured (lower-case, colon-separated).
pub fn vtep_mac(node_name: &str, v6: bool) -> String {
    let digest = if v6 {
        sha1(format!("{node_name}-v6").as_bytes())
    } else {
        sha1(node_name.as_bytes())
    };
    let mut bytes = [0u8; 6];
    bytes[0] = b'f';
    bytes[1..].copy_from_slice(&digest[..5]);
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// SHA-1 (FIPS 180-4), used only to derive MAC addresses; no SHA-1 crate
/// is in the dependency set and this is the whole of it.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let bit_len = (data.len() as u64).wrapping_mul(8);
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (hi, v) in h.iter_mut().zip([a, b, c, d, e]) {
            *hi = hi.wrapping_add(v);
        }
    }
    let mut out = [0u8; 20];
    for (chunk, v) in out.chunks_exact_mut(4).zip(h) {
        chunk.copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Rec {
        updates: Vec<pb::VxlanTunnelEndpointUpdate>,
        removes: Vec<String>,
    }
    impl VtepSink for Rec {
        fn vtep_update(&mut self, u: pb::VxlanTunnelEndpointUpdate) {
            self.updates.push(u);
        }
        fn vtep_remove(&mut self, node: &str) {
            self.removes.push(node.to_string());
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn sha1_matches_the_standard_vectors() {
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(&sha1(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
    }

    #[test]
    fn derived_macs_match_upstream_test_vectors() {
        assert_eq!(vtep_mac("remotehostname", false), "66:3e:ca:a4:db:65");
        assert_eq!(vtep_mac("remotehostname2", false), "66:40:18:59:1f:16");
        assert_eq!(vtep_mac("localhostname", false), "66:48:f6:56:dc:f1");
        assert_eq!(vtep_mac("remotehostname", true), "66:a0:68:c9:4c:79");
    }

    fn node(ip: &str, tun: Option<&str>) -> Node {
        let net = ip
            .parse::<ipnet::IpNet>()
            .unwrap_or_else(|_| ipnet::IpNet::from(ip.parse::<IpAddr>().unwrap()));
        Node {
            ipv4_address: Some(net),
            ipv4_vxlan_tunnel_addr: tun.map(|t| t.parse().unwrap()),
            ..Default::default()
        }
    }

    #[test]
    fn vtep_is_sent_only_once_complete_and_removed_when_incomplete() {
        let mut r = VxlanResolver::new();
        let mut rec = Rec::default();
        r.on_node("n1", Some(&node("192.168.0.2/24", None)));
        r.flush(true, &mut rec);
        assert!(rec.updates.is_empty());

        r.on_node("n1", Some(&node("192.168.0.2/24", Some("10.0.1.0"))));
        r.flush(true, &mut rec);
        assert_eq!(
            rec.updates,
            vec![pb::VxlanTunnelEndpointUpdate {
                node: "n1".into(),
                mac: vtep_mac("n1", false),
                ipv4_addr: "10.0.1.0".into(),
                parent_device_ip: "192.168.0.2".into(),
                ..Default::default()
            }]
        );

        // Same inputs again: nothing.
        r.on_node("n1", Some(&node("192.168.0.2/24", Some("10.0.1.0"))));
        r.flush(true, &mut rec);
        assert_eq!(rec.updates.len(), 1);

        r.on_node("n1", Some(&node("192.168.0.2/24", None)));
        r.flush(true, &mut rec);
        assert_eq!(rec.removes, vec!["n1".to_string()]);
    }

    #[test]
    fn configured_mac_overrides_the_derived_one() {
        let mut r = VxlanResolver::new();
        let mut n = node("192.168.0.2", Some("10.0.1.0"));
        n.vxlan_tunnel_mac = Some("66:74:c5:72:3f:01".into());
        r.on_node("n1", Some(&n));
        assert_eq!(r.vtep("n1").unwrap().mac, "66:74:c5:72:3f:01");
        n.vxlan_tunnel_mac = None;
        r.on_node("n1", Some(&n));
        assert_eq!(r.vtep("n1").unwrap().mac, vtep_mac("n1", false));
    }

    #[test]
    fn ipv6_half_is_independent_of_the_ipv4_half() {
        let mut r = VxlanResolver::new();
        let n = Node {
            ipv6_address: Some("dead:beef:1::2/96".parse().unwrap()),
            ipv6_vxlan_tunnel_addr: Some("feed:beef::1:0:0:0".parse().unwrap()),
            ipv4_vxlan_tunnel_addr: Some("10.0.1.0".parse().unwrap()),
            ..Default::default()
        };
        r.on_node("remotehostname", Some(&n));
        let v = r.vtep("remotehostname").unwrap();
        assert_eq!(v.mac_v6, "66:a0:68:c9:4c:79");
        assert_eq!(v.parent_device_ipv6, "dead:beef:1::2");
        assert_eq!(v.ipv6_addr, "feed:beef:0:0:1::");
        assert!(v.mac.is_empty() && v.ipv4_addr.is_empty() && v.parent_device_ip.is_empty());
    }

    #[test]
    fn node_addresses_do_not_complete_a_vtep() {
        let mut r = VxlanResolver::new();
        let n = Node {
            addresses: vec!["192.168.0.2".into()],
            ipv4_vxlan_tunnel_addr: Some("10.0.1.0".parse().unwrap()),
            ..Default::default()
        };
        r.on_node("n1", Some(&n));
        assert_eq!(r.vtep("n1"), None);
    }

    #[test]
    fn gate_off_withdraws_and_gate_on_resends() {
        let mut r = VxlanResolver::new();
        let mut rec = Rec::default();
        r.on_node("n1", Some(&node("192.168.0.2", Some("10.0.1.0"))));
        r.flush(false, &mut rec);
        assert!(rec.updates.is_empty());
        r.flush(true, &mut rec);
        assert_eq!(rec.updates.len(), 1);
        r.flush(false, &mut rec);
        assert_eq!(rec.removes, vec!["n1".to_string()]);
        assert_eq!(r.num_sent(), 0);
        r.on_node("n1", None);
        r.flush(true, &mut rec);
        assert_eq!(rec.updates.len(), 1);
    }
}
