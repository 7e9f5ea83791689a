//! Precedence, case-insensitivity, invalid-value handling and restart
//! detection of `Config::build`.

use felix_config::{
    env_overrides, parse_config_file, restart_required, Config, ConfigError, Param, Source, PARAMS,
};
use std::collections::BTreeMap;
use std::time::Duration;

fn layer(source: Source, pairs: &[(&str, &str)]) -> (Source, BTreeMap<String, String>) {
    (
        source,
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

#[test]
fn defaults_match_upstream() {
    let c = Config::default();
    assert_eq!(c.interface_prefix(), ["cali".to_string()]);
    assert_eq!(c.health_port(), 9099);
    assert_eq!(c.health_host(), "localhost");
    assert!(!c.health_enabled());
    assert_eq!(c.prometheus_metrics_port(), 9091);
    assert_eq!(c.iptables_refresh_interval(), Duration::from_secs(180));
    assert_eq!(c.ipsets_refresh_interval(), Duration::from_secs(90));
    assert_eq!(c.route_refresh_interval(), Duration::from_secs(90));
    assert_eq!(c.interface_refresh_interval(), Duration::from_secs(90));
    assert_eq!(
        c.iptables_post_write_check_interval(),
        Duration::from_secs(5)
    );
    assert_eq!(c.iptables_lock_probe_interval(), Duration::from_millis(50));
    assert_eq!(c.iptables_mark_mask(), 0xffff_0000);
    assert_eq!(c.nftables_mark_mask(), 0xffff_0000);
    assert_eq!(c.max_ipset_size(), 1_048_576);
    assert_eq!(c.default_endpoint_to_host_action_str(), "DROP");
    assert_eq!(c.iptables_backend_str(), "auto");
    assert_eq!(c.nftables_mode_str(), "Auto");
    assert_eq!(c.bpf_attach_type_str(), "Netkit");
    assert_eq!(c.bpf_log_level(), "off");
    assert_eq!(c.log_severity_screen_str(), "INFO");
    assert_eq!(c.log_file_path(), "/var/log/calico/felix.log");
    assert_eq!(c.log_prefix(), "calico-packet");
    assert_eq!(c.vxlan_port(), 4789);
    assert_eq!(c.vxlan_vni(), 4096);
    assert_eq!(c.vxlan_enabled(), None);
    assert_eq!(c.ipip_enabled(), None);
    assert_eq!(c.route_source(), "CalicoIPAM");
    assert!(c.remove_external_routes());
    assert!(c.usage_reporting_enabled());
    assert!(c.xdp_enabled());
    assert!(c.ipv6_support());
    assert_eq!(c.reporting_interval(), Duration::from_secs(30));
    assert_eq!(c.status_reporting_interval(), Duration::from_secs(30));
    assert_eq!(c.service_loop_prevention(), "Drop");
    assert_eq!(c.chain_insert_mode(), felix_config::ChainInsertMode::Insert);
    assert_eq!(c.nat_outgoing_address(), None);
    assert_eq!(
        c.etcd_endpoint_urls(),
        vec!["http://127.0.0.1:2379".to_string()]
    );
    let inbound: Vec<String> = c
        .failsafe_inbound_host_ports()
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        inbound.join(","),
        "tcp:22,udp:68,tcp:179,tcp:2379,tcp:2380,tcp:5473,tcp:6443,tcp:6666,tcp:6667"
    );
    assert_eq!(c.failsafe_outbound_host_ports()[0].to_string(), "udp:53");
    assert!(c.is_excluded_iface("kube-ipvs0"));
    assert!(!c.is_excluded_iface("kube-ipvs01"));
    assert!(c.is_workload_iface("cali1234"));
    assert_eq!(c.dataplane_mode(), felix_config::DataplaneMode::Iptables);
    assert!(c.raw().is_empty());
    for p in Param::ALL {
        assert_eq!(c.source(*p), Source::Default);
    }
}

#[test]
fn precedence_across_all_five_layers() {
    let name = "LogSeverityScreen";
    let layers = [
        layer(Source::Environment, &[(name, "ERROR")]),
        layer(Source::DatastoreGlobal, &[(name, "DEBUG")]),
        layer(Source::ConfigFile, &[(name, "WARNING")]),
        layer(Source::DatastorePerHost, &[(name, "TRACE")]),
    ];
    // Remove layers from the top one at a time; the next one down wins.
    let expected = [
        ("ERROR", Source::Environment),
        ("WARNING", Source::ConfigFile),
        ("TRACE", Source::DatastorePerHost),
        ("DEBUG", Source::DatastoreGlobal),
        ("INFO", Source::Default),
    ];
    let order = [
        Source::Environment,
        Source::ConfigFile,
        Source::DatastorePerHost,
        Source::DatastoreGlobal,
    ];
    for (i, (want, src)) in expected.iter().enumerate() {
        let present: Vec<_> = layers
            .iter()
            .filter(|(s, _)| !order[..i].contains(s))
            .cloned()
            .collect();
        let (c, errs) = Config::build(&present);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(c.log_severity_screen_str(), *want, "step {i}");
        assert_eq!(c.source(Param::LogSeverityScreen), *src);
    }
}

#[test]
fn names_are_case_insensitive_in_every_source() {
    for source in [
        Source::DatastoreGlobal,
        Source::DatastorePerHost,
        Source::ConfigFile,
        Source::Environment,
    ] {
        for name in [
            "interfaceprefix",
            "INTERFACEPREFIX",
            "InterfacePrefix",
            "iNtErFaCePrEfIx",
        ] {
            let (c, errs) = Config::build(&[layer(source, &[(name, "tap,veth")])]);
            assert!(errs.is_empty(), "{errs:?}");
            assert_eq!(
                c.interface_prefix(),
                ["tap".to_string(), "veth".to_string()]
            );
            assert_eq!(
                c.raw().get("InterfacePrefix").map(String::as_str),
                Some("tap,veth")
            );
        }
    }
}

#[test]
fn enum_values_are_case_insensitive_and_canonicalised() {
    let (c, errs) = Config::build(&[layer(
        Source::ConfigFile,
        &[
            ("NFTablesMode", "enabled"),
            ("IptablesBackend", "NFT"),
            ("DefaultEndpointToHostAction", "accept"),
            ("BPFAttachType", "tcx"),
        ],
    )]);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(c.nftables_mode_str(), "Enabled");
    assert_eq!(c.iptables_backend_str(), "nft");
    assert_eq!(
        c.default_endpoint_to_host_action(),
        felix_config::EndpointToHostAction::Accept
    );
    assert_eq!(c.bpf_attach_type(), felix_config::BpfAttachType::Tcx);
    assert_eq!(c.dataplane_mode(), felix_config::DataplaneMode::Nftables);
}

#[test]
fn bpf_mode_keeps_nftables_rules_with_nftables_mode_enabled() {
    let mode = |pairs: &[(&str, &str)]| {
        let (c, errs) = Config::build(&[layer(Source::ConfigFile, pairs)]);
        assert!(errs.is_empty(), "{errs:?}");
        (
            c.dataplane_mode(),
            c.nftables_rules(),
            c.filter_allow_action().to_string(),
        )
    };
    use felix_config::DataplaneMode::*;
    let (m, nft, _) = mode(&[("BPFEnabled", "true")]);
    assert_eq!((m, nft), (Bpf, false));
    let (m, nft, allow) = mode(&[("BPFEnabled", "true"), ("NFTablesMode", "Enabled")]);
    assert_eq!((m, nft), (Bpf, true));
    let (_, _, nft_allow) = mode(&[("NFTablesMode", "Enabled")]);
    assert_eq!(
        allow, nft_allow,
        "BPF mode's nftables rules use the nftables settings"
    );
    assert!(mode(&[("NFTablesMode", "Enabled")]).1);
    assert!(!mode(&[]).1);
}

#[test]
fn chain_insert_mode_from_env_is_typed_and_validated() {
    let env = env_overrides([("FELIX_CHAININSERTMODE", "Append")]);
    let (c, errs) = Config::build(&[(Source::Environment, env)]);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(c.chain_insert_mode_str(), "append");
    assert_eq!(c.chain_insert_mode(), felix_config::ChainInsertMode::Append);

    // An unknown value is refused and the default stays.
    let (c, errs) = Config::build(&[layer(Source::ConfigFile, &[("ChainInsertMode", "middle")])]);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].param(), "ChainInsertMode");
    assert_eq!(c.chain_insert_mode(), felix_config::ChainInsertMode::Insert);
}

