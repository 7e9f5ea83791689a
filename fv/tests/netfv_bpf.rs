//! Dataplane FV, eBPF mode (issue 21, part 1): `felix run` with `BPFEnabled=true` in a node
//! namespace with CNI-wired workloads.
//!
//! * profile allow and default deny on real traffic, an unknown `cali*` interface passing
//!   nothing, workloads attached through TCX by default (pinned links, no clsact filter);
//! * the same through clsact with `BPFAttachType=TC` (felix's filter, handle `0xca11`);
//! * a ping flood and a long-lived TCP connection through a workload across a SIGTERM and a
//!   SIGKILL restart: zero lost packets, no reset;
//! * BPF -> iptables -> BPF: leaving BPF mode removes every pin, link and clsact filter;
//!   entering it removes iptables mode's policy state except the rules BPF mode keeps.
//!
//! Each test mounts its own bpffs and the harness bind-mounts it on the daemon's
//! `/sys/fs/bpf` ([`Daemon::start_with_bpffs`]), so pins outlive a daemon as on a node.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, ensure, Context, Result};
use felix_bpf::conntrack::Conntrack;
use felix_bpf::layout::{PROG_DEBUG_OFFSET, PROG_INDEX_MAIN};
use felix_bpf::maps::{jump_map, progs_map, JumpMap};
use felix_bpf::{BpfOps, Hook};
use felix_fv::netfv::daemon::BpfFs as Bpffs;
use felix_fv::netfv::kernel::{iptables_calico_state, nft_calico_tables, nft_chains};
use felix_fv::netfv::topology::{ip4, ip6, wep, PORTS};
use felix_fv::netfv::traffic::Conn;
use felix_fv::netfv::wait::poll;
use felix_fv::netfv::{Backend, Check, Daemon, Fv, BPF_TOOLS};

const SETTLE: Duration = Duration::from_secs(20);

const CLOSED_PROFILE: &str =
    "apiVersion: projectcalico.org/v3\nkind: Profile\nmetadata:\n  name: closed\nspec: {}\n";

const BACKEND_INGRESS: &str = "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy
metadata:\n  name: backend-ingress\n  namespace: shop
spec:\n  order: 100\n  selector: app == 'backend'\n  types: [Ingress]
  ingress:\n  - action: Allow\n    protocol: TCP\n    source:\n      selector: app == 'frontend'
    destination:\n      ports: [api]\n";

/// Egress allowed, ingress denied: what the workload opens works both ways (conntrack),
/// nothing can open a connection to it.
const OUTONLY_PROFILE: &str = "apiVersion: projectcalico.org/v3\nkind: Profile\nmetadata:\n  name: outonly\nspec:\n  egress:\n  - action: Allow\n";

/// The dataplane mode a daemon is started in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Bpf,
    /// eBPF mode with `NFTablesMode=Enabled`: the rules BPF mode keeps are nftables rules.
    BpfNft,
    Iptables,
    Nftables,
}

/// Starts `felix run` in `mode` on `fs` and waits for it to converge and report the mode.
fn start(fv: &mut Fv, fs: &Bpffs, mode: Mode, env: &[(&str, &str)]) -> Result<()> {
    ensure!(fv.daemon.is_none(), "daemon already running");
    let (bpf, backend, want) = match mode {
        Mode::Bpf => ("true", Backend::Iptables, "bpf"),
        Mode::BpfNft => ("true", Backend::Nftables, "bpf"),
        Mode::Iptables => ("false", Backend::Iptables, "iptables"),
        Mode::Nftables => ("false", Backend::Nftables, "nftables"),
    };
    let mut all = vec![("FELIX_BPFENABLED", bpf)];
    all.extend_from_slice(env);
    let mut d = Daemon::start_with_bpffs(
        &fv.sandbox.node,
        &fv.ds.path(),
        fv.ds.scratch(),
        backend,
        &all,
        fs.path(),
    )?;
    d.wait_converged(0)?;
    let st = d.status().unwrap_or_default();
    ensure!(
        felix_fv::netfv::daemon::dataplane_name(&st) == want,
        "daemon reports dataplane {} instead of {want}",
        st["dataplane"]
    );
    fv.daemon = Some(d);
    Ok(())
}

