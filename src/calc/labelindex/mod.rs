//! Label indexes: matching selectors against labelled objects, with
//! profile label inheritance.
//!
//! * [`IpSetIndex`]: every endpoint and network set in the cluster against
//!   the active IP sets (rule selectors and named ports).
//! * [`InheritIndex`]: this node's endpoints against policy selectors.
//! * [`restriction`]: the candidate pre-filters both use to avoid
//!   O(objects x selectors) work.
//! * [`cidrs`]: an object's CIDRs, compact for the one-address case.
//! * [`idset`]: the id sets behind the IP-set index's value index.
//! * [`keyindex`]: the IP-set index's object ids by key.
//! * [`slots`]: the IP-set index's objects by id.

pub mod cidrs;
pub mod idset;
pub mod inherit;
pub mod interner;
pub mod ipsets;
pub mod keyindex;
pub mod member;
pub mod restriction;
pub mod slots;

pub use inherit::{InheritIndex, MatchEvent, ParentLabelSource};
pub use ipsets::{IpSetDef, IpSetIndex, LabelledKey, LabelledValue, MemberSink};
pub use member::{Member, NpProtocol};
