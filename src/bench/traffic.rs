//! `felix bench traffic`: what policy costs real traffic. Two workloads (their own network
//! namespaces, wired to the bench namespace by `cali*` veths as CNI wires them) exchange TCP
//! through N policies that all apply to both (each with rules that never match the traffic,
//! referencing IP sets, so every new connection walks all of them; a last policy allows),
//! in each dataplane mode, beside the same traffic with no felix at all, in one run:
//!
//! * throughput: one TCP stream A -> B for `--seconds`;
//! * connection rate: sequential connect / one byte / close from A to B for `--seconds`;
//!
//! * denied packets: one-byte UDP datagrams A -> B to a port a rule denies, as fast as the
//!   sender can push them, for `--seconds`: the per-packet cost of a denied packet
//!   (`ns/denied`); the `*-drops` modes run the same with `DropAttributionEnabled`, so the
//!   difference is drop attribution's per-packet cost (its rate-limited NFLOG rule before
//!   each deny, or in eBPF mode the interpreter's rate-limit check and ring-buffer report;
//!   the userspace reader is not running, it reads at most the rate limit).
//!
//! each the median of three rounds (throughput, connections and denied packets alternating).
//!
//! Each mode runs in a child process inside its own throwaway namespace (the outer process
//! owns and deletes it); the child prints one `TRAFFIC` line, the outer prints the table with
//! every figure beside the no-policy one. Figures are printed, never asserted.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use felix_netns::{self as netns, Netns};

use super::dataplane::{
    calc_step, config_with, net32, network_set, policy, profile, BenchError, RecordingCommands,
    Running, Sizes, HOST,
};
use crate::calc::view::DataplaneView;
use crate::calc::CalcGraph;
use crate::model::{
    Action, Key, Policy, PolicyKey, Rule, Update, Value, WorkloadEndpoint, WorkloadEndpointKey,
};

/// A dataplane mode measured (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Mode {
    /// No felix: plain veths and routes (the baseline).
    None,
    /// iptables mode.
    Iptables,
    /// nftables mode.
    Nftables,
    /// eBPF mode.
    Bpf,
    /// iptables mode with `DropAttributionEnabled`.
    IptablesDrops,
    /// nftables mode with `DropAttributionEnabled`.
    NftablesDrops,
    /// eBPF mode with `DropAttributionEnabled`.
    BpfDrops,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
            Mode::Bpf => "bpf",
            Mode::IptablesDrops => "iptables-drops",
            Mode::NftablesDrops => "nftables-drops",
            Mode::BpfDrops => "bpf-drops",
        }
    }
}

/// The run's size.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct TrafficSizes {
    /// Policies applying to both workloads (plus one that allows).
    #[arg(long, default_value_t = 1_000)]
    pub policies: usize,
    /// Seconds of each measurement.
    #[arg(long, default_value_t = 3)]
    pub seconds: u64,
}

/// The name prefix of every namespace the benchmark creates.
pub const NETNS_PREFIX: &str = "felix-bench-tr-";

const PORT: u16 = 5201;
/// The UDP port a rule of the allowing policy denies.
const DENIED_PORT: u16 = 5209;
/// Rounds of each measurement; the median is reported.
const ROUNDS: usize = 3;
const WORKLOAD_A: Ipv4Addr = Ipv4Addr::new(10, 65, 0, 1);
const WORKLOAD_B: Ipv4Addr = Ipv4Addr::new(10, 65, 0, 2);

/// One mode's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Stream throughput, Gbit/s.
    pub gbps: f64,
    /// Connections per second.
    pub conns: f64,
    /// Time to program the policies (0 with no felix), seconds.
    pub program_s: f64,
    /// Denied UDP datagrams the sender pushed per second.
    pub denied_pps: f64,
}

impl Figures {
    fn line(&self, mode: Mode) -> String {
        format!(
            "TRAFFIC mode={} gbps={:.3} conns={:.1} program_s={:.3} denied_pps={:.0}",
            mode.as_str(),
            self.gbps,
            self.conns,
            self.program_s,
            self.denied_pps
        )
    }