fn ifindex(fv: &Fv, iface: &str) -> Result<u32> {
    let p = format!("/sys/class/net/{iface}/ifindex");
    let t = fv.sandbox.node.exec("cat", &[&p])?;
    t.trim()
        .parse()
        .map_err(|e| anyhow!("ifindex of {iface}: {e}"))
}

/// felix's clsact filter (handle 0xca11) on `iface`'s `dir` (`ingress`/`egress`).
fn has_clsact_filter(fv: &Fv, iface: &str, dir: &str) -> Result<bool> {
    let out = fv
        .sandbox
        .node
        .exec_output("tc", &["filter", "show", "dev", iface, dir])?;
    Ok(String::from_utf8_lossy(&out.stdout).contains("handle 0xca11"))
}

/// The programs attached through TCX on `iface` (any owner), both hooks.
fn tcx_programs(fv: &Fv, iface: &str) -> Result<Vec<u32>> {
    let idx = ifindex(fv, iface)?;
    let h = fv.sandbox.node.spawn_in(move || {
        let ops = BpfOps::default();
        let mut v = Vec::new();
        for hook in Hook::ALL {
            v.extend(felix_bpf::attach::query_tcx(&ops, idx, hook)?);
        }
        Ok::<_, felix_bpf::BpfError>(v)
    });
    let r = h.join().map_err(|_| anyhow!("query thread panicked"))??;
    Ok(r?)
}

fn tcx_link_pin(fs: &Bpffs, idx: u32, hook: &str) -> PathBuf {
    fs.root()
        .join("tcx/hooks")
        .join(format!("if{idx}_{hook}"))
        .join("link")
}

fn standard_checks() -> Vec<Check> {
    let mut all = Vec::new();
    for (f, t) in [
        ("frontend", "backend"),
        ("backend", "db"),
        ("db", "prom"),
        ("prom", "frontend"),
    ] {
        all.push(Check::v4(f, t, 8080, true));
    }
    all.extend([
        Check::v6("frontend", "backend", 8080, true),
        Check::v6("prom", "db", 9090, true),
    ]);
    all
}

/// The standard world plus a workload with a profile that allows nothing and an unknown
/// `cali*` interface (a wired workload with no endpoint in the datastore).
fn world() -> Result<Fv> {
    let mut fv = Fv::standard(Backend::Iptables, &[])?;
    fv.ds.write("profile-closed", CLOSED_PROFILE)?;
    fv.plug(wep("closed", "shop", "caliclosed0", 14).profiles(&["closed"]))?;
    fv.sandbox
        .add_workload("stranger", "calistrange0", ip4(20), ip6(20), &PORTS)?;
    Ok(fv)
}

fn deny_checks() -> Vec<Check> {
    vec![
        Check::v4("frontend", "closed", 8080, false),
        Check::v4("closed", "frontend", 8080, false),
        Check::v6("closed", "backend", 8080, false),
        Check::v4("frontend", "stranger", 8080, false),
        Check::v4("stranger", "frontend", 8080, false),
        Check::v6("stranger", "backend", 9090, false),
        Check::v6("backend", "stranger", 9090, false),
    ]
}