#[test]
fn invalid_value_keeps_lower_layers_value_and_reports_once() {
    let (c, errs) = Config::build(&[
        layer(Source::DatastoreGlobal, &[("HealthPort", "9100")]),
        layer(Source::ConfigFile, &[("HealthPort", "70000")]),
    ]);
    assert_eq!(c.health_port(), 9100);
    assert_eq!(c.source(Param::HealthPort), Source::DatastoreGlobal);
    assert_eq!(errs.len(), 1);
    let msg = errs[0].to_string();
    assert!(!msg.contains('\n'));
    for part in [
        "HealthPort",
        "config file",
        "70000",
        "at most 65535",
        "datastore (FelixConfiguration default)",
    ] {
        assert!(msg.contains(part), "{msg:?} lacks {part:?}");
    }
}

#[test]
fn invalid_value_with_no_lower_layer_keeps_default() {
    let (c, errs) = Config::build(&[layer(
        Source::Environment,
        &[("IptablesRefreshInterval", "soon"), ("BPFEnabled", "maybe")],
    )]);
    assert_eq!(c.iptables_refresh_interval(), Duration::from_secs(180));
    assert!(!c.bpf_enabled());
    assert_eq!(errs.len(), 2);
    assert!(errs.iter().all(|e| matches!(
        e,
        ConfigError::InvalidValue {
            kept: Source::Default,
            origin: Source::Environment,
            ..
        }
    )));
    assert!(c.raw().is_empty());
}