    fn parse(line: &str) -> Option<(String, Figures)> {
        let rest = line.strip_prefix("TRAFFIC ")?;
        let kv: BTreeMap<&str, &str> = rest.split(' ').filter_map(|p| p.split_once('=')).collect();
        Some((
            kv.get("mode")?.to_string(),
            Figures {
                gbps: kv.get("gbps")?.parse().ok()?,
                conns: kv.get("conns")?.parse().ok()?,
                program_s: kv.get("program_s")?.parse().ok()?,
                denied_pps: kv.get("denied_pps")?.parse().ok()?,
            },
        ))
    }
}

/// The two workload namespaces and their veths (`calitr0`/`calitr1` here).
struct Topology {
    a: Netns,
    b: Netns,
}

fn topology() -> Result<Topology, BenchError> {
    let a = Netns::create_owned(NETNS_PREFIX, "wa")?;
    let b = Netns::create_owned(NETNS_PREFIX, "wb")?;
    netns::run_checked("sysctl", &["-qw", "net.ipv4.ip_forward=1"], None)?;
    for (i, (ns, ip)) in [(&a, WORKLOAD_A), (&b, WORKLOAD_B)].iter().enumerate() {
        let dev = format!("calitr{i}");
        let script = format!(
            "link add {dev} type veth peer name eth0 netns {ns}\nlink set {dev} up\n\
             route add {ip}/32 dev {dev}\n",
            ns = ns.name()
        );
        netns::run_checked("ip", &["-batch", "-"], Some(script.as_bytes()))?;
        let mac = std::fs::read_to_string(format!("/sys/class/net/{dev}/address"))
            .map_err(|e| BenchError::Dataplane(format!("{dev}: {e}")))?;
        let inside = format!(
            "addr add {ip}/32 dev eth0\nlink set eth0 up\nlink set lo up\n\
             route add 169.254.1.1 dev eth0 scope link\n\
             route add default via 169.254.1.1 dev eth0\n\
             neigh add 169.254.1.1 lladdr {} dev eth0\n",
            mac.trim()
        );
        netns::run_in(ns.name(), "ip", &["-batch", "-"], Some(inside.as_bytes()))?;
        // Many short connections: reuse TIME_WAIT ports.
        ns.exec(
            "sysctl",
            &[
                "-qw",
                "net.ipv4.tcp_tw_reuse=1",
                "net.ipv4.ip_local_port_range=1024 65535",
            ],
        )?;
        // Proxy ARP for the gateway address, as CNI sets it.
        netns::run_checked(
            "sysctl",
            &["-qw", &format!("net.ipv4.conf.{dev}.proxy_arp=1")],
            None,
        )?;
    }
    Ok(Topology { a, b })
}

fn workload(n: usize, ip: Ipv4Addr) -> Update {
    let mut labels = BTreeMap::new();
    labels.insert("app".to_string(), "app-0".to_string());
    labels.insert(
        "projectcalico.org/namespace".to_string(),
        "bench-ns-0".to_string(),
    );
    Update::set(
        Key::WorkloadEndpoint(WorkloadEndpointKey {
            hostname: HOST.to_string(),
            orchestrator_id: "k8s".to_string(),
            workload_id: format!("bench-ns-0/pod-{n}"),
            endpoint_id: "eth0".to_string(),
        }),
        Value::WorkloadEndpoint(Arc::new(WorkloadEndpoint {
            state: "active".to_string(),
            name: format!("calitr{n}"),
            profile_ids: vec!["kns.bench-ns-0".to_string()],
            ipv4_nets: vec![net32(u32::from(ip))],
            labels: labels.into(),
            ..Default::default()
        })),
    )
}