/// `attach_type`: `FELIX_BPFATTACHTYPE` (default: unset); `debug`: `FELIX_BPFLOGLEVEL=Debug`
/// (the debug path and the match-all log filter).
fn allow_deny_unknown(attach_type: Option<&str>, debug: bool) -> Result<()> {
    let fs = Bpffs::new(&format!("{}-{debug}", attach_type.unwrap_or("default")))?;
    let mut fv = world()?;
    let mut env: Vec<(&str, &str)> = attach_type
        .map(|t| vec![("FELIX_BPFATTACHTYPE", t)])
        .unwrap_or_default();
    if debug {
        env.push(("FELIX_BPFLOGLEVEL", "Debug"));
    }
    start(&mut fv, &fs, Mode::Bpf, &env)?;
    let mut checks = standard_checks();
    checks.extend(deny_checks());
    fv.sandbox.expect_traffic(
        "profile allow / default deny / unknown interface",
        &checks,
        SETTLE,
    )?;
    let tc = attach_type == Some("TC");
    for iface in [
        "califront0",
        "caliback0",
        "calidb0",
        "caliprom0",
        "caliclosed0",
    ] {
        ensure_attached(&fv, &fs, iface, tc)
            .with_context(|| format!("attach type {attach_type:?}"))?;
    }
    // The debug path (main at +10) and the match-all log filter (per-endpoint slot 0) are
    // loaded exactly with `BPFLogLevel=Debug`; the fast main always.
    let ops = BpfOps::default();
    let dir = fs.root().join(if tc { "tc" } else { "tcx" });
    for hook in Hook::ALL {
        let progs = JumpMap::open_or_create(&ops, progs_map(hook), &dir)?;
        let jump = JumpMap::open_or_create(&ops, jump_map(hook), &dir)?;
        ensure!(
            progs.prog_id(&ops, PROG_INDEX_MAIN)?.is_some(),
            "{hook:?}: no main"
        );
        let dbg = progs.prog_id(&ops, PROG_INDEX_MAIN + PROG_DEBUG_OFFSET)?;
        let log = jump.prog_id(&ops, 0)?;
        ensure!(
            dbg.is_some() == debug && log.is_some() == debug,
            "{hook:?}: debug main {dbg:?}, log filter {log:?} (debug {debug})"
        );
    }

    // The unknown interface carries nothing of felix's.
    ensure!(!has_clsact_filter(&fv, "calistrange0", "ingress")?);
    ensure!(tcx_programs(&fv, "calistrange0")?.is_empty());

    // Every driver, `driver/bpf` included, is in step with the kernel (`GET /drift`).
    ensure_in_step(&mut fv, "BPF mode never in step")?;
    if tc {
        // A filter removed behind felix's back is drift of `driver/bpf`, and asking does not
        // put it back.
        fv.sandbox.node.exec(
            "tc",
            &["filter", "del", "dev", "califront0", "ingress", "pref", "1"],
        )?;
        let drift = fv
            .d()?
            .admin_json(&["drift"])
            .ok_or_else(|| anyhow!("no drift"))?;
        ensure!(
            drift["drivers"]["driver/bpf"].as_array().is_some_and(|c| c
                .iter()
                .any(|x| x["detail"]
                    .as_str()
                    .is_some_and(|t| t.contains("califront0") && t.contains("Ingress")))),
            "removed filter not in the drift: {drift}"
        );
        ensure!(
            !has_clsact_filter(&fv, "califront0", "ingress")?,
            "the probe re-attached"
        );
    }

    // An endpoint removed while felix runs: its hooks stay, denying everything, while its
    // interface lives (as upstream's default-drop program).
    let before = fv.d()?.applies();
    fv.ds.remove("wep-db")?;
    fv.d()?.wait_converged(before)?;
    ensure_attached(&fv, &fs, "calidb0", tc)?;
    // An endpoint removed while felix is down: the restarted run (no memory) retires it the
    // same way.
    fv.stop()?;
    fv.ds.remove("wep-closed")?;
    start(&mut fv, &fs, Mode::Bpf, &env)?;
    ensure_attached(&fv, &fs, "caliclosed0", tc)?;
    // Kept hooks of retired workloads are what a resync would leave: no drift.
    ensure_in_step(&mut fv, "drift after the endpoints left")?;
    // Both are unknown `cali*` interfaces now: nothing passes.
    let mut checks = standard_checks()
        .into_iter()
        .filter(|c| c.from != "db" && c.to != "db")
        .collect::<Vec<_>>();
    checks.extend([
        Check::v4("frontend", "db", 8080, false),
        Check::v4("db", "frontend", 8080, false),
        Check::v4("frontend", "closed", 8080, false),
        Check::v6("closed", "frontend", 8080, false),
    ]);
    fv.sandbox
        .expect_traffic("removed endpoints pass nothing", &checks, SETTLE)?;
    // The interface goes (the CNI plugin deletes the pod's veth): felix's pins of it go too.
    let idx = ifindex(&fv, "calidb0")?;
    fv.sandbox.node.ip(&["link", "del", "calidb0"])?;
    poll(SETTLE, || hook_pins(&fs, idx).is_empty().then_some(())).map_err(|e| {
        anyhow!(
            "pins of the deleted calidb0 ({e}): {:?}",
            hook_pins(&fs, idx)
        )
    })?;
    fv.stop()
}

