//! The policy interpreter's records (issue 22): the layouts of `progs/pol_rules.c` and
//! `progs/state.h`, and the assembler that turns rules into test records with resolved jumps.
//!
//! # Model
//! * A *stream* is a run of [`Op`] records in `cali_pol_ops2` (an array). A policy (or
//!   profile) has one stream per IP version and direction; an endpoint has one *list* stream
//!   per direction.
//! * A policy stream is a decision graph: every record tests one fact of the packet and names
//!   where to continue on match ([`Op::t`]) and on miss ([`Op::f`]): another record of the
//!   same stream (an index relative to the stream's start) or a terminal ([`T_ALLOW`],
//!   [`T_DENY`], [`T_PASS`], [`T_NEXT`]). A rule is an AND of groups, a group an OR of tests,
//!   optionally negated (none of its tests may match); [`assemble_policy`] resolves that into
//!   jumps, so lists of any length (nets, ports, sets) cost one record per element and there
//!   is no per-rule limit.
//! * Policies are reached through `cali_pol_idx2` (hash: handle -> [`PolicyIndex`]), endpoints
//!   through `cali_pol_ep2` (hash: (slot, direction) -> [`EndpointList`]), one per attach
//!   mechanism. A hash update replaces the value atomically for readers: a policy change is
//!   new records written elsewhere plus one index swap; an endpoint change likewise.
//! * IP sets live in one LPM trie (`cali_ipsets2`, [`IpSetKey`]) of IPv4 (IPv4-mapped) and
//!   IPv6 members: a CIDR member's prefix covers the set id and its address bits only, so it
//!   ignores port and protocol; an IP-and-port member's prefix covers everything, so it
//!   matches exactly.

use crate::ops::BpfError;

/// Record code: always matches.
pub const OP_TRUE: u8 = 0;
/// Record code: the packet's protocol is `arg`.
pub const OP_PROTO: u8 = 1;
/// Record code: the source address is in `data`/`arg` (prefix over 16 bytes).
pub const OP_NET_SRC: u8 = 2;
/// Record code: the destination address is in `data`/`arg`.
pub const OP_NET_DST: u8 = 3;
/// Record code: the packet has ports and the source port is in `lo..=hi`.
pub const OP_PORT_SRC: u8 = 4;
/// Record code: the packet has ports and the destination port is in `lo..=hi`.
pub const OP_PORT_DST: u8 = 5;
/// Record code: (source address, protocol, source port) is in the set `data[0..8]`.
pub const OP_SET_SRC: u8 = 6;
/// Record code: (destination address, protocol, destination port) is in the set.
pub const OP_SET_DST: u8 = 7;
/// Record code: the packet is ICMP of its IP version with type `lo` and code `hi`
/// ([`ICMP_ANY_CODE`]: any code).
pub const OP_ICMP: u8 = 8;
/// Record code: counts a log hit for the policy (`cali_pol_log2`); always matches.
pub const OP_LOG: u8 = 9;
/// Endpoint-list code: walk the policy or profile `data[0..4]`; on Pass continue at `t`.
pub const OP_EP_REF: u8 = 16;
/// Endpoint-list code: end of a tier; `arg` [`ACT_PASS`] continues, anything else denies.
pub const OP_EP_TIER_END: u8 = 17;
/// Endpoint-list code: end of the list; `arg` [`EP_END_DENY`] (default deny) or
/// [`EP_END_NO_MATCH`].
pub const OP_EP_END: u8 = 18;
/// [`OP_EP_END`]'s `arg`: the list denies what nothing allowed.
pub const EP_END_DENY: u8 = 0;
/// [`OP_EP_END`]'s `arg`: the list decided nothing; a host endpoint's next stage decides.
pub const EP_END_NO_MATCH: u8 = 1;

/// [`OP_ICMP`]'s `hi` for "any code".
pub const ICMP_ANY_CODE: u16 = 0xffff;
/// [`OP_EP_TIER_END`]'s `arg`: the tier's default action is Deny.
pub const ACT_DENY: u8 = 0;
/// [`OP_EP_TIER_END`]'s `arg`: the tier's default action is Pass.
pub const ACT_PASS: u8 = 1;

/// Terminal target: allow.
pub const T_ALLOW: u32 = 0xffff_fff0;
/// Terminal target: deny.
pub const T_DENY: u32 = 0xffff_fff1;
/// Terminal target: pass (skip to the next tier).
pub const T_PASS: u32 = 0xffff_fff2;
/// Terminal target: no rule of this policy decided; next policy.
pub const T_NEXT: u32 = 0xffff_fff3;
/// Longest stream (relative targets must stay below the terminals).
pub const MAX_STREAM: usize = 0xffff_fff0;

