//! [`IfaceSettingsTable`]: applies the per-interface kernel settings upstream
//! Felix sets on the host side of workload interfaces (one IP version):
//!
//! - IPv4: `route_localnet=1`, `neigh/<if>/proxy_delay=0`, `proxy_arp=1`
//!   (the host answers the workload's ARP for its gateway 169.254.1.1),
//!   `forwarding=1`, `rp_filter` (strict unless the endpoint may spoof);
//! - IPv6: `proxy_ndp=1`, `forwarding=1`;
//! - both: `ipv6 accept_ra=0` (a workload must not be able to route the
//!   host by router advertisements).
//!
//! With `IPForwarding` enabled the global forwarding switch of the family
//! (`net/ipv4/ip_forward`, `net/ipv6/conf/all/forwarding`) is also turned on,
//! at the first apply and every resync.
//!
//! Whether an interface exists and is up is asked over rtnetlink (a lookup by name, or one
//! listing for more than [`FEW_LINKS`] names), not with `ip link show`: no process per
//! lookup, which the interface monitor's every report used to cost (15 ms each, measured in
//! the eBPF chaos soak).
//!
//! The settings of up to [`SYSCTL_BATCH`] interfaces are one `sysctl -w`
//! command (start of day configures every workload interface: one process
//! instead of one per interface, which competed with the table
//! transactions).  `sysctl` writes every assignment it can and fails at the
//! end if any failed; a failed batch is then written interface by interface
//! to find the ones that failed.  Each batch is read first (one `sysctl -n`)
//! and only the settings that differ are written, so a resync of a settled
//! node writes nothing (`a_resync_of_settled_interfaces_writes_nothing`);
//! when the read fails the whole batch is written; an interface that is
//! missing or down is retried on later applies, and promptly when the
//! interface monitor reports it ([`IfaceSettingsTable::interfaces_changed`]).
//! Nothing is ever removed: the settings die with the interface.

use std::collections::{BTreeMap, BTreeSet};

use crate::dataplane::desired::{IfaceSettings, IfacesDesired, Pushed};
use crate::dataplane::netlink::{NetlinkError, Seamed};
use crate::dataplane::IpVersion;

use super::{IpTool, IpToolError};

/// What one apply did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfacesStats {
    /// Interfaces configured.
    pub configured: usize,
    /// Interfaces skipped because missing or down.
    pub waiting: usize,
}

/// The per-interface kernel settings (sysctls) of workload interfaces, for one IP version.
///
/// # API model
/// Declarative: [`IfaceSettingsTable::apply`] takes the desired settings per interface and
/// writes what is not yet written; `queue_resync` rewrites everything;
/// `interfaces_changed` retries the named interfaces.
///
/// # Design
/// Settings are idempotent `sysctl -w` assignments, batched [`SYSCTL_BATCH`] interfaces per
/// command; a failed batch is rewritten interface by interface to find the failures.
///
/// # Identification of our state
/// Nothing to identify: the settings belong to the workload interface and die with it; nothing
/// is ever removed.
///
/// # Retry policy
/// A failed or waiting interface (missing, or down) keeps the table dirty and is retried at
/// later applies, promptly when the interface monitor reports it.
///
/// # Thread safety
/// Not shared: owned by one driver actor, called from one thread at a time (`&mut self`).
#[derive(Debug)]
pub struct IfaceSettingsTable {
    ipv: IpVersion,
    nl: IpTool,
    /// Link lookups (rtnetlink, same seam as `nl`).
    links: Seamed,
    pushed: Pushed<String>,
    /// Something to look at: a resync, a failure, a monitor report.
    retry: bool,
    /// Desired interfaces that were missing or down at the last apply.
    missing: bool,
    ip_forwarding: bool,
    globals_done: bool,
}

/// Up to this many interfaces are looked up one by one rather than by listing every link.
pub const FEW_LINKS: usize = 4;

/// Which of `names` exist and are administratively up: a handful looked up by name, more
/// by one listing of every link.
fn links_up(links: &mut Seamed, names: &[&str]) -> Result<BTreeSet<String>, NetlinkError> {
    if names.len() > FEW_LINKS {
        let wanted: BTreeSet<&str> = names.iter().copied().collect();
        return Ok(links
            .list_links()?
            .into_iter()
            .filter(|l| l.admin_up && wanted.contains(l.name.as_str()))
            .map(|l| l.name)
            .collect());
    }
    let mut up = BTreeSet::new();
    for name in names {
        if links.link_by_name(name)?.is_some_and(|l| l.admin_up) {
            up.insert((*name).to_string());
        }
    }
    Ok(up)
}

