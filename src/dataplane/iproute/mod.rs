//! Routes to local workloads ([`RouteTable`]) and workload interface settings
//! ([`IfaceSettingsTable`]), programmed with the `ip` and `sysctl` tools, and their driver
//! actors ([`RoutesDriver`], [`IfacesDriver`]).
//!
//! [`IpTool`] is the only way they touch routes, links and per-interface sysctls: every
//! operation is one `ip` / `sysctl` command through the driver's [`Commands`], so it carries
//! the driver's actor name and an operation name (`route-list`, `route-replace`, `route-del`,
//! `link-list`, `sysctl`), and with them fault injection and metrics. Commands run in the namespace the command seam
//! is bound to, which is how kernel tests point a driver at a throwaway
//! network namespace. (`ip -j -N` gives machine-readable output with
//! numeric protocols.)

mod actor;
mod ifaces;
mod routes;

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Deserialize;

use crate::dataplane::kernel::{Commands, KernelError};
use crate::dataplane::IpVersion;

/// Up to this many interfaces are looked up one by one rather than by
/// listing every link.
const FEW_LINKS: usize = 4;

pub use actor::{IfacesDriver, InterfaceTable, InterfaceTableDriver, RoutesDriver};
pub use ifaces::{IfaceSettingsTable, IfacesStats};
pub use routes::{RouteOwnership, RouteTable, RouteTableStats, DEFAULT_ROUTE_PROTO};

/// Errors of the route/link seam.
#[derive(Debug, thiserror::Error)]
pub enum IpToolError {
    /// The command failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// Its output could not be understood.
    #[error("cannot parse `{what}` output: {detail}")]
    Parse {
        /// Which listing.
        what: &'static str,
        /// Why.
        detail: String,
    },
}

impl From<IpToolError> for felix_actors::DriverError {
    fn from(e: IpToolError) -> Self {
        match e {
            IpToolError::Kernel(k) => k.into(),
            IpToolError::Parse { what, .. } => {
                felix_actors::DriverError::op(what, felix_actors::FailureKind::Unreadable, e)
            }
        }
    }
}

/// A route as read back from the main table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    /// Destination.
    pub dst: IpNet,
    /// Output device (`None` for multipath or device-less routes).
    pub dev: Option<String>,
    /// Route protocol number (3 = boot when the tool omits it).
    pub protocol: u8,
}

/// A link as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface name.
    pub name: String,
    /// Administratively and operationally up.
    pub up: bool,
}

#[derive(Deserialize)]
struct JsonRoute {
    dst: String,
    dev: Option<String>,
    protocol: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct JsonLink {
    ifname: String,
    #[serde(default)]
    flags: Vec<String>,
    operstate: Option<String>,
}

fn family_flag(ipv: IpVersion) -> &'static str {
    match ipv {
        IpVersion::V4 => "-4",
        IpVersion::V6 => "-6",
    }
}

/// Parses a destination as printed by `ip` (a bare address is a host route).
fn parse_dst(s: &str) -> Option<IpNet> {
    if let Ok(n) = s.parse::<IpNet>() {
        return Some(n.trunc());
    }
    s.parse::<IpAddr>().ok().map(IpNet::from)
}

/// Parses `ip -j -N route show` output: unicast routes only.
pub fn parse_routes(out: &str) -> Result<Vec<KernelRoute>, IpToolError> {
    if out.trim().is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<JsonRoute> = serde_json::from_str(out).map_err(|e| IpToolError::Parse {
        what: "ip route show",
        detail: e.to_string(),
    })?;
    Ok(rows
        .into_iter()
        .filter(|r| r.kind.as_deref().is_none_or(|k| k == "unicast"))
        .filter_map(|r| {
            Some(KernelRoute {
                dst: parse_dst(&r.dst)?,
                dev: r.dev,
                // `ip` omits the protocol for boot routes.
                protocol: match r.protocol {
                    None => 3,
                    Some(p) => p.parse().ok()?,
                },
            })
        })
        .collect())
}

/// Parses `ip -j link show` output.
pub fn parse_links(out: &str) -> Result<Vec<Link>, IpToolError> {
    if out.trim().is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<JsonLink> = serde_json::from_str(out).map_err(|e| IpToolError::Parse {
        what: "ip link show",
        detail: e.to_string(),
    })?;
    Ok(rows
        .into_iter()
        .map(|l| Link {
            up: l.flags.iter().any(|f| f == "UP") && l.operstate.as_deref() != Some("DOWN"),
            name: l.ifname,
        })
        .collect())
}

/// The seam itself: typed route/link/sysctl operations over [`Commands`].
#[derive(Debug, Clone)]
pub struct IpTool {
    cmds: Commands,
}

impl IpTool {
    /// Operations through `cmds` (which names the actor).
    pub fn new(cmds: Commands) -> Self {
        IpTool { cmds }
    }

    /// Unicast routes of the main table for `ipv`.
    pub fn list_routes(&self, ipv: IpVersion) -> Result<Vec<KernelRoute>, IpToolError> {
        let out = self.cmds.run(
            "route-list",
            "ip",
            &[
                "-j",
                "-N",
                family_flag(ipv),
                "route",
                "show",
                "table",
                "main",
            ],
            None,
        )?;
        parse_routes(&out.stdout)
    }