/// `cali_pol_ops2` capacity (records).
pub const POL_OPS_SIZE: u32 = 1 << 18;
/// `cali_pol_idx2` capacity (policy and profile handles, one per direction).
pub const POL_IDX_SIZE: u32 = 65536;
/// `cali_pol_ep2` capacity (endpoint lists of one mechanism).
pub const POL_EP_SIZE: u32 = 65536;
/// `cali_ipsets2` capacity (members of all sets).
pub const IPSETS_SIZE: u32 = 1 << 20;
/// `cali_pol_log2` slots (log hits counted per policy handle modulo this).
pub const LOG_SLOTS: u32 = 65536;
/// Most records one packet visits before the walk fails closed (deny).
pub const MAX_STEPS: u32 = 1 << 20;

/// Policy direction: ingress rules (traffic to the endpoint).
pub const POL_DIR_INGRESS: u32 = 0;
/// Policy direction: egress rules (traffic from the endpoint).
pub const POL_DIR_EGRESS: u32 = 1;
/// Endpoint-list direction: a host endpoint's untracked policy, inbound.
pub const POL_DIR_UNTRACKED_IN: u32 = 2;
/// Endpoint-list direction: a host endpoint's untracked policy, outbound.
pub const POL_DIR_UNTRACKED_OUT: u32 = 3;
/// Endpoint-list direction: a host endpoint's pre-DNAT policy (inbound only).
pub const POL_DIR_PREDNAT_IN: u32 = 4;
/// Endpoint-list direction: a host endpoint's applyOnForward policy, forwarded in.
pub const POL_DIR_FORWARD_IN: u32 = 5;
/// Endpoint-list direction: a host endpoint's applyOnForward policy, forwarded out.
pub const POL_DIR_FORWARD_OUT: u32 = 6;

/// One record of `cali_pol_ops2` (`struct cali_op`, 32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Op {
    /// `OP_*`.
    pub code: u8,
    /// Protocol, prefix length or tier default action.
    pub arg: u8,
    /// Port range start or ICMP type.
    pub lo: u16,
    /// Port range end or ICMP code.
    pub hi: u16,
    /// Protocol precondition: 0, or the protocol number + 1; a packet of another protocol
    /// misses the test (a rule's protocol fused into its next single-test group).
    pub pre: u16,
    /// Where to continue on match (relative index or `T_*`); for [`OP_EP_REF`], the list
    /// index to continue at on Pass.
    pub t: u32,
    /// Where to continue on miss.
    pub f: u32,
    /// Address, set id (big endian, first 8 bytes) or handle (native, first 4 bytes).
    pub data: [u8; 16],
}

impl Op {
    /// Size of `struct cali_op`.
    pub const SIZE: usize = 32;

    /// The C struct's bytes.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0] = self.code;
        b[1] = self.arg;
        b[2..4].copy_from_slice(&self.lo.to_ne_bytes());
        b[4..6].copy_from_slice(&self.hi.to_ne_bytes());
        b[6..8].copy_from_slice(&self.pre.to_ne_bytes());
        b[8..12].copy_from_slice(&self.t.to_ne_bytes());
        b[12..16].copy_from_slice(&self.f.to_ne_bytes());
        b[16..32].copy_from_slice(&self.data);
        b
    }

    /// Parses the C struct.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; Self::SIZE] = b.get(..Self::SIZE)?.try_into().ok()?;
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut data = [0u8; 16];
        data.copy_from_slice(&b[16..32]);
        Some(Self {
            code: b[0],
            arg: b[1],
            lo: u16_at(2),
            hi: u16_at(4),
            pre: u16_at(6),
            t: u32_at(8),
            f: u32_at(12),
            data,
        })
    }

    /// An [`OP_EP_REF`] to `handle`, continuing at `pass_to` on Pass.
    pub fn ep_ref(handle: u32, pass_to: u32) -> Self {
        let mut data = [0u8; 16];
        data[..4].copy_from_slice(&handle.to_ne_bytes());
        Self {
            code: OP_EP_REF,
            t: pass_to,
            data,
            ..Self::default()
        }
    }

    /// The handle of an [`OP_EP_REF`].
    pub fn handle(&self) -> u32 {
        u32::from_ne_bytes([self.data[0], self.data[1], self.data[2], self.data[3]])
    }
}

/// The value of `cali_pol_idx2` (`struct cali_pol_idx`): where a policy's streams are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PolicyIndex {
    /// First record of the IPv4 (`[0]`) and IPv6 (`[1]`) stream.
    pub base: [u32; 2],
    /// Length of each stream (0: the policy decides nothing for that version).
    pub len: [u32; 2],
}