/// Every driver is in step with the kernel (`GET /drift` says `inSync`) within `SETTLE`;
/// otherwise an error starting with `what` and showing the drift.
fn ensure_in_step(fv: &mut Fv, what: &str) -> Result<()> {
    let d = fv.d()?;
    poll(SETTLE, || {
        d.admin_json(&["drift"]).filter(|v| v["inSync"] == true)
    })
    .map(|_| ())
    .map_err(|e| anyhow!("{what} ({e}): {:?}", d.admin_json(&["drift"])))
}

/// felix's hook pin directories of ifindex `idx`, either mechanism.
fn hook_pins(fs: &Bpffs, idx: u32) -> Vec<PathBuf> {
    ["tc", "tcx"]
        .iter()
        .flat_map(|mech| {
            ["ing", "egr"].map(|hook| {
                fs.root()
                    .join(mech)
                    .join("hooks")
                    .join(format!("if{idx}_{hook}"))
            })
        })
        .filter(|d| d.exists())
        .collect()
}

/// `iface` carries felix's programs on both hooks, by the mechanism of the run (`tc`: clsact
/// filters, otherwise TCX links).
fn ensure_attached(fv: &Fv, fs: &Bpffs, iface: &str, tc: bool) -> Result<()> {
    let idx = ifindex(fv, iface)?;
    for (hook, dir) in [("ing", "ingress"), ("egr", "egress")] {
        let filter = has_clsact_filter(fv, iface, dir)?;
        let link = tcx_link_pin(fs, idx, hook).exists();
        ensure!(
            filter == tc && link != tc,
            "{iface} {dir}: clsact filter {filter}, TCX link pin {link}"
        );
    }
    let tcx = tcx_programs(fv, iface)?;
    ensure!(
        tcx.len() == if tc { 0 } else { 2 },
        "{iface}: TCX programs {tcx:?}"
    );
    Ok(())
}

/// A workload whose attachment fails (an injected `tcx_attach` fault) passes nothing, in
/// either direction, and the others keep working; once the fault is gone it is programmed.
fn failed_attach_is_fail_closed() -> Result<()> {
    let fs = Bpffs::new("fault")?;
    let mut fv = Fv::standard(Backend::Iptables, &[])?;
    start(&mut fv, &fs, Mode::Bpf, &[("FELIX_BPFATTACHTYPE", "TCX")])?;
    fv.sandbox
        .expect_traffic("before the fault", &standard_checks(), SETTLE)?;
    fv.d()?
        .add_fault("driver/bpf", "tcx_attach", "error", 100_000)?;
    fv.plug(wep("newbie", "shop", "calinew0", 16))?;
    poll(SETTLE, || {
        let st = fv.daemon.as_ref()?.status()?;
        let a = st["actors"]
            .as_array()?
            .iter()
            .find(|a| a["name"] == "driver/bpf")?
            .clone();
        (a["lastError"]["op"] == "tcx_attach").then_some(())
    })
    .map_err(|e| {
        let st = fv
            .daemon
            .as_ref()
            .and_then(|d| d.status())
            .unwrap_or_default();
        let log = fv
            .daemon
            .as_ref()
            .map(|d| d.log_tail(30))
            .unwrap_or_default();
        anyhow!("driver/bpf never reported the injected tcx_attach failure: {e}\n{st:#}\n{log}")
    })?;
    let mut closed = standard_checks();
    closed.extend([
        Check::v4("frontend", "newbie", 8080, false),
        Check::v4("newbie", "frontend", 8080, false),
        Check::v6("newbie", "backend", 8080, false),
        Check::v6("backend", "newbie", 9090, false),
    ]);
    fv.sandbox
        .expect_traffic_now("attach failing: the new workload passes nothing", &closed)?;
    let before = fv.d()?.applies();
    fv.d()?.clear_faults()?;
    fv.d()?.wait_converged(before)?;
    let mut open = standard_checks();
    open.extend([
        Check::v4("frontend", "newbie", 8080, true),
        Check::v4("newbie", "frontend", 8080, true),
        Check::v6("backend", "newbie", 9090, true),
    ]);
    fv.sandbox.expect_traffic("fault cleared", &open, SETTLE)?;
    fv.stop()
}