/// Interfaces whose settings share one `sysctl` command (about 1,000
/// arguments at most, far below the kernel's argument limits).
pub const SYSCTL_BATCH: usize = 160;

/// The `key=value` sysctl assignments for one interface.
pub fn sysctls_for(ipv: IpVersion, iface: &str, s: &IfaceSettings) -> Vec<String> {
    let mut v = vec![format!("net/ipv6/conf/{iface}/accept_ra=0")];
    match ipv {
        IpVersion::V4 => v.extend([
            format!("net/ipv4/conf/{iface}/route_localnet=1"),
            format!("net/ipv4/neigh/{iface}/proxy_delay=0"),
            format!("net/ipv4/conf/{iface}/proxy_arp=1"),
            format!("net/ipv4/conf/{iface}/forwarding=1"),
            format!("net/ipv4/conf/{iface}/rp_filter={}", s.rp_filter),
        ]),
        IpVersion::V6 => v.extend([
            format!("net/ipv6/conf/{iface}/proxy_ndp=1"),
            format!("net/ipv6/conf/{iface}/forwarding=1"),
        ]),
    }
    v
}

impl IfaceSettingsTable {
    /// One `sysctl -q -w` command with these assignments.
    fn write<'a>(&self, kvs: impl Iterator<Item = &'a String>) -> Result<(), IpToolError> {
        let mut args: Vec<&str> = vec!["-q", "-w"];
        args.extend(kvs.map(String::as_str));
        self.nl.write_sysctls(&args)
    }

    /// The assignments of `kvs` the kernel does not hold yet (one `sysctl -n` read); all
    /// of them when the read fails or answers otherwise than one value per key.
    fn differing<'a>(&self, kvs: Vec<&'a String>) -> Vec<&'a String> {
        let split = |kv: &'a String| kv.split_once('=').unwrap_or((kv.as_str(), ""));
        let keys: Vec<&str> = kvs.iter().map(|kv| split(kv).0).collect();
        match self.nl.read_sysctls(&keys) {
            Ok(values) if values.len() == kvs.len() => kvs
                .into_iter()
                .zip(values)
                .filter(|(kv, have)| split(kv).1 != have.as_str())
                .map(|(kv, _)| kv)
                .collect(),
            _ => kvs,
        }
    }

    /// A table; the first apply writes every desired interface (and, with
    /// `ip_forwarding`, the global forwarding switch).
    pub fn new(ipv: IpVersion, nl: IpTool, ip_forwarding: bool) -> Self {
        IfaceSettingsTable {
            ipv,
            links: nl.links(),
            nl,
            pushed: Pushed::default(),
            retry: false,
            missing: false,
            ip_forwarding,
            globals_done: false,
        }
    }

    /// Rewrites every interface at the next apply.
    pub fn queue_resync(&mut self) {
        self.pushed.clear();
        self.retry = true;
        self.globals_done = false;
    }

    /// The interface monitor saw these interfaces change (appear, go up,
    /// be re-created...): configure them again at the next apply if they
    /// are desired. Settings die with an interface, so a re-created one
    /// needs them rewritten.
    pub fn interfaces_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a String>) {
        for n in names {
            self.pushed.forget(n);
            self.retry = true;
        }
    }

    /// True if interfaces wait to be configured (including desired ones
    /// that are missing or down: without an interface monitor they are
    /// polled for).
    pub fn is_dirty(&self) -> bool {
        self.missing || self.is_dirty_except_missing()
    }

    /// True if there is work other than waiting for missing interfaces
    /// (what matters when the interface monitor reports their arrival).
    pub fn is_dirty_except_missing(&self) -> bool {
        self.retry || !self.globals_done
    }

    /// Configures new or changed interfaces that are up.
    pub fn apply(&mut self, desired: &IfacesDesired) -> Result<IfacesStats, IpToolError> {
        let mut stats = IfacesStats::default();
        if !self.globals_done {
            if self.ip_forwarding {
                let key = match self.ipv {
                    IpVersion::V4 => "net/ipv4/ip_forward",
                    IpVersion::V6 => "net/ipv6/conf/all/forwarding",
                };
                if self.nl.read_sysctl(key).ok().as_deref() != Some("1") {
                    self.nl.write_sysctl(key, "1")?;
                }
            }
            self.globals_done = true;
        }
        let diff = self.pushed.diff(desired);
        if diff.changed.is_empty() {
            self.retry = false;
            self.missing = false;
            self.pushed.mark_pushed(desired);
            return Ok(stats);
        }
        let names: Vec<&str> = diff.changed.iter().map(|(i, _)| i.as_str()).collect();
        let up = links_up(&mut self.links, &names)?;
        let mut failed: BTreeMap<String, ()> = BTreeMap::new();
        let mut first_err = None;
        let mut ready: Vec<(&String, Vec<String>)> = Vec::new();
        for (iface, settings) in diff.changed {
            if up.contains(iface) {
                ready.push((iface, sysctls_for(self.ipv, iface, settings)));
            } else {
                stats.waiting += 1;
                failed.insert(iface.clone(), ());
            }
        }
        for batch in ready.chunks(SYSCTL_BATCH) {
            let todo = self.differing(batch.iter().flat_map(|(_, kvs)| kvs.iter()).collect());
            if todo.is_empty() || (batch.len() > 1 && self.write(todo.into_iter()).is_ok()) {
                stats.configured += batch.len();
                continue;
            }
            // One interface, or a batch with a failure in it: interface by
            // interface, so exactly the failed ones are retried later.
            for (iface, kvs) in batch {
                match self.write(kvs.iter()) {
                    Ok(()) => stats.configured += 1,
                    Err(e) => {
                        tracing::warn!(iface = %iface, error = %e, "interface settings failed");
                        failed.insert((*iface).clone(), ());
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        // Remember everything except what still needs doing.
        self.pushed.mark_pushed(desired);
        for iface in failed.keys() {
            self.pushed.forget(iface);
        }
        self.missing = stats.waiting > 0;
        self.retry = first_err.is_some();
        match first_err {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::kernel::{CommandRequest, Commands, FakeResponse, ScriptedCommands};

    fn is_write(c: &CommandRequest) -> bool {
        c.program == "sysctl" && c.args.first().map(String::as_str) == Some("-q")
    }

    fn writes(fake: &ScriptedCommands) -> usize {
        fake.calls().iter().filter(|c| is_write(c)).count()
    }

    #[test]
    fn a_resync_of_settled_interfaces_writes_nothing() {
        // The kernel holds what felix wants: each `sysctl -n` key answers its wanted value.
        let fake = ScriptedCommands::new(move |req| match req.program.as_str() {
            _ if req.args.first().map(String::as_str) == Some("-n") => {
                let want = |k: &str| {
                    let v = sysctls_for(IpVersion::V4, "x", &IfaceSettings { rp_filter: 1 });
                    let leaf = k.rsplit('/').next().unwrap_or_default().to_string();
                    v.iter()
                        .find(|kv| {
                            kv.split('=')
                                .next()
                                .is_some_and(|kk| kk.ends_with(&format!("/{leaf}")))
                        })
                        .and_then(|kv| kv.split('=').nth(1))
                        .unwrap_or("1")
                        .to_string()
                };
                let lines: Vec<String> = req.args[1..].iter().map(|k| want(k)).collect();
                FakeResponse::Ok(lines.join("\n") + "\n")
            }
            _ => FakeResponse::Ok(String::new()),
        });
        links(&fake, &["cali1", "cali2"]);
        let cmds = Commands::standalone(fake.clone(), "driver/ifaces-v4");
        let mut t = IfaceSettingsTable::new(IpVersion::V4, IpTool::new(cmds), true);
        let mut d = IfacesDesired::default();
        d.set("m", "cali1".into(), IfaceSettings { rp_filter: 1 });
        d.set("m", "cali2".into(), IfaceSettings { rp_filter: 1 });
        let s = t.apply(&d).expect("apply");
        assert_eq!(s.configured, 2);
        assert_eq!(writes(&fake), 0, "{:?}", fake.calls());
        t.queue_resync();
        t.apply(&d).expect("resync");
        assert_eq!(writes(&fake), 0, "a resync rewrote settled settings");
        assert!(!t.is_dirty());
    }

    #[test]
    fn configures_up_interfaces_once_and_waits_for_missing_ones() {
        let fake = ScriptedCommands::new(|_| FakeResponse::Ok(String::new()));
        links(&fake, &["cali1"]);
        let cmds = Commands::standalone(fake.clone(), "driver/ifaces-v4");
        let mut t = IfaceSettingsTable::new(IpVersion::V4, IpTool::new(cmds), true);
        let mut d = IfacesDesired::default();
        d.set("m", "cali1".into(), IfaceSettings { rp_filter: 1 });
        d.set("m", "cali2".into(), IfaceSettings { rp_filter: 1 });
        let s = t.apply(&d).unwrap();
        assert_eq!(
            s,
            IfacesStats {
                configured: 1,
                waiting: 1
            }
        );
        let sysctl: Vec<_> = fake.calls().into_iter().filter(is_write).collect();
        assert_eq!(sysctl.len(), 2);
        assert_eq!(sysctl[0].args, vec!["-q", "-w", "net/ipv4/ip_forward=1"]);
        assert!(sysctl[1]
            .args
            .contains(&"net/ipv4/conf/cali1/proxy_arp=1".to_string()));
        assert!(t.is_dirty());
        assert_eq!(fake.count("ip"), 0, "links are looked up over rtnetlink");
        fake.clear_calls();
        let s = t.apply(&d).unwrap();
        // Only the waiting interface is looked at again.
        assert_eq!(
            s,
            IfacesStats {
                configured: 0,
                waiting: 1
            }
        );
        assert_eq!(writes(&fake), 0);
    }

    /// Up links of these names in the runner's rtnetlink fake.
    fn links(fake: &ScriptedCommands, names: &[&str]) {
        for n in names {
            fake.netlink_fake().add_link(n);
        }
    }

    #[test]
    fn many_interfaces_share_one_sysctl_process() {
        let names: Vec<String> = (0..10).map(|i| format!("cali{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let fake = ScriptedCommands::new(|_| FakeResponse::Ok(String::new()));
        links(&fake, &refs);
        let cmds = Commands::standalone(fake.clone(), "driver/ifaces-v4");
        let mut t = IfaceSettingsTable::new(IpVersion::V4, IpTool::new(cmds), false);
        let mut d = IfacesDesired::default();
        for n in &names {
            d.set("m", n.clone(), IfaceSettings { rp_filter: 1 });
        }
        let s = t.apply(&d).unwrap();
        assert_eq!(s.configured, 10);
        let sysctl: Vec<_> = fake.calls().into_iter().filter(is_write).collect();
        assert_eq!(sysctl.len(), 1, "{sysctl:?}");
        for n in &names {
            assert!(sysctl[0]
                .args
                .contains(&format!("net/ipv4/conf/{n}/proxy_arp=1")));
        }
        assert!(!t.is_dirty());
    }

    #[test]
    fn a_failed_batch_is_redone_per_interface_and_only_the_failures_are_retried() {
        let fake = ScriptedCommands::new(move |req| {
            if req.args.iter().any(|a| a.contains("/cali2/")) {
                FakeResponse::Fail(1, "sysctl: cannot stat cali2".into())
            } else {
                FakeResponse::Ok(String::new())
            }
        });
        links(&fake, &["cali1", "cali2", "cali3"]);
        let cmds = Commands::standalone(fake.clone(), "driver/ifaces-v4");
        let mut t = IfaceSettingsTable::new(IpVersion::V4, IpTool::new(cmds), false);
        let mut d = IfacesDesired::default();
        for n in ["cali1", "cali2", "cali3"] {
            d.set("m", n.into(), IfaceSettings { rp_filter: 1 });
        }
        assert!(t.apply(&d).is_err());
        // The batch, then one command per interface.
        assert_eq!(writes(&fake), 4);
        assert!(t.is_dirty());
        fake.clear_calls();
        assert!(t.apply(&d).is_err());
        let again: Vec<_> = fake.calls().into_iter().filter(is_write).collect();
        assert_eq!(again.len(), 1, "{again:?}");
        assert!(again[0]
            .args
            .iter()
            .all(|a| a == "-q" || a == "-w" || a.contains("/cali2/")));
    }

    #[test]
    fn ipv6_settings_enable_proxy_ndp_and_disable_router_adverts() {
        let v = sysctls_for(IpVersion::V6, "cali9", &IfaceSettings { rp_filter: 1 });
        assert!(v.contains(&"net/ipv6/conf/cali9/proxy_ndp=1".to_string()));
        assert!(v.contains(&"net/ipv6/conf/cali9/accept_ra=0".to_string()));
        assert!(!v.iter().any(|s| s.contains("ipv4")));
    }
}