impl PolicyIndex {
    /// Size of the C struct.
    pub const SIZE: usize = 16;

    /// The C struct's bytes.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        for (i, v) in [self.base[0], self.base[1], self.len[0], self.len[1]]
            .iter()
            .enumerate()
        {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
        }
        b
    }

    /// Parses the C struct.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let f = |i: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(
                b.get(i * 4..i * 4 + 4)?.try_into().ok()?,
            ))
        };
        Some(Self {
            base: [f(0)?, f(1)?],
            len: [f(2)?, f(3)?],
        })
    }
}

/// The key of `cali_pol_ep2` (`struct cali_ep_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointKey {
    /// The endpoint's policy slot (`cb[CB_POLICY]`).
    pub slot: u32,
    /// [`POL_DIR_INGRESS`] or [`POL_DIR_EGRESS`].
    pub dir: u32,
}

impl EndpointKey {
    /// Size of the C struct.
    pub const SIZE: usize = 8;

    /// The C struct's bytes.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..4].copy_from_slice(&self.slot.to_ne_bytes());
        b[4..].copy_from_slice(&self.dir.to_ne_bytes());
        b
    }
}

/// The value of `cali_pol_ep2` (`struct cali_ep_val`): where an endpoint's list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndpointList {
    /// First record.
    pub base: u32,
    /// Records.
    pub len: u32,
}

impl EndpointList {
    /// Size of the C struct.
    pub const SIZE: usize = 8;

    /// The C struct's bytes.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..4].copy_from_slice(&self.base.to_ne_bytes());
        b[4..].copy_from_slice(&self.len.to_ne_bytes());
        b
    }

    /// Parses the C struct.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        Some(Self {
            base: u32::from_ne_bytes(b.get(..4)?.try_into().ok()?),
            len: u32::from_ne_bytes(b.get(4..8)?.try_into().ok()?),
        })
    }
}

/// Bits of an [`IpSetKey`] after its prefix-length field.
pub const IPSET_FULL_PREFIX: u32 = 64 + 128 + 16 + 8;

/// The key of `cali_ipsets2` (`struct cali_ipset_key`, 32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpSetKey {
    /// Set id (from the calc graph's set ID, see the daemon's allocator).
    pub set_id: u64,
    /// Address (IPv4 as IPv4-mapped IPv6).
    pub addr: [u8; 16],
    /// Prefix length of the address in bits (0..=128; IPv4 /n is 96 + n).
    pub addr_prefix: u8,
    /// `Some((protocol, port))` for an IP-and-port member (then `addr_prefix` is 128).
    pub port: Option<(u8, u16)>,
}

impl IpSetKey {
    /// Size of the C struct.
    pub const SIZE: usize = 32;

    /// The LPM prefix length: set id and address bits, plus port and protocol for an
    /// IP-and-port member.
    pub fn prefix_len(&self) -> u32 {
        match self.port {
            Some(_) => IPSET_FULL_PREFIX,
            None => 64 + u32::from(self.addr_prefix.min(128)),
        }
    }

    /// The C struct's bytes (address bits beyond the prefix zeroed).
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..4].copy_from_slice(&self.prefix_len().to_ne_bytes());
        b[4..12].copy_from_slice(&self.set_id.to_be_bytes());
        let addr = mask_addr(self.addr, self.addr_prefix);
        b[12..28].copy_from_slice(&addr);
        if let Some((proto, port)) = self.port {
            b[28..30].copy_from_slice(&port.to_ne_bytes());
            b[30] = proto;
        }
        b
    }
}

impl IpSetKey {
    /// Parses the C struct (as [`IpSetKey::to_bytes`] writes it).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; Self::SIZE] = b.get(..Self::SIZE)?.try_into().ok()?;
        let prefix = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&b[4..12]);
        let mut addr = [0u8; 16];
        addr.copy_from_slice(&b[12..28]);
        let port =
            (prefix == IPSET_FULL_PREFIX).then(|| (b[30], u16::from_ne_bytes([b[28], b[29]])));
        Some(Self {
            set_id: u64::from_be_bytes(id),
            addr,
            addr_prefix: u8::try_from(prefix.checked_sub(64)?.min(128)).ok()?,
            port,
        })
    }
}

/// `addr` with the bits after `prefix` cleared.
pub fn mask_addr(addr: [u8; 16], prefix: u8) -> [u8; 16] {
    let mut out = addr;
    let p = usize::from(prefix.min(128));
    for (i, byte) in out.iter_mut().enumerate() {
        let keep = p.saturating_sub(i * 8).min(8);
        *byte &= if keep == 0 { 0 } else { 0xffu8 << (8 - keep) };
    }
    out
}

