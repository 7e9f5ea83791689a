//! The interface monitor: watches the kernel's links and addresses
//! (netlink link and address events) and tells the dataplane when an
//! interface appears, goes up or down, changes its addresses or disappears.
//!
//! ```text
//! netlink socket (RtnetlinkSource, behind the LinkSource seam)
//!   -> InterfaceMonitor thread  (seam actor monitor/interfaces)
//!        -> InterfaceState       links + addresses; per-consumer subscriptions
//!             <- driver/ifaces-vN   re-configures changed interfaces
//!             <- driver/routes-vN   re-reads routes when a workload interface changed
//!        -> notify()             the daemon sends KernelChanged to the supervisor
//! ```
//!
//! So a workload interface created after the endpoint arrived gets its
//! routes and interface settings at the next apply (throttled by the
//! supervisor's leaky bucket) instead of on the retry ticker, and an
//! interface deleted and re-created is re-programmed.
//!
//! Invariant: the monitor never programs anything. It only records state
//! and asks for an apply; the drivers still check the kernel themselves
//! (e.g. whether a link is up) through their own seams, so a missed or
//! stale event can delay programming but never make it wrong.

mod monitor;
mod rtnl;
mod source;
mod state;

pub use monitor::{InterfaceMonitor, MonitorOptions, MONITOR_ACTOR};
pub use rtnl::{decode_addr, decode_event, decode_link, RtnetlinkSource};
pub use source::{LinkSource, MonitorError, ScriptedLinkSource};
pub use state::{IfaceEvent, IfaceSubscription, IfaceView, InterfaceState, LinkInfo, Snapshot};
