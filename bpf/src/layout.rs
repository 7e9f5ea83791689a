//! The contract between the C programs (`progs/cali.h`) and the loader: jump-map slots, the
//! `skb->cb` convention, the preamble's globals and the `cali_iface` value. Every number here
//! has its twin in `cali.h`.

/// Slot of the main program in the generic programs map (fast path).
pub const PROG_INDEX_MAIN: u32 = 0;
/// The policy's index in upstream's numbering; never filled in the generic map (the policy
/// lives in the per-endpoint map, one slot per endpoint and direction for both paths).
pub const PROG_INDEX_POLICY: u32 = 1;
/// Slot of the accepted program (fast path).
pub const PROG_INDEX_ALLOWED: u32 = 2;
/// Reserved for the ICMP helper (part 2).
pub const PROG_INDEX_ICMP: u32 = 3;
/// Slot of the drop program (fast path).
pub const PROG_INDEX_DROP: u32 = 4;
/// Debug variants sit at their fast slot plus this offset.
pub const PROG_DEBUG_OFFSET: u32 = 10;
/// Size of the generic programs map.
pub const PROG_GENERIC_SLOTS: u32 = 20;
/// Size of the per-endpoint programs map (policy and log-filter slots).
pub const JUMP_SLOTS: u32 = 16384;
/// "No slot" in the globals (no policy, no log filter).
pub const SLOT_NONE: u32 = u32::MAX;

/// The debug-path slot of a generic program.
pub const fn debug_slot(fast: u32) -> u32 {
    fast + PROG_DEBUG_OFFSET
}

/// `skb->cb[0]`: the generic slot policy continues at on allow.
pub const CB_ALLOW: usize = 0;
/// `skb->cb[1]`: the generic slot policy continues at on deny.
pub const CB_DENY: usize = 1;
/// `skb->cb[2]`: the endpoint's policy slot in the per-endpoint map.
pub const CB_POLICY: usize = 2;
/// `skb->cb[3]`: the interface's `GLOBALS_F_*` flags.
pub const CB_FLAGS: usize = 3;
/// `skb->cb[4]`: the host-side ifindex (0: the program's own device).
pub const CB_HOSTIF: usize = 4;

/// Globals flag: a workload interface.
pub const GLOBALS_F_WEP: u32 = 0x1;
/// Globals flag: a host endpoint.
pub const GLOBALS_F_HEP: u32 = 0x2;
/// Globals flag: attached at TC ingress (else TC egress).
pub const GLOBALS_F_INGRESS: u32 = 0x4;

/// `skb->mark` bit set by the accepted program.
pub const SKB_MARK_SEEN: u32 = 0x0100_0000;
/// `skb->mark` bit set when a forward was refused and handed to the host stack.
pub const SKB_MARK_SKIP_FIB: u32 = 0x0010_0000;

/// TC direction: the hook a program is attached at (on a workload's host-side device,
/// ingress carries what the workload sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    /// TC ingress.
    Ingress,
    /// TC egress.
    Egress,
}

impl Hook {
    /// Both hooks.
    pub const ALL: [Hook; 2] = [Hook::Ingress, Hook::Egress];

    /// Upstream's suffix for per-direction names (`ing` / `egr`).
    pub fn suffix(self) -> &'static str {
        match self {
            Hook::Ingress => "ing",
            Hook::Egress => "egr",
        }
    }

    /// Parses [`Hook::suffix`].
    pub fn from_suffix(s: &str) -> Option<Hook> {
        match s {
            "ing" => Some(Hook::Ingress),
            "egr" => Some(Hook::Egress),
            _ => None,
        }
    }
}

/// The per-interface globals the preamble is loaded with (`struct cali_tc_globals`, its
/// `.rodata`). Two attachments with equal globals behave the same, so an unchanged value
/// means no re-load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcGlobals {
    /// Host-side ifindex (0 for TC/TCX: the device's own).
    pub host_ifindex: u32,
    /// `GLOBALS_F_*`.
    pub flags: u32,
    /// The endpoint's policy slot in the per-endpoint map ([`SLOT_NONE`]: drop all IP).
    pub policy_slot: u32,
    /// The log filter's slot in the per-endpoint map ([`SLOT_NONE`]: fast path only).
    pub log_filter_slot: u32,
    /// Generic slot of the fast main program.
    pub jump_main: u32,
    /// Generic slot of the debug main program.
    pub jump_main_debug: u32,
}

impl TcGlobals {
    /// Size of the C struct.
    pub const SIZE: usize = 24;

    /// Globals for an endpoint with `policy_slot` and no log filter.
    pub fn new(flags: u32, policy_slot: u32) -> Self {
        Self {
            host_ifindex: 0,
            flags,
            policy_slot,
            log_filter_slot: SLOT_NONE,
            jump_main: PROG_INDEX_MAIN,
            jump_main_debug: debug_slot(PROG_INDEX_MAIN),
        }
    }

    /// The C struct's bytes (native endian).
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        let fields = [
            self.host_ifindex,
            self.flags,
            self.policy_slot,
            self.log_filter_slot,
            self.jump_main,
            self.jump_main_debug,
        ];
        for (i, f) in fields.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&f.to_ne_bytes());
        }
        b
    }

    /// Parses the C struct (at least [`TcGlobals::SIZE`] bytes).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let f = |i: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(
                b.get(i * 4..i * 4 + 4)?.try_into().ok()?,
            ))
        };
        Some(Self {
            host_ifindex: f(0)?,
            flags: f(1)?,
            policy_slot: f(2)?,
            log_filter_slot: f(3)?,
            jump_main: f(4)?,
            jump_main_debug: f(5)?,
        })
    }
}