/// Pings `dst` from namespace `ns` in back-to-back batches until `stop`; returns (sent,
/// received). Every batch waits for its last reply, so a batch's loss is real loss.
fn ping_flood(ns: String, dst: String, stop: Arc<AtomicBool>) -> Result<(u64, u64)> {
    let (mut sent, mut got) = (0u64, 0u64);
    while !stop.load(Ordering::SeqCst) {
        // `ip netns exec` rather than a checked run: ping exits 1 when a reply is missing,
        // and its summary is what counts.
        let out = std::process::Command::new("ip")
            .args([
                "netns", "exec", &ns, "ping", "-q", "-n", "-i", "0.002", "-c", "500",
            ])
            .args(["-W", "2", &dst])
            .output()
            .context("running ping")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (s, r) = parse_ping(&text).ok_or_else(|| anyhow!("unreadable ping output: {text}"))?;
        sent += s;
        got += r;
    }
    Ok((sent, got))
}

fn parse_ping(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.contains("packets transmitted"))?;
    let mut nums = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty());
    let s = nums.next()?.parse().ok()?;
    let r = nums.next()?.parse().ok()?;
    Some((s, r))
}

fn restarts_without_loss() -> Result<()> {
    let fs = Bpffs::new("restart")?;
    let mut fv = Fv::standard(Backend::Iptables, &[])?;
    start(&mut fv, &fs, Mode::Bpf, &[])?;
    fv.sandbox
        .expect_traffic("before the restarts", &standard_checks(), SETTLE)?;
    let fe_ns = fv.sandbox.workload("frontend")?.ns.name().to_string();
    let mut conn = Conn::open(&fe_ns, ip4(11).into(), 8080)?;
    conn.roundtrip("first")?;
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (ns, stop) = (fe_ns.clone(), stop.clone());
        std::thread::spawn(move || ping_flood(ns, ip4(11).to_string(), stop))
    };
    let mut restarts = || -> Result<()> {
        std::thread::sleep(Duration::from_secs(1));
        fv.stop().context("SIGTERM")?;
        // Down for a while: the pinned programs and maps keep policing.
        std::thread::sleep(Duration::from_secs(1));
        conn.roundtrip("stopped after SIGTERM")?;
        start(&mut fv, &fs, Mode::Bpf, &[]).context("start after SIGTERM")?;
        conn.roundtrip("after SIGTERM")?;
        std::thread::sleep(Duration::from_secs(1));
        let d = fv.daemon.take().ok_or_else(|| anyhow!("no daemon"))?;
        d.kill()?;
        std::thread::sleep(Duration::from_secs(2));
        conn.roundtrip("stopped after SIGKILL")?;
        start(&mut fv, &fs, Mode::Bpf, &[]).context("start after SIGKILL")?;
        conn.roundtrip("after SIGKILL")?;
        std::thread::sleep(Duration::from_secs(1));
        Ok(())
    };
    let r = restarts();
    stop.store(true, Ordering::SeqCst);
    let (sent, got) = flood
        .join()
        .map_err(|_| anyhow!("ping thread panicked"))??;
    r?;
    eprintln!("ping flood across SIGTERM and SIGKILL restarts: {sent} sent, {got} received");
    ensure!(sent > 2000, "too few pings sent: {sent}");
    ensure!(
        sent == got,
        "ping flood lost {} of {sent} packets",
        sent - got
    );
    conn.roundtrip("last")?;
    fv.sandbox
        .expect_traffic("after the restarts", &standard_checks(), SETTLE)?;
    fv.stop()
}