/// The per-CPU packet facts main hands to policy (`struct cali_state`, 44 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketState {
    /// Source address (IPv4-mapped for IPv4).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port (host order).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// 4 or 6.
    pub ip_ver: u8,
    /// IP protocol.
    pub proto: u8,
    /// ICMP type.
    pub icmp_type: u8,
    /// ICMP code.
    pub icmp_code: u8,
    /// `CALI_ST_*`.
    pub flags: u32,
}

impl PacketState {
    /// Size of the C struct.
    pub const SIZE: usize = 44;
    /// Flag: ports are valid.
    pub const PORTS: u32 = 0x1;
    /// Flag: ICMP type and code are valid.
    pub const ICMP: u32 = 0x2;

    /// Parses the C struct.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; Self::SIZE] = b.get(..Self::SIZE)?.try_into().ok()?;
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&b[0..16]);
        dst.copy_from_slice(&b[16..32]);
        Some(Self {
            src,
            dst,
            sport: u16::from_ne_bytes([b[32], b[33]]),
            dport: u16::from_ne_bytes([b[34], b[35]]),
            ip_ver: b[36],
            proto: b[37],
            icmp_type: b[38],
            icmp_code: b[39],
            flags: u32::from_ne_bytes([b[40], b[41], b[42], b[43]]),
        })
    }
}

/// One test of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// The protocol is this number.
    Proto(u8),
    /// The source (`dst: false`) or destination address is in the net (16-byte form,
    /// prefix 0..=128).
    Net {
        /// Destination side.
        dst: bool,
        /// Address (IPv4-mapped for IPv4).
        addr: [u8; 16],
        /// Prefix length over the 16 bytes.
        prefix: u8,
    },
    /// The packet has ports and the port is in `lo..=hi`.
    Ports {
        /// Destination side.
        dst: bool,
        /// First port.
        lo: u16,
        /// Last port.
        hi: u16,
    },
    /// (address, protocol, port) of the side is a member of the set.
    Set {
        /// Destination side.
        dst: bool,
        /// The set's id.
        id: u64,
    },
    /// ICMP of the packet's IP version, this type and (optionally) code.
    Icmp {
        /// Type.
        icmp_type: u8,
        /// Code, if matched.
        code: Option<u8>,
    },
}

impl Test {
    fn op(&self) -> Op {
        let mut op = Op::default();
        match *self {
            Test::Proto(p) => {
                op.code = OP_PROTO;
                op.arg = p;
            }
            Test::Net { dst, addr, prefix } => {
                op.code = if dst { OP_NET_DST } else { OP_NET_SRC };
                op.arg = prefix.min(128);
                op.data = mask_addr(addr, prefix);
            }
            Test::Ports { dst, lo, hi } => {
                op.code = if dst { OP_PORT_DST } else { OP_PORT_SRC };
                op.lo = lo;
                op.hi = hi;
            }
            Test::Set { dst, id } => {
                op.code = if dst { OP_SET_DST } else { OP_SET_SRC };
                op.data[..8].copy_from_slice(&id.to_be_bytes());
            }
            Test::Icmp { icmp_type, code } => {
                op.code = OP_ICMP;
                op.lo = u16::from(icmp_type);
                op.hi = code.map_or(ICMP_ANY_CODE, u16::from);
            }
        }
        op
    }
}

/// An OR of tests, or (negated) a NOR: none may match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// None of the tests may match (else: any must).
    pub negate: bool,
    /// The alternatives. An empty positive group never matches; an empty negated one
    /// always does.
    pub any_of: Vec<Test>,
}

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleAction {
    /// Allow the packet.
    Allow,
    /// Deny it.
    Deny,
    /// Skip to the next tier.
    Pass,
    /// Count a log hit and continue with the next rule.
    Log,
}

/// A rule for one IP version: all groups must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleIr {
    /// The groups (AND).
    pub groups: Vec<Group>,
    /// The action.
    pub action: RuleAction,
}

/// A stream that cannot be assembled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssembleError {
    /// More records than relative targets can address.
    #[error("policy stream of {0} records is longer than the interpreter addresses")]
    TooLong(usize),
}

fn terminal(a: RuleAction) -> u32 {
    match a {
        RuleAction::Allow => T_ALLOW,
        RuleAction::Deny => T_DENY,
        RuleAction::Pass => T_PASS,
        RuleAction::Log => T_NEXT,
    }
}

