//! IP-set members as `cali_ipsets2` keys: `10.0.0.1` (an address: a /32 or /128 member),
//! `10.0.0.0/8` (a CIDR), `10.0.0.1,tcp:8080` and `[fd00::1],tcp:8080` / `fd00::1,tcp:8080`
//! (an address with protocol and port: matched exactly). IPv4 is stored IPv4-mapped.

use std::net::IpAddr;

use felix_bpf::policy::IpSetKey;
use ipnet::IpNet;

/// 16-byte form of an address (IPv4-mapped for IPv4) and the prefix offset of its family.
pub fn addr16(a: IpAddr) -> ([u8; 16], u8) {
    match a {
        IpAddr::V4(v4) => (v4.to_ipv6_mapped().octets(), 96),
        IpAddr::V6(v6) => (v6.octets(), 0),
    }
}

/// A net in 16-byte form: (address, prefix over 16 bytes).
pub fn net16(n: IpNet) -> ([u8; 16], u8) {
    let (a, off) = addr16(n.addr());
    (a, off + n.prefix_len())
}

/// The protocol number of a member's protocol name.
fn proto_number(name: &str) -> Option<u8> {
    match name.to_ascii_lowercase().as_str() {
        "tcp" => Some(6),
        "udp" => Some(17),
        "sctp" => Some(132),
        n => n.parse().ok(),
    }
}

/// Parses `member` of set `set_id` into its key, or `None` if it is malformed.
pub fn member_key(set_id: u64, member: &str) -> Option<IpSetKey> {
    let m = member.trim();
    if let Some((addr, pp)) = m.rsplit_once(',') {
        let addr = addr.trim_start_matches('[').trim_end_matches(']');
        let ip: IpAddr = addr.parse().ok()?;
        let (proto, port) = pp.split_once(':')?;
        let (a, _) = addr16(ip);
        return Some(IpSetKey {
            set_id,
            addr: a,
            addr_prefix: 128,
            port: Some((proto_number(proto)?, port.parse().ok()?)),
        });
    }
    let net: IpNet = match m.parse::<IpNet>() {
        Ok(n) => n.trunc(),
        Err(_) => IpNet::from(m.parse::<IpAddr>().ok()?),
    };
    let (a, prefix) = net16(net);
    Some(IpSetKey {
        set_id,
        addr: a,
        addr_prefix: prefix,
        port: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_parse_to_cidr_or_exact_ip_port_keys() {
        let k = member_key(7, "10.1.0.0/16").expect("cidr");
        assert_eq!((k.addr_prefix, k.port), (96 + 16, None));
        assert_eq!(&k.addr[10..14], &[0xff, 0xff, 10, 1]);
        let k = member_key(7, "10.1.2.3").expect("ip");
        assert_eq!(k.addr_prefix, 128);
        let k = member_key(7, "10.1.2.3,tcp:8080").expect("ip port");
        assert_eq!(k.port, Some((6, 8080)));
        let k = member_key(7, "[fd00::1],udp:53").expect("v6 ip port");
        assert_eq!((k.addr[0], k.port), (0xfd, Some((17, 53))));
        let k = member_key(7, "fd00::/64").expect("v6 cidr");
        assert_eq!(k.addr_prefix, 64);
        assert!(member_key(7, "nonsense").is_none());
        assert!(member_key(7, "10.0.0.1,tcp:99999").is_none());
    }
}
