//! Parameters felix-rs accepts (they parse and validate as upstream's do, so
//! a shared FelixConfiguration stays valid) but that change nothing here.
//! `felix run` warns once at start for each one set to a non-default value,
//! naming it and its source, and `docs/config.md` marks them.
//!
//! Invariant: a parameter is listed here only if no code outside this crate
//! reads it (`no_effect_parameters_warn_only_when_set`).

use crate::config::Config;
use crate::params::Param;
use crate::source::Source;

/// The parameters that have no effect in felix-rs.
pub const NO_EFFECT: &[Param] = &[
    Param::DebugDisableLogDropping,
    Param::KubeNodePortRanges,
    Param::ExternalNodesCIDRList,
    Param::PolicySyncPathPrefix,
    Param::ServiceLoopPrevention,
    Param::FeatureDetectOverride,
    Param::FeatureGates,
    Param::MTUIfacePattern,
    Param::IptablesPostWriteCheckIntervalSecs,
    Param::IptablesLockFilePath,
    Param::NFTablesFlowTableOffload,
    Param::NFTablesFlowTableDataIfacePattern,
    Param::IPv4VXLANTunnelAddr,
    Param::IPv6VXLANTunnelAddr,
    Param::VXLANTunnelMACAddr,
    Param::VXLANTunnelMACAddrV6,
    Param::IpInIpEnabled,
    Param::IpInIpMtu,
    Param::IpInIpTunnelAddr,
    Param::BPFConntrackLogLevel,
    Param::BPFDataIfacePattern,
    Param::BPFL3IfacePattern,
    Param::BPFDisableUnprivileged,
    Param::BPFPolicyDebugEnabled,
    Param::BPFEnforceRPF,
    Param::BPFRedirectToPeer,
    Param::BPFForceTrackPacketsFromIfaces,
    Param::BPFDisableGROForIfaces,
    Param::BPFExcludeCIDRsFromNAT,
    Param::BPFExtToServiceConnmark,
    Param::BPFHostConntrackBypass,
    Param::BPFLogFilters,
    Param::BPFMapSizeIPSets,
    Param::BPFMapSizeIfState,
    Param::BPFMapSizeRoute,
    Param::XDPEnabled,
    Param::GenericXDPEnabled,
    Param::XDPRefreshInterval,
    Param::UsageReportingEnabled,
    Param::UsageReportingInitialDelaySecs,
    Param::UsageReportingIntervalSecs,
    Param::DebugMemoryProfilePath,
    Param::DebugHost,
    Param::DebugPort,
];

/// Whether `p` has no effect in felix-rs.
pub fn has_no_effect(p: Param) -> bool {
    NO_EFFECT.contains(&p)
}

/// The no-effect parameters `cfg` sets (from a source other than the
/// built-in default), with where each came from.
pub fn set_without_effect(cfg: &Config) -> Vec<(Param, Source)> {
    NO_EFFECT
        .iter()
        .map(|p| (*p, cfg.source(*p)))
        .filter(|(_, s)| *s != Source::Default)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn no_effect_parameters_warn_only_when_set() {
        let (cfg, _) = Config::build(&[]);
        assert!(
            set_without_effect(&cfg).is_empty(),
            "defaults warn about nothing"
        );
        let env = BTreeMap::from([
            ("UsageReportingEnabled".to_string(), "false".to_string()),
            ("IptablesRefreshInterval".to_string(), "30".to_string()),
        ]);
        let (cfg, errs) = Config::build(&[(Source::Environment, env)]);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            set_without_effect(&cfg),
            vec![(Param::UsageReportingEnabled, Source::Environment)]
        );
        // No effective parameter is listed (a spot check of ones felix-rs reads).
        for p in [
            Param::IptablesRefreshInterval,
            Param::IstioAmbientMode,
            Param::LogFilePath,
            Param::VXLANPort,
        ] {
            assert!(!has_no_effect(p), "{p:?}");
        }
    }
}