/// A rule's groups with the protocol test fused away: a positive single-test `Proto(p)`
/// group is folded into the first other positive single-test group as its precondition
/// (`Op::pre`), saving one record per rule on the common "protocol and port" rule. Returns
/// the groups and the precondition of each.
fn fuse_proto(groups: Vec<&Group>) -> (Vec<&Group>, Vec<u16>) {
    let single = |g: &Group| !g.negate && g.any_of.len() == 1;
    let proto_at = groups
        .iter()
        .position(|g| single(g) && matches!(g.any_of[0], Test::Proto(_)));
    let mut pre = vec![0u16; groups.len()];
    if let Some(pi) = proto_at {
        let target = groups
            .iter()
            .enumerate()
            .position(|(i, g)| i != pi && single(g) && !matches!(g.any_of[0], Test::Proto(_)));
        if let (Some(ti), Test::Proto(p)) = (target, groups[pi].any_of[0]) {
            pre[ti] = u16::from(p) + 1;
            let mut out = groups;
            out.remove(pi);
            pre.remove(pi);
            return (out, pre);
        }
    }
    (groups, pre)
}

/// A rule's groups (an AND, so any order gives the same verdict) with the groups that test
/// IP-set membership last: a packet failing a protocol, port, ICMP or net test then never
/// pays for an LPM lookup. Stable, so the order is otherwise the compiler's.
fn cheap_first(mut groups: Vec<&Group>) -> Vec<&Group> {
    groups.sort_by_key(|g| g.any_of.iter().any(|t| matches!(t, Test::Set { .. })));
    groups
}

/// Assembles a policy's rules (for one IP version and direction) into a stream: the first
/// rule's first record is index 0, every target is a stream index or a terminal, and a packet
/// no rule decides reaches [`T_NEXT`]. Rules that can never match (an empty positive group)
/// are left out; empty negated groups are dropped.
pub fn assemble_policy(rules: &[RuleIr]) -> Result<Vec<Op>, AssembleError> {
    assemble_policy_spans(rules).map(|(ops, _)| ops)
}

/// Where a rule's records start in its stream, and its position among the assembled rules.
pub type RuleSpan = (u32, usize);

/// [`assemble_policy`], plus where each kept rule starts: `(first record, position in
/// rules)`, in order. A rule's records are contiguous up to the next kept rule's first
/// record (or the stream's end), so the record that decided a packet names its rule. A rule
/// that can never match is left out and has no span.
pub fn assemble_policy_spans(rules: &[RuleIr]) -> Result<(Vec<Op>, Vec<RuleSpan>), AssembleError> {
    // Each kept rule: its groups (non-empty, protocol fused), their preconditions, the action.
    type Kept<'a> = (Vec<&'a Group>, Vec<u16>, RuleAction);
    let (positions, kept): (Vec<usize>, Vec<Kept<'_>>) = rules
        .iter()
        .enumerate()
        .filter(|(_, r)| r.groups.iter().all(|g| g.negate || !g.any_of.is_empty()))
        .map(|(i, r)| {
            let (groups, pre) = fuse_proto(cheap_first(
                r.groups.iter().filter(|g| !g.any_of.is_empty()).collect(),
            ));
            (i, (groups, pre, r.action))
        })
        .unzip();
    let size = |groups: &[&Group], action: RuleAction| -> usize {
        let tests: usize = groups.iter().map(|g| g.any_of.len()).sum();
        tests + usize::from(action == RuleAction::Log || groups.is_empty())
    };
    let total: usize = kept.iter().map(|(g, _, a)| size(g, *a)).sum();
    if total >= MAX_STREAM {
        return Err(AssembleError::TooLong(total));
    }
    let mut out: Vec<Op> = Vec::with_capacity(total);
    let mut spans = Vec::with_capacity(kept.len());
    for (i, (groups, pre, action)) in kept.iter().enumerate() {
        let start = out.len();
        spans.push((start as u32, positions[i]));
        let end = start + size(groups, *action);
        let next_rule = if i + 1 == kept.len() {
            T_NEXT
        } else {
            end as u32
        };
        // On success: the log record (the rule's last) or the action's terminal.
        let success = if *action == RuleAction::Log {
            (end - 1) as u32
        } else {
            terminal(*action)
        };
        if groups.is_empty() && *action != RuleAction::Log {
            out.push(Op {
                code: OP_TRUE,
                t: success,
                f: success,
                ..Op::default()
            });
            continue;
        }
        let mut at = start;
        for (gi, g) in groups.iter().enumerate() {
            let g_end = at + g.any_of.len();
            let after = if gi + 1 == groups.len() {
                success
            } else {
                g_end as u32
            };
            for (ti, test) in g.any_of.iter().enumerate() {
                let next_member = if ti + 1 == g.any_of.len() {
                    None
                } else {
                    Some((at + ti + 1) as u32)
                };
                let mut op = test.op();
                op.pre = pre[gi];
                if g.negate {
                    op.t = next_rule;
                    op.f = next_member.unwrap_or(after);
                } else {
                    op.t = after;
                    op.f = next_member.unwrap_or(next_rule);
                }
                out.push(op);
            }
            at = g_end;
        }
        if *action == RuleAction::Log {
            out.push(Op {
                code: OP_LOG,
                t: next_rule,
                f: next_rule,
                ..Op::default()
            });
        }
        debug_assert_eq!(out.len(), end);
    }
    Ok((out, spans))
}