/// `cali_iface` flag: a workload interface.
pub const IFACE_STATE_WEP: u32 = 0x1;
/// `cali_iface` flag: programs attached, IPv4 traffic may be forwarded to it.
pub const IFACE_STATE_V4_READY: u32 = 0x2;
/// `cali_iface` flag: programs attached, IPv6 traffic may be forwarded to it.
pub const IFACE_STATE_V6_READY: u32 = 0x4;
/// `cali_iface` flag: a host endpoint.
pub const IFACE_STATE_HEP: u32 = 0x8;
/// `cali_iface` flag: an interface felix does not manage.
pub const IFACE_STATE_NOT_MANAGED: u32 = 0x400;

/// The value of `cali_iface` (upstream's version 4 layout, `struct ifstate_val`).
///
/// A change of this layout, or a new flag, is a new map version (`IFACE_MAP` in
/// [`crate::maps`]): the kernel refuses to pin two layouts under one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceState {
    /// `IFACE_STATE_*`.
    pub flags: u32,
    /// Interface name (at most 15 bytes kept).
    pub name: String,
    /// XDP policy slot, IPv4 (-1: none).
    pub xdp_policy_v4: i32,
    /// TC ingress policy slot, IPv4 (-1: none).
    pub ingress_policy_v4: i32,
    /// TC egress policy slot, IPv4 (-1: none).
    pub egress_policy_v4: i32,
    /// XDP policy slot, IPv6.
    pub xdp_policy_v6: i32,
    /// TC ingress policy slot, IPv6.
    pub ingress_policy_v6: i32,
    /// TC egress policy slot, IPv6.
    pub egress_policy_v6: i32,
    /// TC ingress log filter slot.
    pub tc_filter_ingress: i32,
    /// TC egress log filter slot.
    pub tc_filter_egress: i32,
}

impl IfaceState {
    /// Size of `struct ifstate_val`.
    pub const SIZE: usize = 4 + 16 + 8 * 4;

    /// A state with `flags`, `name` and no slots.
    pub fn new(flags: u32, name: &str) -> Self {
        Self {
            flags,
            name: name.chars().take(15).collect(),
            xdp_policy_v4: -1,
            ingress_policy_v4: -1,
            egress_policy_v4: -1,
            xdp_policy_v6: -1,
            ingress_policy_v6: -1,
            egress_policy_v6: -1,
            tc_filter_ingress: -1,
            tc_filter_egress: -1,
        }
    }

    /// The C struct's bytes.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..4].copy_from_slice(&self.flags.to_ne_bytes());
        let name = self.name.as_bytes();
        let n = name.len().min(15);
        b[4..4 + n].copy_from_slice(&name[..n]);
        let slots = [
            self.xdp_policy_v4,
            self.ingress_policy_v4,
            self.egress_policy_v4,
            self.xdp_policy_v6,
            self.ingress_policy_v6,
            self.egress_policy_v6,
            self.tc_filter_ingress,
            self.tc_filter_egress,
        ];
        for (i, s) in slots.iter().enumerate() {
            b[20 + i * 4..24 + i * 4].copy_from_slice(&s.to_ne_bytes());
        }
        b
    }

    /// Parses the C struct.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < Self::SIZE {
            return None;
        }
        let s = |i: usize| i32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let name_bytes = &b[4..20];
        let end = name_bytes.iter().position(|&c| c == 0).unwrap_or(16);
        Some(Self {
            flags: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            name: String::from_utf8_lossy(&name_bytes[..end]).into_owned(),
            xdp_policy_v4: s(20),
            ingress_policy_v4: s(24),
            egress_policy_v4: s(28),
            xdp_policy_v6: s(32),
            ingress_policy_v6: s(36),
            egress_policy_v6: s(40),
            tc_filter_ingress: s(44),
            tc_filter_egress: s(48),
        })
    }

    /// The TC policy slot of `hook` (IPv4 and IPv6 share it in this layout's users).
    pub fn set_policy(&mut self, hook: Hook, slot: Option<u32>) {
        let v = slot.and_then(|s| i32::try_from(s).ok()).unwrap_or(-1);
        match hook {
            Hook::Ingress => {
                self.ingress_policy_v4 = v;
                self.ingress_policy_v6 = v;
            }
            Hook::Egress => {
                self.egress_policy_v4 = v;
                self.egress_policy_v6 = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globals_and_iface_state_round_trip_through_their_c_layouts() {
        let g = TcGlobals {
            host_ifindex: 7,
            ..TcGlobals::new(GLOBALS_F_WEP | GLOBALS_F_INGRESS, 12)
        };
        assert_eq!(TcGlobals::from_bytes(&g.to_bytes()), Some(g));
        assert_eq!(TcGlobals::from_bytes(&[0; 8]), None);
        let mut s = IfaceState::new(IFACE_STATE_WEP | IFACE_STATE_V4_READY, "cali12345678901234");
        s.set_policy(Hook::Egress, Some(3));
        let back = IfaceState::from_bytes(&s.to_bytes()).expect("parses");
        assert_eq!(back.name, "cali12345678901");
        assert_eq!(back.egress_policy_v4, 3);
        assert_eq!(back.ingress_policy_v4, -1);
        assert_eq!(back, s);
    }

    #[test]
    fn debug_variants_never_collide_with_fast_slots() {
        let fast = [
            PROG_INDEX_MAIN,
            PROG_INDEX_ALLOWED,
            PROG_INDEX_ICMP,
            PROG_INDEX_DROP,
        ];
        for f in fast {
            assert!(f < PROG_DEBUG_OFFSET);
            assert!(debug_slot(f) < PROG_GENERIC_SLOTS);
            assert!(!fast.contains(&debug_slot(f)));
        }
    }
}
