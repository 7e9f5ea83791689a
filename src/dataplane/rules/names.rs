//! Chain names and prefixes, equal to upstream Felix's (restart and
//! cross-version compatibility depend on them), and the length-limited
//! endpoint chain name derivation.

use base64::Engine;
use sha2::{Digest, Sha256};

/// Prefix of every chain we own.
pub const CHAIN_NAME_PREFIX: &str = "cali-";
/// Longest iptables chain name.
pub const MAX_CHAIN_NAME_LENGTH_IPTABLES: usize = 28;
/// Longest nftables object name (the kernel's NFT_NAME_MAXLEN).
pub const MAX_CHAIN_NAME_LENGTH_NFT: usize = 256;

/// Filter-table top-level chains.
pub const CHAIN_FILTER_INPUT: &str = "cali-INPUT";
/// Filter FORWARD.
pub const CHAIN_FILTER_FORWARD: &str = "cali-FORWARD";
/// Filter OUTPUT.
pub const CHAIN_FILTER_OUTPUT: &str = "cali-OUTPUT";
/// Raw PREROUTING.
pub const CHAIN_RAW_PREROUTING: &str = "cali-PREROUTING";
/// Raw OUTPUT.
pub const CHAIN_RAW_OUTPUT: &str = "cali-OUTPUT";
/// Failsafe inbound.
pub const CHAIN_FAILSAFE_IN: &str = "cali-failsafe-in";
/// Failsafe outbound.
pub const CHAIN_FAILSAFE_OUT: &str = "cali-failsafe-out";
/// NAT PREROUTING.
pub const CHAIN_NAT_PREROUTING: &str = "cali-PREROUTING";
/// NAT POSTROUTING.
pub const CHAIN_NAT_POSTROUTING: &str = "cali-POSTROUTING";
/// NAT OUTPUT.
pub const CHAIN_NAT_OUTPUT: &str = "cali-OUTPUT";
/// NAT outgoing (masquerade).
pub const CHAIN_NAT_OUTGOING: &str = "cali-nat-outgoing";
/// Mangle PREROUTING.
pub const CHAIN_MANGLE_PREROUTING: &str = "cali-PREROUTING";
/// Mangle POSTROUTING.
pub const CHAIN_MANGLE_POSTROUTING: &str = "cali-POSTROUTING";
/// Workload-to-host chain.
pub const CHAIN_WORKLOAD_TO_HOST: &str = "cali-wl-to-host";
/// Dispatch of traffic from workloads.
pub const CHAIN_FROM_WORKLOAD_DISPATCH: &str = "cali-from-wl-dispatch";
/// Dispatch of traffic to workloads.
pub const CHAIN_TO_WORKLOAD_DISPATCH: &str = "cali-to-wl-dispatch";
/// Dispatch to host endpoints.
pub const CHAIN_DISPATCH_TO_HOST_ENDPOINT: &str = "cali-to-host-endpoint";
/// Dispatch from host endpoints.
pub const CHAIN_DISPATCH_FROM_HOST_ENDPOINT: &str = "cali-from-host-endpoint";
/// Dispatch to host endpoints (forwarded traffic).
pub const CHAIN_DISPATCH_TO_HOST_ENDPOINT_FORWARD: &str = "cali-to-hep-forward";
/// Dispatch from host endpoints (forwarded traffic).
pub const CHAIN_DISPATCH_FROM_HOST_ENDPOINT_FORWARD: &str = "cali-from-hep-forward";
/// Endpoint-mark setting dispatch.
pub const CHAIN_DISPATCH_SET_ENDPOINT_MARK: &str = "cali-set-endpoint-mark";
/// Dispatch by endpoint mark.
pub const CHAIN_DISPATCH_FROM_ENDPOINT_MARK: &str = "cali-from-endpoint-mark";
/// Forward check.
pub const CHAIN_FORWARD_CHECK: &str = "cali-forward-check";
/// Forward endpoint mark.
pub const CHAIN_FORWARD_ENDPOINT_MARK: &str = "cali-forward-endpoint-mark";

