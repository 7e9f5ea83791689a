//! Routes of every producer ([`RouteTable`], over rtnetlink through
//! `crate::dataplane::netlink`) and workload interface settings ([`IfaceSettingsTable`]:
//! links looked up over rtnetlink, settings written with the `sysctl` tool), and their
//! driver actors ([`RoutesDriver`], [`IfacesDriver`]).
//!
//! [`IpTool`] is the only way interface settings touch per-interface sysctls: every operation
//! is one `sysctl` command through the driver's [`Commands`], so it carries the driver's
//! actor name and an operation name (`sysctl`, `sysctl-read`), and with them fault injection
//! and metrics; link lookups go through the same seam as rtnetlink operations (`link-get`,
//! `link-list`). Both run in the namespace the command seam is bound to, which is how kernel
//! tests point a driver at a throwaway network namespace.

/// The command operations of `driver/ifaces-vN` (its fault targets).
pub const OPS: &[&str] = &["link-get", "link-list", "sysctl", "sysctl-read"];

mod actor;
mod ifaces;
mod routes;

use crate::dataplane::kernel::{Commands, KernelError};
use crate::dataplane::netlink::NetlinkError;

pub use actor::{IfacesDriver, InterfaceTable, InterfaceTableDriver, RoutesDriver};
pub use ifaces::{IfaceSettingsTable, IfacesStats};
pub use routes::{RouteOwnership, RouteTable, RouteTableStats, CNI_GRACE, DEFAULT_ROUTE_PROTO};

/// Errors of the route/link seam.
#[derive(Debug, thiserror::Error)]
pub enum IpToolError {
    /// The command failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A link lookup over rtnetlink failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
}

impl From<IpToolError> for felix_actors::DriverError {
    fn from(e: IpToolError) -> Self {
        match e {
            IpToolError::Kernel(k) => k.into(),
            IpToolError::Netlink(n) => n.into(),
        }
    }
}

/// The seam itself: typed sysctl operations over [`Commands`].
#[derive(Debug, Clone)]
pub struct IpTool {
    cmds: Commands,
}

impl IpTool {
    /// Operations through `cmds` (which names the actor).
    pub fn new(cmds: Commands) -> Self {
        IpTool { cmds }
    }

    /// A link lookup handle over rtnetlink, on the same seam and in the same namespace.
    pub fn links(&self) -> crate::dataplane::netlink::Seamed {
        self.cmds.netlink()
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
