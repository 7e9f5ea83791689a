//! Helpers of the kernel tests: pin roots, namespaces, crafted packets.

#![allow(dead_code, reason = "each test binary uses a subset")]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use felix_bpf::dataplane::Preamble;
use felix_bpf::{BpfDataplane, BpfOps, Hook, Mechanism, Options, PolicyKind, TcGlobals};

pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ICMPV6: u8 = 58;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A pin directory of its own under /sys/fs/bpf, removed on drop.
pub struct PinRoot(pub PathBuf);

impl PinRoot {
    pub fn new() -> Self {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        PinRoot(PathBuf::from(format!(
            "/sys/fs/bpf/felix-test-{}-{seq}",
            std::process::id()
        )))
    }

    pub fn options(&self, debug: bool) -> Options {
        Options {
            root: self.0.clone(),
            debug,
            ..Options::default()
        }
    }
}

impl Drop for PinRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loader over a fresh pin root.
pub fn dataplane(debug: bool) -> (BpfDataplane, PinRoot) {
    let root = PinRoot::new();
    let dp = BpfDataplane::start(BpfOps::default(), root.options(debug)).expect("start of day");
    (dp, root)
}

/// Gives each `(prefix, ifindex)` to the workload of that host-side ifindex in the routes
/// map (main drops what a workload sends from a source that is not its own).
pub fn route_workloads(dp: &BpfDataplane, routes: &[(&str, u32)]) {
    use felix_bpf::routes::{RouteMaps, RouteVal, RT_LOCAL_WORKLOAD};
    let maps = RouteMaps::open_or_create(dp.ops(), &dp.options().root).expect("route maps");
    for (net, ifindex) in routes {
        let v = RouteVal {
            flags: RT_LOCAL_WORKLOAD,
            ifindex: *ifindex,
        };
        maps.set_route(dp.ops(), &net.parse().expect("prefix"), v)
            .expect("route");
    }
}

/// The crafted packets' addresses as workloads behind `ifindex`.
pub fn route_test_addrs(dp: &BpfDataplane, ifindex: u32) {
    route_workloads(
        dp,
        &[
            ("10.65.0.1/32", ifindex),
            ("10.65.0.2/32", ifindex),
            ("fd00::1/128", ifindex),
            ("fd00::2/128", ifindex),
        ],
    );
}

/// Generic programs, a policy slot with `policy`, and a preamble whose globals use it. The
/// crafted packets' addresses are the workload's own (behind the test run's loopback).
pub fn chain(
    dp: &mut BpfDataplane,
    mech: Mechanism,
    hook: Hook,
    flags: u32,
    policy: PolicyKind,
) -> (Preamble, u32) {
    dp.ensure_generic(mech, hook).expect("generic programs");
    route_test_addrs(dp, 1);
    let slot = dp.alloc_slot(mech, hook).expect("slot");
    dp.set_policy(mech, hook, slot, policy).expect("policy");
    let mut g = TcGlobals::new(flags, slot);
    if dp.options().debug {
        g.log_filter_slot = felix_bpf::dataplane::LOG_FILTER_ALL_SLOT;
    }
    let pre = dp.load_preamble(mech, hook, &g).expect("preamble");
    (pre, slot)
}

/// Runs `f` in a thread inside a throwaway namespace.
pub fn in_netns(f: impl FnOnce() + Send + 'static) {
    let ns = felix_netns::Netns::unique("fbpf").expect("netns");
    ns.spawn_in(f)
        .join()
        .expect("test thread panicked")
        .expect("entered netns");
}

/// The ifindex of `dev` in `ns`.
pub fn ifindex(ns: &felix_netns::Netns, dev: &str) -> u32 {
    let out = ns
        .exec("cat", &[&format!("/sys/class/net/{dev}/ifindex")])
        .expect("ifindex");
    out.trim().parse().expect("numeric ifindex")
}

fn eth(ethertype: u16) -> Vec<u8> {
    let mut p = vec![0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, 0xbb];
    p.extend_from_slice(&ethertype.to_be_bytes());
    p
}

fn l4(proto: u8) -> Vec<u8> {
    match proto {
        IPPROTO_TCP => {
            let mut t = vec![0u8; 20];
            t[0..2].copy_from_slice(&40000u16.to_be_bytes());
            t[2..4].copy_from_slice(&80u16.to_be_bytes());
            t[12] = 5 << 4;
            t[13] = 0x02; // SYN
            t
        }
        IPPROTO_UDP => {
            let mut u = vec![0u8; 8];
            u[0..2].copy_from_slice(&40000u16.to_be_bytes());
            u[2..4].copy_from_slice(&53u16.to_be_bytes());
            u[4..6].copy_from_slice(&8u16.to_be_bytes());
            u
        }
        _ => vec![8, 0, 0, 0, 0, 1, 0, 1], // echo request
    }
}

fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet + IPv4 10.65.0.1 -> 10.65.0.2 packet of `proto`.
pub fn ipv4(proto: u8) -> Vec<u8> {
    let payload = l4(proto);
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0, 10, 65, 0, 1, 10, 65, 0, 2,
    ];
    let len = (20 + payload.len()) as u16;
    ip[2..4].copy_from_slice(&len.to_be_bytes());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut p = eth(0x0800);
    p.extend(ip);
    p.extend(payload);
    p
}

/// An Ethernet + IPv6 fd00::1 -> fd00::2 packet of `proto`.
pub fn ipv6(proto: u8) -> Vec<u8> {
    let payload = l4(if proto == IPPROTO_ICMPV6 { 0 } else { proto });
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[proto, 64]);
    let mut a = [0u8; 16];
    a[0] = 0xfd;
    a[15] = 1;
    ip.extend_from_slice(&a);
    a[15] = 2;
    ip.extend_from_slice(&a);
    let mut p = eth(0x86dd);
    p.extend(ip);
    p.extend(payload);
    p
}

/// An ARP request frame.
pub fn arp() -> Vec<u8> {
    let mut p = eth(0x0806);
    p.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    p.extend_from_slice(&[
        0x02, 0, 0, 0, 0, 0xbb, 10, 65, 0, 1, 0, 0, 0, 0, 0, 0, 10, 65, 0, 2,
    ]);
    p
}