/// Policy chain prefixes.
pub const POLICY_INBOUND_PFX: &str = "cali-pi-";
/// Outbound policy chains.
pub const POLICY_OUTBOUND_PFX: &str = "cali-po-";
/// Inbound profile chains.
pub const PROFILE_INBOUND_PFX: &str = "cali-pri-";
/// Outbound profile chains.
pub const PROFILE_OUTBOUND_PFX: &str = "cali-pro-";
/// Per-workload chains for traffic to the workload.
pub const WORKLOAD_TO_ENDPOINT_PFX: &str = "cali-tw-";
/// Per-workload chains for traffic from the workload.
pub const WORKLOAD_FROM_ENDPOINT_PFX: &str = "cali-fw-";
/// Set-endpoint-mark chains.
pub const SET_ENDPOINT_MARK_PFX: &str = "cali-sm-";
/// Host endpoint chains (to).
pub const HOST_TO_ENDPOINT_PFX: &str = "cali-th-";
/// Host endpoint chains (from).
pub const HOST_FROM_ENDPOINT_PFX: &str = "cali-fh-";
/// Host endpoint chains for forwarded traffic (to).
pub const HOST_TO_ENDPOINT_FORWARD_PFX: &str = "cali-thfw-";
/// Host endpoint chains for forwarded traffic (from).
pub const HOST_FROM_ENDPOINT_FORWARD_PFX: &str = "cali-fhfw-";

/// Marks a shortened (hashed) name suffix.
const SHORTENED_PREFIX: &str = "_";

/// `prefix + suffix` if it fits in `max_len` (and does not start with the
/// shortened marker at exactly `max_len`); otherwise `prefix + "_" +` the
/// URL-safe base64 SHA-256 of the suffix, truncated to fit. Equal to
/// upstream's length-limited IDs. `max_len` must exceed `prefix.len() + 1`;
/// if it does not, the result is `prefix + "_"` (never panics).
pub fn length_limited_id(prefix: &str, suffix: &str, max_len: usize) -> String {
    let suffix = if suffix.is_empty() {
        SHORTENED_PREFIX
    } else {
        suffix
    };
    let total = prefix.len() + suffix.len();
    if total > max_len || (total == max_len && suffix.starts_with(SHORTENED_PREFIX)) {
        let hash = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(suffix.as_bytes()));
        let left = max_len.saturating_sub(1 + prefix.len()).min(hash.len());
        return format!("{prefix}{SHORTENED_PREFIX}{}", &hash[..left]);
    }
    format!("{prefix}{suffix}")
}

/// The per-endpoint chain name for an interface.
pub fn endpoint_chain_name(prefix: &str, iface: &str, max_len: usize) -> String {
    length_limited_id(prefix, iface, max_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_names_fit_and_are_stable() {
        assert_eq!(
            endpoint_chain_name(WORKLOAD_TO_ENDPOINT_PFX, "cali1234", 28),
            "cali-tw-cali1234"
        );
        let long = endpoint_chain_name(WORKLOAD_TO_ENDPOINT_PFX, "cali0123456789abcdefghijk", 28);
        assert_eq!(long.len(), 28);
        assert!(long.starts_with("cali-tw-_"));
        assert_eq!(
            long,
            endpoint_chain_name(WORKLOAD_TO_ENDPOINT_PFX, "cali0123456789abcdefghijk", 28)
        );
        assert_ne!(
            long,
            endpoint_chain_name(WORKLOAD_TO_ENDPOINT_PFX, "cali0123456789abcdefghijX", 28)
        );
        // Exactly at the limit but starting with the marker: hashed.
        let marker = format!("_{}", "a".repeat(19));
        assert_ne!(
            length_limited_id("cali-tw-", &marker, 28),
            format!("cali-tw-{marker}")
        );
        assert_eq!(length_limited_id("p", "", 10), "p_");
    }
}
