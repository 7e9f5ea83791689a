//! Routes of every producer ([`RouteTable`], over rtnetlink through
//! `crate::dataplane::netlink`) and workload interface settings ([`IfaceSettingsTable`],
//! with the `ip` and `sysctl` tools), and their driver actors ([`RoutesDriver`],
//! [`IfacesDriver`]).
//!
//! [`IpTool`] is the only way interface settings touch links and per-interface sysctls: every
//! operation is one `ip` / `sysctl` command through the driver's [`Commands`], so it carries
//! the driver's actor name and an operation name (`link-list`, `sysctl`), and with them fault
//! injection and metrics. Commands run in the namespace the command seam is bound to, which is
//! how kernel tests point a driver at a throwaway network namespace.

/// The command operations of `driver/ifaces-vN` (its fault targets).
pub const OPS: &[&str] = &["link-list", "sysctl", "sysctl-read"];

mod actor;
mod ifaces;
mod routes;

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::dataplane::kernel::{Commands, KernelError};

/// Up to this many interfaces are looked up one by one rather than by
/// listing every link.
const FEW_LINKS: usize = 4;

pub use actor::{IfacesDriver, InterfaceTable, InterfaceTableDriver, RoutesDriver};
pub use ifaces::{IfaceSettingsTable, IfacesStats};
pub use routes::{RouteOwnership, RouteTable, RouteTableStats, CNI_GRACE, DEFAULT_ROUTE_PROTO};

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

/// A link as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface name.
    pub name: String,
    /// Administratively and operationally up.
    pub up: bool,
}

#[derive(Deserialize)]
struct JsonLink {
    ifname: String,
    #[serde(default)]
    flags: Vec<String>,
    operstate: Option<String>,
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

    /// Reads a sysctl given in slash form (`net/ipv4/conf/cali1/proxy_arp`).
    pub fn read_sysctl(&self, key: &str) -> Result<String, IpToolError> {
        let out = self.cmds.run("sysctl-read", "sysctl", &["-n", key], None)?;
        Ok(out.stdout.trim().to_string())
    }

    /// Reads several sysctls (slash form) with one `sysctl -n`: their values, in order.
    pub fn read_sysctls(&self, keys: &[&str]) -> Result<Vec<String>, IpToolError> {
        let mut args = vec!["-n"];
        args.extend_from_slice(keys);
        let out = self.cmds.run("sysctl-read", "sysctl", &args, None)?;
        Ok(out.stdout.lines().map(|l| l.trim().to_string()).collect())
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
