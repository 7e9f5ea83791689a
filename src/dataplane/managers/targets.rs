//! Where managers write: the desired-state cells of the table and IP-set
//! drivers of one IP version, hiding whether the mode is iptables (one cell
//! per table, a separate IP-set driver) or nftables (one cell holding all
//! four layers and the sets).

use std::collections::BTreeMap;

use felix_actors::{ApplyCtx, DesiredInput};

use crate::dataplane::rules::TableName;

use crate::dataplane::desired::{IpSetsDesired, NftDesired, TableDesired};

/// The `*tables` inputs of one IP version.
#[derive(Debug, Clone)]
pub enum TableInputs {
    /// One cell per iptables table.
    Iptables(BTreeMap<TableName, DesiredInput<TableDesired>>),
    /// Our nftables table (all layers in one cell).
    Nftables(DesiredInput<NftDesired>),
}

impl TableInputs {
    /// Fresh cells for iptables mode.
    pub fn new_iptables() -> Self {
        TableInputs::Iptables(
            TableName::ALL
                .iter()
                .map(|t| (*t, DesiredInput::new(TableDesired::default())))
                .collect(),
        )
    }

    /// A fresh cell for nftables mode.
    pub fn new_nftables() -> Self {
        TableInputs::Nftables(DesiredInput::new(NftDesired::default()))
    }

    /// Mutates one table's desired state (one input write).
    pub fn write<R>(
        &self,
        ctx: &mut ApplyCtx,
        table: TableName,
        f: impl FnOnce(&mut TableDesired) -> R,
    ) -> R {
        match self {
            TableInputs::Iptables(cells) => match cells.get(&table) {
                Some(cell) => ctx.write(cell, f),
                // Every table is created by `new_iptables`; a map built some
                // other way still gets a throwaway table rather than a panic.
                None => f(&mut TableDesired::default()),
            },
            TableInputs::Nftables(cell) => ctx.write(cell, |d| {
                f(d.tables.entry(table.as_str().to_string()).or_default())
            }),
        }
    }

    /// Reads one table's desired state.
    pub fn read<R>(&self, table: TableName, f: impl FnOnce(&TableDesired) -> R) -> R {
        match self {
            TableInputs::Iptables(cells) => match cells.get(&table) {
                Some(cell) => cell.read(f),
                None => f(&TableDesired::default()),
            },
            TableInputs::Nftables(cell) => cell.read(|d| match d.tables.get(table.as_str()) {
                Some(t) => f(t),
                None => f(&TableDesired::default()),
            }),
        }
    }
}

/// The IP-set input of one IP version.
#[derive(Debug, Clone)]
pub enum SetInputs {
    /// The `ipset` driver's cell.
    Ipset(DesiredInput<IpSetsDesired>),
    /// The sets inside our nftables table.
    Nftables(DesiredInput<NftDesired>),
}

impl SetInputs {
    /// Mutates the desired sets (one input write).
    pub fn write<R>(&self, ctx: &mut ApplyCtx, f: impl FnOnce(&mut IpSetsDesired) -> R) -> R {
        match self {
            SetInputs::Ipset(cell) => ctx.write(cell, f),
            SetInputs::Nftables(cell) => ctx.write(cell, |d| f(&mut d.sets)),
        }
    }

    /// Reads the desired sets.
    pub fn read<R>(&self, f: impl FnOnce(&IpSetsDesired) -> R) -> R {
        match self {
            SetInputs::Ipset(cell) => cell.read(f),
            SetInputs::Nftables(cell) => cell.read(|d| f(&d.sets)),
        }
    }
}