#[test]
fn error_display_is_one_line_even_with_newlines_in_value() {
    let (_, errs) = Config::build(&[layer(Source::ConfigFile, &[("LogPrefix", "a\nb")])]);
    assert_eq!(errs.len(), 1);
    assert!(!errs[0].to_string().contains('\n'), "{}", errs[0]);
}

#[test]
fn unknown_and_unsupported_names_give_one_error_each() {
    let (c, errs) = Config::build(&[layer(
        Source::ConfigFile,
        &[
            ("NoSuchParam", "1"),
            ("wireguardenabled", "true"),
            ("HealthEnabled", "true"),
        ],
    )]);
    assert!(c.health_enabled());
    assert_eq!(errs.len(), 2);
    assert!(errs.iter().any(|e| matches!(e, ConfigError::UnknownParam { name, origin: Source::ConfigFile } if name == "NoSuchParam")));
    assert!(errs
        .iter()
        .any(|e| matches!(e, ConfigError::Unsupported { name, .. } if name == "WireguardEnabled")));
    assert!(errs.iter().all(|e| e.to_string().contains("config file")));
}

#[test]
fn local_params_are_refused_from_the_datastore() {
    let (c, errs) = Config::build(&[
        layer(Source::DatastoreGlobal, &[("EtcdAddr", "10.0.0.1:2379")]),
        layer(Source::DatastorePerHost, &[("FelixHostname", "evil")]),
    ]);
    assert_eq!(c.etcd_addr(), "127.0.0.1:2379");
    assert_eq!(c.felix_hostname(), "");
    assert_eq!(errs.len(), 2);
    assert!(errs
        .iter()
        .all(|e| matches!(e, ConfigError::LocalOnly { .. })));
    let (c, errs) = Config::build(&[layer(
        Source::Environment,
        &[("EtcdEndpoints", "http://10.0.0.1:2379,http://10.0.0.2:2379")],
    )]);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(
        c.etcd_endpoint_urls(),
        vec![
            "http://10.0.0.1:2379/".to_string(),
            "http://10.0.0.2:2379/".to_string()
        ]
    );
}