/// Conntrack in BPF mode: replies of allowed flows pass a deny-all ingress, an established
/// connection survives a policy change that denies it (as iptables' ESTABLISHED rule), the
/// flows of a deleted workload are cleaned by the scan, and the scan's metrics are served.
fn conntrack_semantics() -> Result<()> {
    let fs = Bpffs::new("conntrack")?;
    let mut fv = world()?;
    fv.ds.write("profile-outonly", OUTONLY_PROFILE)?;
    fv.plug(wep("out", "shop", "caliout0", 15).profiles(&["outonly"]))?;
    start(&mut fv, &fs, Mode::Bpf, &[])?;
    let checks = vec![
        Check::v4("out", "frontend", 8080, true),
        Check::v6("out", "backend", 9090, true),
        Check::v4("frontend", "out", 8080, false),
        Check::v6("db", "out", 8080, false),
    ];
    fv.sandbox.expect_traffic(
        "replies of what a deny-ingress workload opens",
        &checks,
        SETTLE,
    )?;
    let out_ns = fv.sandbox.workload("out")?.ns.name().to_string();
    let mut conn = Conn::open(&out_ns, ip4(11).into(), 8080)?;
    conn.roundtrip("before the policy change")?;
    // The workload may open nothing any more.
    let before = fv.d()?.applies();
    fv.ds.write(
        "profile-outonly",
        CLOSED_PROFILE.replace("closed", "outonly").as_str(),
    )?;
    fv.d()?.wait_converged(before)?;
    fv.sandbox.expect_traffic(
        "a new connection is denied",
        &[Check::v4("out", "frontend", 8080, false)],
        SETTLE,
    )?;
    conn.roundtrip("the established connection survives")?;
    bulk_bypasses_the_host_stack(&fv, &mut conn)?;
    drop(conn);

    // The workload goes: the next scan removes its flows.
    let ops = BpfOps::default();
    let ct = Conntrack::open_existing(&ops, &fs.root())?.ok_or_else(|| anyhow!("no cali_ct"))?;
    let out_v4: std::net::IpAddr = ip4(15).into();
    let out_v6: std::net::IpAddr = ip6(15).into();
    let of_out = |ct: &Conntrack| -> Result<usize> {
        Ok(ct
            .entries(&ops)?
            .iter()
            .filter(|(k, _)| {
                [k.addr_a(), k.addr_b()]
                    .iter()
                    .any(|a| *a == out_v4 || *a == out_v6)
            })
            .count())
    };
    ensure!(of_out(&ct)? > 0, "no tracked flow of the workload");
    let before = fv.d()?.applies();
    fv.ds.remove("wep-out")?;
    fv.d()?.wait_converged(before)?;
    poll(Duration::from_secs(30), || {
        (of_out(&ct).ok()? == 0).then_some(())
    })
    .map_err(|e| {
        anyhow!(
            "flows of the deleted workload left ({e}): {:?}",
            of_out(&ct)
        )
    })?;
    let metrics = fv.d()?.metrics()?;
    for want in [
        "felix_bpf_conntrack_sweeps ",
        "felix_bpf_conntrack_used ",
        "felix_bpf_conntrack_expired_total{reason=\"endpoint_removed\"} ",
        "felix_bpf_conntrack_capacity 512000",
    ] {
        ensure!(metrics.contains(want), "{want} missing from /metrics");
    }
    fv.stop()
}

/// Bytes the node has sent out of `iface` (its host-side workload device).
fn tx_bytes(fv: &Fv, iface: &str) -> Result<u64> {
    let p = format!("/sys/class/net/{iface}/statistics/tx_bytes");
    let t = fv.sandbox.node.exec("cat", &[&p])?;
    t.trim()
        .parse()
        .map_err(|e| anyhow!("tx_bytes of {iface}: {e}"))
}

/// Invariant: bulk TCP of an established flow goes straight from one workload into the
/// other's namespace (`bpf_redirect_peer`), GSO packets included: the host stack never
/// transmits it on either workload's host-side device. (The FIB lookup once answered
/// FRAG_NEEDED for every packet larger than the MTU, sending bulk data through the host's
/// forward path: slower, and through its netfilter rules.)
fn bulk_bypasses_the_host_stack(fv: &Fv, conn: &mut Conn) -> Result<()> {
    let server = fv.sandbox.workload(&conn.server)?.iface.clone();
    let client = fv.sandbox.workload("out")?.iface.clone();
    let before = (tx_bytes(fv, &server)?, tx_bytes(fv, &client)?);
    let line = "x".repeat(256 * 1024);
    for _ in 0..16 {
        conn.roundtrip(&line)?;
    }
    let after = (tx_bytes(fv, &server)?, tx_bytes(fv, &client)?);
    let (to_server, to_client) = (after.0 - before.0, after.1 - before.1);
    // 4 MiB each way; the host may send a little of its own (neighbour probes).
    ensure!(
        to_server < 256 * 1024 && to_client < 256 * 1024,
        "4 MiB each way went through the host stack: {to_server} bytes out of {server}, \
         {to_client} out of {client}"
    );
    Ok(())
}