/// The policies: `n` that never match the benchmark's traffic (ports 1000-1999, IP-set
/// peers), then one allowing everything, all selecting both workloads.
fn input(n: usize) -> Vec<Update> {
    let sizes = Sizes {
        workloads: 2,
        policies: n,
        rules: 5,
        ip_sets: 10,
        members: 100,
        apps: 1,
    };
    let mut v = vec![profile(0)];
    v.extend((0..sizes.ip_sets).map(|k| network_set(k, &sizes)));
    v.extend((0..n).map(|i| policy(i, &sizes, 0)));
    let allow = Rule {
        action: Action::Allow,
        ..Default::default()
    };
    let deny_udp = Rule {
        action: Action::Deny,
        protocol: Some(crate::model::Protocol::Name("udp".into())),
        dst_ports: vec![crate::model::Port::Number(DENIED_PORT)],
        ..Default::default()
    };
    v.push(Update::set(
        Key::Policy(PolicyKey {
            name: "bench-allow".to_string(),
            namespace: String::new(),
            kind: String::new(),
        }),
        Value::Policy(Arc::new(Policy {
            tier: "default".to_string(),
            order: Some(1e9),
            selector: "app == 'app-0'".to_string(),
            types: vec!["ingress".to_string(), "egress".to_string()],
            inbound_rules: vec![deny_udp, allow.clone()],
            outbound_rules: vec![allow],
            ..Default::default()
        })),
    ));
    v.push(workload(0, WORKLOAD_A));
    v.push(workload(1, WORKLOAD_B));
    v
}

/// A server in `b` that discards what it reads, one connection at a time, until `stop`.
fn server(
    b: &Netns,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<std::io::Result<()>>, BenchError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = b.spawn_in(move || {
        let listener = match TcpListener::bind(SocketAddr::new(IpAddr::V4(WORKLOAD_B), PORT)) {
            Ok(l) => l,
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
                return;
            }
        };
        let _ = listener.set_nonblocking(true);
        let _ = tx.send(Ok(()));
        let mut buf = vec![0u8; 1 << 16];
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e)
                                if e.kind() == std::io::ErrorKind::WouldBlock
                                    || e.kind() == std::io::ErrorKind::TimedOut =>
                            {
                                if stop.load(Ordering::Relaxed) {
                                    break;
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_micros(100)),
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => Err(BenchError::Dataplane(format!("server: {e}"))),
        Err(_) => Err(BenchError::Dataplane("server did not start".into())),
    }
}

fn run_in<T: Send + 'static>(
    ns: &Netns,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, BenchError> {
    ns.spawn_in(f)
        .join()
        .map_err(|_| BenchError::Dataplane("measurement thread panicked".into()))?
        .map_err(|e| BenchError::Dataplane(e.to_string()))?
        .map_err(BenchError::Dataplane)
}

/// Gbit/s of one stream from `a` for `secs`.
fn throughput(a: &Netns, secs: u64) -> Result<f64, BenchError> {
    run_in(a, move || {
        let to = SocketAddr::new(IpAddr::V4(WORKLOAD_B), PORT);
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .map_err(|e| format!("connect: {e}"))?;
        let buf = vec![0x5au8; 1 << 16];
        let t0 = felix_actors::clock::real_now();
        let mut sent: u64 = 0;
        while t0.elapsed() < Duration::from_secs(secs) {
            s.write_all(&buf).map_err(|e| format!("write: {e}"))?;
            sent += buf.len() as u64;
        }
        Ok(sent as f64 * 8.0 / t0.elapsed().as_secs_f64() / 1e9)
    })
}

/// Connections per second from `a` for `secs`.
fn conn_rate(a: &Netns, secs: u64) -> Result<f64, BenchError> {
    run_in(a, move || {
        let to = SocketAddr::new(IpAddr::V4(WORKLOAD_B), PORT);
        let t0 = felix_actors::clock::real_now();
        let mut n: u64 = 0;
        while t0.elapsed() < Duration::from_secs(secs) {
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
                .map_err(|e| format!("connect {n}: {e}"))?;
            s.write_all(b"x").map_err(|e| format!("write: {e}"))?;
            n += 1;
        }
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    })
}