/// One tier of an endpoint's list: its policies' handles in order and its default action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierIr {
    /// Handles of the tier's (non-staged) policies for the list's direction, in order.
    pub policies: Vec<u32>,
    /// The tier's default action is Pass (else: end-of-tier deny).
    pub default_pass: bool,
}

/// Assembles an endpoint's list: each tier with policies (a tier without any is skipped
/// entirely, as the *tables renderer does), then the profiles, then the default deny.
pub fn assemble_endpoint(tiers: &[TierIr], profiles: &[u32]) -> Vec<Op> {
    assemble_list(tiers, profiles, EP_END_DENY)
}

/// [`assemble_endpoint`] with the list's end `end` ([`EP_END_DENY`] or [`EP_END_NO_MATCH`]).
pub fn assemble_list(tiers: &[TierIr], profiles: &[u32], end: u8) -> Vec<Op> {
    let mut out = Vec::new();
    for t in tiers.iter().filter(|t| !t.policies.is_empty()) {
        let after_tier = (out.len() + t.policies.len() + 1) as u32;
        for h in &t.policies {
            out.push(Op::ep_ref(*h, after_tier));
        }
        out.push(Op {
            code: OP_EP_TIER_END,
            arg: if t.default_pass { ACT_PASS } else { ACT_DENY },
            ..Op::default()
        });
    }
    for h in profiles {
        let next = (out.len() + 1) as u32;
        out.push(Op::ep_ref(*h, next));
    }
    out.push(Op {
        code: OP_EP_END,
        arg: end,
        ..Op::default()
    });
    out
}

/// Answers an IP-set lookup for [`eval_stream`]: (set id, address, protocol, port).
pub type MemberFn<'a> = dyn Fn(u64, &[u8; 16], u8, u16) -> bool + 'a;

