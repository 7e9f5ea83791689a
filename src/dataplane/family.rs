//! The IP family: the dataplane's managers and drivers exist once per family (the kernel runs
//! IPv4 and IPv6 as separate planes), and both sides of the manager/driver contract name it.

/// IP version of a manager, driver, table or set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpVersion {
    /// IPv4
    V4,
    /// IPv6
    V6,
}

impl IpVersion {
    /// 4 or 6.
    pub fn number(self) -> u8 {
        match self {
            IpVersion::V4 => 4,
            IpVersion::V6 => 6,
        }
    }
}