/// Denied one-byte UDP datagrams per second pushed from `a` for `secs`.
fn denied_rate(a: &Netns, secs: u64) -> Result<f64, BenchError> {
    run_in(a, move || {
        let s = std::net::UdpSocket::bind(("0.0.0.0", 0)).map_err(|e| format!("bind: {e}"))?;
        let to = SocketAddr::new(IpAddr::V4(WORKLOAD_B), DENIED_PORT);
        let t0 = felix_actors::clock::real_now();
        let mut n: u64 = 0;
        while t0.elapsed() < Duration::from_secs(secs) {
            for _ in 0..256 {
                // A full queue or an ICMP error from an earlier datagram is not a failure
                // of this measurement; the count is of datagrams handed to the kernel.
                if s.send_to(b"x", to).is_ok() {
                    n += 1;
                }
            }
        }
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    })
}

/// Runs one mode inside the current namespace (the child side) and prints its line.
pub fn run_inner(mode: Mode, sizes: &TrafficSizes) -> Result<Figures, BenchError> {
    let topo = topology()?;
    let mut running = None;
    let mut program_s = 0.0;
    if mode != Mode::None {
        let extra: &[(&str, &str)] = match mode {
            Mode::Iptables | Mode::None => &[("NFTablesMode", "Disabled")],
            Mode::Nftables => &[("NFTablesMode", "Enabled")],
            Mode::Bpf => &[("NFTablesMode", "Disabled"), ("BPFEnabled", "true")],
            Mode::IptablesDrops => &[
                ("NFTablesMode", "Disabled"),
                ("DropAttributionEnabled", "true"),
            ],
            Mode::NftablesDrops => &[
                ("NFTablesMode", "Enabled"),
                ("DropAttributionEnabled", "true"),
            ],
            Mode::BpfDrops => &[
                ("NFTablesMode", "Disabled"),
                ("BPFEnabled", "true"),
                ("DropAttributionEnabled", "true"),
            ],
        };
        let cfg = config_with(extra)?;
        let r = Running::start(&cfg, Arc::new(RecordingCommands::default()))?;
        let mut graph = CalcGraph::new(HOST);
        let mut view = DataplaneView::new();
        let (payloads, in_sync, _) = calc_step(&mut graph, &mut view, input(sizes.policies), true);
        let (took, _, _) = r.send_and_converge(payloads, in_sync)?;
        program_s = took.as_secs_f64();
        running = Some(r);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let srv = server(&topo.b, stop.clone())?;
    // Median of three rounds of each: one stream on a 2-core machine is noisy.
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let rounds = || -> Result<(f64, f64, f64), BenchError> {
        let (mut g, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            g.push(throughput(&topo.a, sizes.seconds)?);
            c.push(conn_rate(&topo.a, sizes.seconds)?);
            d.push(denied_rate(&topo.a, sizes.seconds)?);
        }
        Ok((median(g), median(c), median(d)))
    };
    let result = rounds();
    stop.store(true, Ordering::Relaxed);
    let _ = srv.join();
    drop(running);
    let (gbps, conns, denied_pps) = result?;
    Ok(Figures {
        gbps,
        conns,
        program_s,
        denied_pps,
    })
}

/// Prints the line the outer process collects.
pub fn print_line(mode: Mode, f: &Figures) {
    println!("{}", f.line(mode));
}

/// Runs each mode in a child inside its own throwaway namespace and prints the table.
pub fn run_outer(modes: &[Mode], sizes: &TrafficSizes) -> anyhow::Result<()> {
    let swept = netns::sweep_stale(NETNS_PREFIX);
    if swept > 0 {
        eprintln!("removed {swept} stale benchmark namespace(s)");
    }
    let exe = std::env::current_exe()?;
    let mut rows: Vec<(String, Figures)> = Vec::new();
    for &m in modes {
        let ns = Netns::create_owned(NETNS_PREFIX, m.as_str())?;
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", ns.name()])
            .arg(&exe)
            .args(["bench", "traffic", "--inner", "--mode", m.as_str()])
            .args(["--policies", &sizes.policies.to_string()])
            .args(["--seconds", &sizes.seconds.to_string()])
            .stderr(std::process::Stdio::inherit())
            .output()?;
        if !out.status.success() {
            anyhow::bail!("the {} run failed ({})", m.as_str(), out.status);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let row = text
            .lines()
            .find_map(Figures::parse)
            .ok_or_else(|| anyhow::anyhow!("no figures from the {} run", m.as_str()))?;
        rows.push(row);
    }
    print!("{}", table(&rows, sizes));
    Ok(())
}

/// The table: every figure beside the no-policy one (when measured in the same run).
fn table(rows: &[(String, Figures)], sizes: &TrafficSizes) -> String {
    let base = rows.iter().find(|(m, _)| m == "none").map(|(_, f)| *f);
    let mut out = format!(
        "traffic: two workloads, {} policies applying to both (+1 allowing), median of 3 rounds of {} s\n  {:<15} {:>10} {:>8} {:>12} {:>8} {:>12} {:>12} {:>14}\n",
        sizes.policies, sizes.seconds, "mode", "Gbit/s", "vs none", "conns/s", "vs none", "program s", "ns/denied", "drops cost ns"
    );
    let plain = |m: &str| -> Option<f64> {
        let base = m.strip_suffix("-drops")?;
        rows.iter()
            .find(|(n, _)| n == base)
            .map(|(_, f)| f.denied_pps)
    };
    for (m, f) in rows {
        let vs = |x: f64, b: Option<f64>| match b {
            Some(b) if b > 0.0 => format!("{:.1}%", 100.0 * x / b),
            _ => "-".to_string(),
        };
        let ns = |pps: f64| if pps > 0.0 { 1e9 / pps } else { 0.0 };
        let cost = match plain(m) {
            Some(p) if p > 0.0 && f.denied_pps > 0.0 => format!("{:+.0}", ns(f.denied_pps) - ns(p)),
            _ => "-".to_string(),
        };
        out.push_str(&format!(
            "  {:<15} {:>10.2} {:>8} {:>12.0} {:>8} {:>12.3} {:>12.0} {:>14}\n",
            m,
            f.gbps,
            vs(f.gbps, base.map(|b| b.gbps)),
            f.conns,
            vs(f.conns, base.map(|b| b.conns)),
            f.program_s,
            ns(f.denied_pps),
            cost
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_lines_round_trip_and_the_table_compares_with_no_policy() {
        let f = Figures {
            gbps: 10.0,
            conns: 2000.0,
            program_s: 0.5,
            denied_pps: 500_000.0,
        };
        let (m, back) = Figures::parse(&f.line(Mode::Bpf)).expect("parses");
        assert_eq!(m, "bpf");
        assert_eq!(back, f);
        let base = Figures {
            gbps: 20.0,
            conns: 4000.0,
            program_s: 0.0,
            denied_pps: 1_000_000.0,
        };
        let drops = Figures {
            denied_pps: 400_000.0,
            ..f
        };
        let t = table(
            &[
                ("none".into(), base),
                ("bpf".into(), f),
                ("bpf-drops".into(), drops),
            ],
            &TrafficSizes {
                policies: 1000,
                seconds: 3,
            },
        );
        assert!(t.contains("50.0%"), "{t}");
        // 2,500 ns per denied packet against 2,000: drop attribution costs 500 ns.
        assert!(t.contains(" 2500 ") && t.contains("+500"), "{t}");
        assert_eq!(Figures::parse("garbage"), None);
    }

    #[test]
    fn the_input_has_every_policy_the_allow_policy_and_both_workloads() {
        let v = input(7);
        let policies = v.iter().filter(|u| matches!(u.key, Key::Policy(_))).count();
        assert_eq!(policies, 8);
        let weps = v
            .iter()
            .filter(|u| matches!(u.key, Key::WorkloadEndpoint(_)))
            .count();
        assert_eq!(weps, 2);
    }
}