#[test]
fn none_sets_zero_value_but_not_for_non_zero_params() {
    let (c, errs) = Config::build(&[layer(
        Source::ConfigFile,
        &[
            ("FailsafeInboundHostPorts", "none"),
            ("LogFilePath", "NONE"),
            ("InterfacePrefix", "none"),
        ],
    )]);
    assert!(c.failsafe_inbound_host_ports().is_empty());
    assert_eq!(c.log_file_path(), "");
    assert_eq!(c.interface_prefix(), ["cali".to_string()]);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].param(), "InterfacePrefix");
}

#[test]
fn empty_values_are_ignored_without_error() {
    let (c, errs) = Config::build(&[
        layer(Source::DatastoreGlobal, &[("LogSeverityScreen", "DEBUG")]),
        layer(Source::Environment, &[("LogSeverityScreen", "")]),
    ]);
    assert!(errs.is_empty());
    assert_eq!(c.log_severity_screen(), felix_config::LogLevel::Debug);
}

#[test]
fn env_and_file_helpers_feed_build() {
    let env = env_overrides([
        ("FELIX_HEALTHENABLED", "true"),
        ("felix_healthport", "9199"),
        ("PATH", "/bin"),
        ("FELIX_", "x"),
        ("FELIXHEALTHHOST", "x"),
    ]);
    assert_eq!(env.len(), 2);
    let file = parse_config_file("[global]\nHealthPort = 9299\nHealthHost = 0.0.0.0\n").unwrap();
    let (c, errs) = Config::build(&[(Source::Environment, env), (Source::ConfigFile, file)]);
    assert!(errs.is_empty(), "{errs:?}");
    assert!(c.health_enabled());
    assert_eq!(c.health_port(), 9199);
    assert_eq!(c.health_host(), "0.0.0.0");
    assert_eq!(c.source(Param::HealthHost), Source::ConfigFile);
}

#[test]
fn raw_view_lists_only_non_default_sources_by_canonical_name() {
    let (c, _) = Config::build(&[layer(
        Source::ConfigFile,
        &[
            ("iptablesrefreshinterval", "1m30s"),
            ("logseverityscreen", "bad"),
        ],
    )]);
    let raw = c.raw();
    assert_eq!(raw.len(), 1);
    assert_eq!(
        raw.get("IptablesRefreshInterval").map(String::as_str),
        Some("1m30s")
    );
    assert_eq!(c.iptables_refresh_interval(), Duration::from_secs(90));
}

#[test]
fn restart_required_lists_changed_restart_params_only() {
    let old = Config::default();
    let (new, _) = Config::build(&[layer(
        Source::DatastoreGlobal,
        &[
            ("ClusterGUID", "abc"),
            ("HealthTimeoutOverrides", "CalculationGraph=30s"),
            ("IptablesRefreshInterval", "60"),
            ("LogSeverityScreen", "INFO"),
        ],
    )]);
    assert_eq!(
        restart_required(&old, &new),
        vec!["IptablesRefreshInterval"]
    );
    assert!(restart_required(&new, &new).is_empty());
    // Same effective value written differently is not a change.
    let (a, _) = Config::build(&[layer(
        Source::ConfigFile,
        &[("IptablesRefreshInterval", "60")],
    )]);
    let (b, _) = Config::build(&[layer(
        Source::Environment,
        &[("IptablesRefreshInterval", "1m")],
    )]);
    assert!(restart_required(&a, &b).is_empty());
}

#[test]
fn rendered_values_parse_back_to_the_same_value() {
    let c = Config::default();
    for spec in PARAMS {
        let p = felix_config::lookup(spec.name).unwrap();
        let text = c.value(p).render();
        if text.is_empty() {
            continue;
        }
        assert_eq!(
            spec.kind.parse(&text).as_ref(),
            Ok(c.value(p)),
            "{}: {text:?}",
            spec.name
        );
    }
}