    /// Adds or replaces a device route `dst dev <dev> proto <protocol>`.
    pub fn replace_route(
        &self,
        ipv: IpVersion,
        dst: &IpNet,
        dev: &str,
        protocol: u8,
    ) -> Result<(), IpToolError> {
        let dst = dst.to_string();
        let proto = protocol.to_string();
        self.cmds.run(
            "route-replace",
            "ip",
            &[
                family_flag(ipv),
                "route",
                "replace",
                &dst,
                "dev",
                dev,
                "scope",
                "link",
                "proto",
                &proto,
            ],
            None,
        )?;
        Ok(())
    }

    /// Deletes a route previously read back.
    pub fn delete_route(&self, ipv: IpVersion, route: &KernelRoute) -> Result<(), IpToolError> {
        let dst = route.dst.to_string();
        let proto = route.protocol.to_string();
        let mut args = vec![family_flag(ipv), "route", "del", dst.as_str()];
        if let Some(dev) = &route.dev {
            args.extend(["dev", dev.as_str()]);
        }
        args.extend(["proto", proto.as_str(), "table", "main"]);
        match self.cmds.run("route-del", "ip", &args, None) {
            Ok(_) => Ok(()),
            // Already gone (e.g. its interface was deleted): that is the goal.
            Err(e) if e.stderr().contains("No such process") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every link.
    pub fn list_links(&self) -> Result<Vec<Link>, IpToolError> {
        let out = self
            .cmds
            .run("link-list", "ip", &["-j", "link", "show"], None)?;
        parse_links(&out.stdout)
    }

    /// Which of `names` exist and are up. A handful of names is looked up
    /// one by one (`ip link show dev`), which on a node with hundreds of
    /// workload interfaces is much cheaper than listing every link; more
    /// names use one full listing.
    pub fn links_up(&self, names: &[&str]) -> Result<BTreeSet<String>, IpToolError> {
        if names.len() > FEW_LINKS {
            let wanted: BTreeSet<&str> = names.iter().copied().collect();
            return Ok(self
                .list_links()?
                .into_iter()
                .filter(|l| l.up && wanted.contains(l.name.as_str()))
                .map(|l| l.name)
                .collect());
        }
        let mut up = BTreeSet::new();
        for name in names {
            match self.cmds.run(
                "link-list",
                "ip",
                &["-j", "link", "show", "dev", name],
                None,
            ) {
                Ok(out) => {
                    let found = parse_links(&out.stdout)?;
                    if found.iter().any(|l| l.up && l.name == *name) {
                        up.insert(name.to_string());
                    }
                }
                Err(e) if e.stderr().contains("does not exist") => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(up)
    }

    /// Adds or replaces several device routes (as [`Self::replace_route`])
    /// in one `ip -batch` process. On failure nothing is known about which
    /// lines took effect; callers fall back to single replaces.
    pub fn replace_routes(
        &self,
        ipv: IpVersion,
        routes: &[(&IpNet, &str)],
        protocol: u8,
    ) -> Result<(), IpToolError> {
        let mut script = String::new();
        for (dst, dev) in routes {
            script.push_str(&format!(
                "route replace {dst} dev {dev} scope link proto {protocol}\n"
            ));
        }
        self.cmds.run(
            "route-replace",
            "ip",
            &[family_flag(ipv), "-batch", "-"],
            Some(script.as_bytes()),
        )?;
        Ok(())
    }

    /// Reads a sysctl given in slash form (`net/ipv4/conf/cali1/proxy_arp`).
    pub fn read_sysctl(&self, key: &str) -> Result<String, IpToolError> {
        let out = self.cmds.run("sysctl-read", "sysctl", &["-n", key], None)?;
        Ok(out.stdout.trim().to_string())
    }

    /// Writes a sysctl given in slash form (safe for names with dots).
    pub fn write_sysctl(&self, key: &str, value: &str) -> Result<(), IpToolError> {
        let kv = format!("{key}={value}");
        self.write_sysctls(&["-q", "-w", &kv])
    }

    /// Runs one `sysctl` command with these arguments (several `-w`
    /// assignments in one process).
    pub fn write_sysctls(&self, args: &[&str]) -> Result<(), IpToolError> {
        self.cmds.run("sysctl", "sysctl", args, None)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ip_route_json_with_boot_protocol_omitted() {
        let out = r#"[{"dst":"10.65.0.2","dev":"cali1","protocol":"80","scope":"253","flags":[]},
            {"dst":"10.65.1.0/24","dev":"cali1","scope":"253","flags":[]},
            {"dst":"10.1.0.0/16","type":"blackhole","protocol":"80","flags":[]},
            {"dst":"default","gateway":"10.0.0.1","dev":"eth0","protocol":"4","flags":[]}]"#;
        let r = parse_routes(out).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].dst, "10.65.0.2/32".parse::<IpNet>().unwrap());
        assert_eq!(r[0].protocol, 80);
        assert_eq!(r[1].protocol, 3);
        assert!(parse_routes("not json").is_err());
        assert!(parse_routes("").unwrap().is_empty());
    }

    #[test]
    fn parses_links_and_their_state() {
        let out = r#"[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK"],"operstate":"DOWN"},
            {"ifindex":3,"ifname":"cali1","flags":["BROADCAST","UP","LOWER_UP"],"operstate":"UP"}]"#;
        let l = parse_links(out).unwrap();
        assert_eq!(
            l,
            vec![
                Link {
                    name: "lo".into(),
                    up: false
                },
                Link {
                    name: "cali1".into(),
                    up: true
                }
            ]
        );
    }
}
