//! `driver/iptables-<table>-v4/-v6`: the driver actor over one [`IptablesTable`], and the
//! backend choice every iptables table and cleanup driver shares.

use std::sync::{Arc, OnceLock};

use felix_actors::{Driver, DriverError};

use crate::dataplane::desired::TableDesired;
use crate::dataplane::generictables::push::{push_table, report_rejected, PushedTable};
use crate::dataplane::generictables::Table;
use crate::dataplane::kernel::Commands;
use crate::dataplane::rules::TableName;
use crate::dataplane::IpVersion;

use super::{
    detect_backend, IptablesBackend, IptablesMode, IptablesOptions, IptablesTable, ResolvedBackend,
};

/// The iptables backend, detected once (by the first table driver to apply,
/// through its seam) and shared by every table and cleanup driver, so that
/// programming one table cannot flip the detection for the next.
#[derive(Debug, Clone)]
pub struct BackendChoice {
    configured: IptablesBackend,
    resolved: Arc<OnceLock<ResolvedBackend>>,
}

impl BackendChoice {
    /// Detection honouring the configured backend.
    pub fn new(configured: IptablesBackend) -> Self {
        BackendChoice {
            configured,
            resolved: Arc::new(OnceLock::new()),
        }
    }

    /// The backend, detecting it with `cmds` on first use.
    pub fn resolve(&self, cmds: &Commands) -> ResolvedBackend {
        *self
            .resolved
            .get_or_init(|| detect_backend(cmds, self.configured))
    }

    /// The backend if already detected.
    pub fn get(&self) -> Option<ResolvedBackend> {
        self.resolved.get().copied()
    }
}

/// `driver/iptables-<table>-v4/-v6`: one iptables table.
pub struct IptablesDriver {
    table: TableName,
    ipv: IpVersion,
    cmds: Commands,
    backend: BackendChoice,
    opts: IptablesOptions,
    inner: Option<IptablesTable>,
    pushed: PushedTable,
}

impl IptablesDriver {
    /// An adapter running its commands on `cmds`; the table is built (and the backend
    /// detected) at the first apply.
    pub fn new(
        table: TableName,
        ipv: IpVersion,
        cmds: Commands,
        backend: BackendChoice,
        opts: IptablesOptions,
    ) -> Self {
        IptablesDriver {
            table,
            ipv,
            cmds,
            backend,
            opts,
            inner: None,
            pushed: PushedTable::default(),
        }
    }
}

impl Driver for IptablesDriver {
    type Desired = TableDesired;

    fn apply(&mut self, desired: &TableDesired) -> Result<(), DriverError> {
        let table = match &mut self.inner {
            Some(t) => t,
            None => {
                let backend = self.backend.resolve(&self.cmds);
                self.inner.insert(IptablesTable::new(
                    self.table.as_str(),
                    self.ipv,
                    backend,
                    IptablesMode::Program,
                    self.cmds.clone(),
                    self.opts.clone(),
                ))
            }
        };
        push_table(
            desired,
            &mut self.pushed,
            table,
            &|c| c.clone(),
            &|kc| Some(kc.to_string()),
            &|r| r.to_vec(),
        );
        let r = table.apply();
        report_rejected(&*table, self.cmds.seam());
        crate::dataplane::metrics::report_table(
            self.cmds.seam().shared().metrics(),
            crate::dataplane::metrics::TableFamily::Iptables,
            self.ipv,
            self.table.as_str(),
            crate::dataplane::metrics::table_size(desired),
            r.as_ref().ok(),
        );
        r?;
        Ok(())
    }

    fn queue_resync(&mut self) {
        if let Some(t) = &mut self.inner {
            t.queue_resync();
        }
    }

    fn is_dirty(&self) -> bool {
        self.inner.as_ref().is_none_or(|t| t.is_dirty())
    }
}