/// A policy stream's verdict for a packet, evaluated in Rust exactly as the interpreter does
/// (for tests and `felix explain`-style tooling): `T_ALLOW`, `T_DENY`, `T_PASS` or `T_NEXT`.
/// `member` answers set lookups.
pub fn eval_stream(ops: &[Op], st: &PacketState, member: &MemberFn<'_>) -> Result<u32, BpfError> {
    let mut cur: u32 = 0;
    for _ in 0..MAX_STEPS {
        let Some(op) = ops.get(cur as usize) else {
            return Ok(T_NEXT);
        };
        let prefix_ok = |a: &[u8; 16]| mask_addr(*a, op.arg) == op.data;
        let pre_ok = op.pre == 0 || op.pre == u16::from(st.proto) + 1;
        let hit = pre_ok
            && match op.code {
                OP_TRUE | OP_LOG => true,
                OP_PROTO => st.proto == op.arg,
                OP_NET_SRC => prefix_ok(&st.src),
                OP_NET_DST => prefix_ok(&st.dst),
                OP_PORT_SRC => {
                    st.flags & PacketState::PORTS != 0 && (op.lo..=op.hi).contains(&st.sport)
                }
                OP_PORT_DST => {
                    st.flags & PacketState::PORTS != 0 && (op.lo..=op.hi).contains(&st.dport)
                }
                OP_SET_SRC | OP_SET_DST => {
                    let mut id = [0u8; 8];
                    id.copy_from_slice(&op.data[..8]);
                    let (a, p) = if op.code == OP_SET_DST {
                        (&st.dst, st.dport)
                    } else {
                        (&st.src, st.sport)
                    };
                    member(u64::from_be_bytes(id), a, st.proto, p)
                }
                OP_ICMP => {
                    st.flags & PacketState::ICMP != 0
                        && u16::from(st.icmp_type) == op.lo
                        && (op.hi == ICMP_ANY_CODE || u16::from(st.icmp_code) == op.hi)
                }
                _ => false,
            };
        let next = if hit { op.t } else { op.f };
        if next >= T_ALLOW {
            return Ok(next);
        }
        cur = next;
    }
    Ok(T_DENY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut x = [0u8; 16];
        x[10] = 0xff;
        x[11] = 0xff;
        x[12..].copy_from_slice(&a);
        x
    }

    #[test]
    fn record_layouts_have_the_c_sizes_and_round_trip() {
        assert_eq!(Op::SIZE, 32);
        assert_eq!(PolicyIndex::SIZE, 16);
        assert_eq!(EndpointKey::SIZE, 8);
        assert_eq!(EndpointList::SIZE, 8);
        assert_eq!(IpSetKey::SIZE, 32);
        assert_eq!(PacketState::SIZE, 44);
        let op = Op {
            code: OP_PORT_DST,
            arg: 3,
            lo: 80,
            hi: 90,
            pre: 7,
            t: 7,
            f: T_NEXT,
            data: [9; 16],
        };
        assert_eq!(Op::from_bytes(&op.to_bytes()), Some(op));
        let idx = PolicyIndex {
            base: [1, 2],
            len: [3, 4],
        };
        assert_eq!(PolicyIndex::from_bytes(&idx.to_bytes()), Some(idx));
        let ep = EndpointList { base: 5, len: 6 };
        assert_eq!(EndpointList::from_bytes(&ep.to_bytes()), Some(ep));
    }

    #[test]
    fn cidr_members_cover_only_id_and_address_bits_ip_port_members_everything() {
        let cidr = IpSetKey {
            set_id: 0x0102_0304_0506_0708,
            addr: v4([10, 1, 2, 3]),
            addr_prefix: 96 + 16,
            port: None,
        };
        let b = cidr.to_bytes();
        assert_eq!(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]), 64 + 112);
        assert_eq!(&b[4..12], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[24..28], &[10, 1, 0, 0], "host bits cleared");
        let ipport = IpSetKey {
            port: Some((6, 8080)),
            addr_prefix: 128,
            ..cidr
        };
        let masked = IpSetKey {
            addr: mask_addr(cidr.addr, cidr.addr_prefix),
            ..cidr
        };
        assert_eq!(IpSetKey::from_bytes(&cidr.to_bytes()), Some(masked));
        assert_eq!(IpSetKey::from_bytes(&ipport.to_bytes()), Some(ipport));
        let b = ipport.to_bytes();
        assert_eq!(
            u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            IPSET_FULL_PREFIX
        );
        assert_eq!(b[30], 6);
    }

    fn st(proto: u8, dport: u16) -> PacketState {
        PacketState {
            src: v4([10, 0, 0, 1]),
            dst: v4([10, 0, 0, 2]),
            sport: 40000,
            dport,
            ip_ver: 4,
            proto,
            flags: PacketState::PORTS,
            ..PacketState::default()
        }
    }

    #[test]
    fn assembled_groups_and_or_negate_and_fall_through_to_next() {
        let no_sets = |_: u64, _: &[u8; 16], _: u8, _: u16| false;
        let rules = vec![
            RuleIr {
                groups: vec![
                    Group {
                        negate: false,
                        any_of: vec![Test::Proto(6)],
                    },
                    Group {
                        negate: false,
                        any_of: vec![
                            Test::Ports {
                                dst: true,
                                lo: 80,
                                hi: 80,
                            },
                            Test::Ports {
                                dst: true,
                                lo: 443,
                                hi: 443,
                            },
                        ],
                    },
                    Group {
                        negate: true,
                        any_of: vec![Test::Net {
                            dst: false,
                            addr: v4([10, 0, 0, 0]),
                            prefix: 96 + 31,
                        }],
                    },
                ],
                action: RuleAction::Allow,
            },
            RuleIr {
                groups: vec![],
                action: RuleAction::Log,
            },
            RuleIr {
                groups: vec![Group {
                    negate: false,
                    any_of: vec![Test::Proto(17)],
                }],
                action: RuleAction::Deny,
            },
        ];
        let ops = assemble_policy(&rules).expect("assembles");
        let v = |s: &PacketState| eval_stream(&ops, s, &no_sets).expect("eval");
        // 10.0.0.1 is in 10.0.0.0/31: the negated net fails the first rule.
        assert_eq!(v(&st(6, 443)), T_NEXT);
        let mut other = st(6, 443);
        other.src = v4([10, 0, 0, 9]);
        assert_eq!(v(&other), T_ALLOW);
        other.dport = 8080;
        assert_eq!(v(&other), T_NEXT);
        assert_eq!(v(&st(17, 53)), T_DENY, "log continues to the next rule");
        let never = RuleIr {
            groups: vec![Group {
                negate: false,
                any_of: vec![],
            }],
            action: RuleAction::Allow,
        };
        assert!(assemble_policy(std::slice::from_ref(&never))
            .expect("ok")
            .is_empty());

        // Spans: the never-matching rule has none; every other rule's records start where
        // its span says and run to the next span.
        let mut with_never = rules.clone();
        with_never.insert(1, never);
        let (ops2, spans) = assemble_policy_spans(&with_never).expect("assembles");
        assert_eq!(ops2, ops);
        // Rule 0: protocol (1 record) + two ports (2) + negated net (1) = 4; the log
        // rule: 1 record; the deny: 1 record.
        assert_eq!(spans, vec![(0, 0), (4, 2), (5, 3)]);
    }

    #[test]
    fn a_rules_protocol_is_fused_into_its_next_single_test_group() {
        let no_sets = |_: u64, _: &[u8; 16], _: u8, _: u16| false;
        let port80 = Test::Ports {
            dst: true,
            lo: 80,
            hi: 80,
        };
        let fused = assemble_policy(&[RuleIr {
            groups: vec![
                Group {
                    negate: false,
                    any_of: vec![Test::Proto(6)],
                },
                Group {
                    negate: false,
                    any_of: vec![port80],
                },
            ],
            action: RuleAction::Allow,
        }])
        .expect("ok");
        assert_eq!(fused.len(), 1, "one record for tcp and port 80");
        assert_eq!((fused[0].code, fused[0].pre), (OP_PORT_DST, 7));
        let v = |s: &PacketState| eval_stream(&fused, s, &no_sets).expect("eval");
        assert_eq!(v(&st(6, 80)), T_ALLOW);
        assert_eq!(v(&st(17, 80)), T_NEXT, "udp to port 80 misses");
        // A multi-test or negated group takes no precondition.
        let kept = assemble_policy(&[RuleIr {
            groups: vec![
                Group {
                    negate: false,
                    any_of: vec![Test::Proto(6)],
                },
                Group {
                    negate: true,
                    any_of: vec![port80],
                },
            ],
            action: RuleAction::Allow,
        }])
        .expect("ok");
        assert_eq!(kept.len(), 2);
        assert!(kept.iter().all(|o| o.pre == 0));
    }

    #[test]
    fn set_membership_tests_run_after_every_cheaper_test_of_the_rule() {
        let port80 = Test::Ports {
            dst: true,
            lo: 80,
            hi: 80,
        };
        let set = Test::Set { dst: false, id: 9 };
        let g = |t: Test| Group {
            negate: false,
            any_of: vec![t],
        };
        // As the compiler emits a "tcp from set S to port 80" rule: protocol, source set,
        // destination port.
        let ops = assemble_policy(&[RuleIr {
            groups: vec![g(Test::Proto(6)), g(set), g(port80)],
            action: RuleAction::Allow,
        }])
        .expect("ok");
        let codes: Vec<u8> = ops.iter().map(|o| o.code).collect();
        assert_eq!(
            codes,
            vec![OP_PORT_DST, OP_SET_SRC],
            "port (with tcp fused) first"
        );
        assert_eq!(ops[0].pre, 7);
        // Same verdicts as the compiler's order: only tcp to 80 from a member is allowed.
        let member = |id: u64, a: &[u8; 16], _: u8, _: u16| id == 9 && a[15] == 1;
        let v = |s: &PacketState| eval_stream(&ops, s, &member).expect("eval");
        let mut from_member = st(6, 80);
        from_member.src = v4([10, 0, 0, 1]);
        let mut from_other = st(6, 80);
        from_other.src = v4([10, 0, 0, 2]);
        assert_eq!(v(&from_member), T_ALLOW);
        assert_eq!(v(&from_other), T_NEXT);
        let mut wrong_port = from_member;
        wrong_port.dport = 81;
        assert_eq!(v(&wrong_port), T_NEXT);
    }

    #[test]
    fn endpoint_lists_skip_empty_tiers_and_pass_to_the_next_tier() {
        let ops = assemble_endpoint(
            &[
                TierIr {
                    policies: vec![1, 2],
                    default_pass: false,
                },
                TierIr {
                    policies: vec![],
                    default_pass: false,
                },
                TierIr {
                    policies: vec![3],
                    default_pass: true,
                },
            ],
            &[9],
        );
        let codes: Vec<u8> = ops.iter().map(|o| o.code).collect();
        assert_eq!(
            codes,
            vec![
                OP_EP_REF,
                OP_EP_REF,
                OP_EP_TIER_END,
                OP_EP_REF,
                OP_EP_TIER_END,
                OP_EP_REF,
                OP_EP_END
            ]
        );
        assert_eq!(ops[0].t, 3, "pass skips the tier's end");
        assert_eq!(ops[4].arg, ACT_PASS);
        assert_eq!((ops[5].handle(), ops[5].t), (9, 6));
    }
}