fn no_bpf_left(fv: &Fv, fs: &Bpffs) -> Result<()> {
    ensure!(
        !fs.root().exists(),
        "pins left under {}",
        fs.root().display()
    );
    for iface in ["califront0", "caliback0", "calidb0", "caliprom0"] {
        for dir in ["ingress", "egress"] {
            ensure!(
                !has_clsact_filter(fv, iface, dir)?,
                "clsact filter 0xca11 left on {iface} {dir}"
            );
        }
        let tcx = tcx_programs(fv, iface)?;
        ensure!(tcx.is_empty(), "TCX programs left on {iface}: {tcx:?}");
    }
    Ok(())
}

fn policy_chains(fv: &Fv) -> Vec<String> {
    iptables_calico_state(&fv.sandbox.node)
        .into_values()
        .flat_map(|(chains, _)| chains)
        .filter(|c| {
            ["cali-pi-", "cali-po-", "cali-pri-", "cali-pro-"]
                .iter()
                .any(|p| c.starts_with(p))
        })
        .collect()
}

/// Every chain of felix's in iptables (any table, both families).
fn iptables_cali_chains(fv: &Fv) -> Vec<String> {
    iptables_calico_state(&fv.sandbox.node)
        .into_values()
        .flat_map(|(c, _)| c)
        .filter(|c| c.starts_with("cali"))
        .collect()
}

/// The rules BPF mode keeps are in place in the flavour of `bpf` (iptables for
/// [`Mode::Bpf`], nftables for [`Mode::BpfNft`]) and nothing of felix's is in the other.
fn kept_rules_in_place(fv: &Fv, bpf: Mode) -> Result<()> {
    let kept = [
        "cali-FORWARD",
        "cali-from-wl-dispatch",
        "cali-to-wl-dispatch",
    ];
    if bpf == Mode::BpfNft {
        for family in ["ip", "ip6"] {
            let chains = nft_chains(&fv.sandbox.node, family)?;
            // Our nftables chains are named `<iptables table>-<chain>`.
            for c in kept {
                ensure!(
                    chains.contains(&format!("filter-{c}")),
                    "{c} missing in nft {family} calico: {chains:?}"
                );
            }
            ensure!(
                !chains
                    .iter()
                    .any(|c| c.contains("-cali-pi-") || c.contains("-cali-pri-")),
                "policy chains in BPF mode's nftables rules: {chains:?}"
            );
        }
        let ipt = iptables_cali_chains(fv);
        ensure!(
            ipt.is_empty(),
            "iptables chains left with nftables rules: {ipt:?}"
        );
    } else {
        let chains = iptables_cali_chains(fv);
        for c in kept {
            ensure!(
                chains.iter().any(|x| x == c),
                "{c} missing in BPF mode: {chains:?}"
            );
        }
        let nft = nft_calico_tables(&fv.sandbox.node)?;
        ensure!(nft.is_empty(), "nftables tables left in BPF mode: {nft:?}");
    }
    Ok(())
}

/// `bpf` (with `attach_type`) -> `other` -> `bpf`, with the inventory after each switch.
fn switch_and_back(attach_type: &str, other: Mode, bpf: Mode) -> Result<()> {
    let fs = Bpffs::new(&format!("switch-{attach_type}-{other:?}-{bpf:?}"))?;
    let mut fv = world()?;
    fv.ds.write("pol-backend", BACKEND_INGRESS)?;
    let env = [("FELIX_BPFATTACHTYPE", attach_type)];
    let checks = vec![
        Check::v4("frontend", "backend", 8080, true),
        Check::v4("backend", "db", 8080, true),
        Check::v6("prom", "db", 9090, true),
        // An unknown `cali*` interface passes nothing in every mode.
        Check::v4("frontend", "stranger", 8080, false),
        Check::v6("stranger", "backend", 9090, false),
    ];
    start(&mut fv, &fs, bpf, &env)?;
    fv.sandbox.expect_traffic("BPF mode", &checks, SETTLE)?;
    ensure!(fs.root().exists(), "no pins in BPF mode");
    ensure!(policy_chains(&fv).is_empty(), "policy chains in BPF mode");
    poll(SETTLE, || kept_rules_in_place(&fv, bpf).ok())
        .map_err(|e| anyhow!("{e}: {:?}", kept_rules_in_place(&fv, bpf).err()))?;
    fv.stop()?;

    start(&mut fv, &fs, other, &[])?;
    let mut ipt = checks.clone();
    ipt.push(Check::v4("db", "backend", 8080, false));
    fv.sandbox
        .expect_traffic("*tables mode after BPF", &ipt, SETTLE)?;
    poll(SETTLE, || no_bpf_left(&fv, &fs).ok()).map_err(|e| {
        anyhow!(
            "BPF state left in {other:?} mode ({e}): {:?}",
            no_bpf_left(&fv, &fs).err()
        )
    })?;
    match other {
        Mode::Nftables => ensure!(
            nft_calico_tables(&fv.sandbox.node)?.len() == 2,
            "no calico tables in nftables mode"
        ),
        Mode::Iptables | Mode::Bpf | Mode::BpfNft => ensure!(
            !policy_chains(&fv).is_empty(),
            "no policy chains in iptables mode"
        ),
    }
    fv.stop()?;

    start(&mut fv, &fs, bpf, &env)?;
    fv.sandbox
        .expect_traffic("BPF after *tables mode", &checks, SETTLE)?;
    poll(SETTLE, || kept_rules_in_place(&fv, bpf).ok()).map_err(|e| {
        anyhow!(
            "BPF mode's rules after *tables mode ({e}): {:?}",
            kept_rules_in_place(&fv, bpf).err()
        )
    })?;
    poll(SETTLE, || policy_chains(&fv).is_empty().then_some(())).map_err(|e| {
        anyhow!(
            "iptables policy chains left in BPF mode ({e}): {:?}",
            policy_chains(&fv)
        )
    })?;
    let sets = fv.sandbox.node.exec("ipset", &["list", "-n"])?;
    let calc_sets: Vec<&str> = sets
        .lines()
        // The NAT-outgoing sets of `manager/masq-vN` stay (BPF mode keeps NAT outgoing).
        .filter(|l| {
            l.starts_with("cali") && !l.ends_with("ipam-pools") && !l.ends_with("network-ip-pools")
        })
        .collect();
    ensure!(
        calc_sets.is_empty(),
        "policy IP sets left in BPF mode: {calc_sets:?}"
    );
    fv.stop()
}

fn run(what: &str, f: impl FnOnce() -> Result<()>) {
    if let Err(e) = f() {
        panic!("{what}: {e:#}");
    }
}

#[test]
fn bpf_tcx_profile_allow_default_deny_unknown_interface() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf tcx", || allow_deny_unknown(None, false));
}

#[test]
fn bpf_clsact_with_attach_type_tc() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf tc", || allow_deny_unknown(Some("TC"), false));
}

#[test]
fn bpf_debug_path_with_log_level_debug() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf debug", || allow_deny_unknown(Some("TCX"), true));
}

#[test]
fn bpf_restart_sigterm_and_sigkill_without_loss() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf restart", restarts_without_loss);
}

#[test]
fn bpf_mode_switch_to_iptables_and_back() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf switch tcx", || {
        switch_and_back("TCX", Mode::Iptables, Mode::Bpf)
    });
}

#[test]
fn bpf_mode_switch_to_iptables_and_back_clsact() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf switch tc", || {
        switch_and_back("TC", Mode::Iptables, Mode::Bpf)
    });
}

#[test]
fn bpf_mode_switch_to_nftables_and_back() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf switch nft", || {
        switch_and_back("TCX", Mode::Nftables, Mode::Bpf)
    });
}

#[test]
fn bpf_with_nftables_rules_switch_to_iptables_and_back() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf nft rules switch", || {
        switch_and_back("TCX", Mode::Iptables, Mode::BpfNft)
    });
}

#[test]
fn bpf_conntrack_replies_established_flows_and_deleted_workloads() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf conntrack", conntrack_semantics);
}

#[test]
fn bpf_failed_attach_is_fail_closed() {
    felix_netns::require!(netns BPF_TOOLS);
    run("bpf fault", failed_attach_is_fail_closed);
}

#[test]
fn ping_summaries_parse() {
    assert_eq!(
        parse_ping("--- 10.65.0.11 ping statistics ---\n200 packets transmitted, 198 received, 1% packet loss"),
        Some((200, 198))
    );
    assert_eq!(parse_ping("nothing"), None);
}
