//! The config-file, environment and v3 FelixConfiguration readers.

use felix_config::{
    env_overrides, felix_configuration_scope, felix_configuration_to_raw, load_config_file,
    param_name_from_v3_field, parse_config_file, Config, ConfigError, Source,
};
use serde_json::json;
use std::time::Duration;

#[test]
fn ini_global_section_comments_quotes_and_delimiters() {
    let text = "# Felix config\n; another comment\n[global]\nInterfacePrefix = cali\nLogSeverityScreen: Debug\nLogPrefix = \"a;b #c\"\nHealthHost = 0.0.0.0 # inline comment\n\n  EtcdAddr=10.0.0.1:2379  \r\n";
    let m = parse_config_file(text).unwrap();
    assert_eq!(m.get("InterfacePrefix").map(String::as_str), Some("cali"));
    assert_eq!(
        m.get("LogSeverityScreen").map(String::as_str),
        Some("Debug")
    );
    assert_eq!(m.get("LogPrefix").map(String::as_str), Some("a;b #c"));
    assert_eq!(m.get("HealthHost").map(String::as_str), Some("0.0.0.0"));
    assert_eq!(m.get("EtcdAddr").map(String::as_str), Some("10.0.0.1:2379"));
    assert_eq!(m.len(), 5);
}

#[test]
fn ini_errors_name_the_line() {
    for (text, line) in [
        ("[global]\nHealthPort 9099\n", 2),
        ("[global\n", 1),
        ("[global]\n\n\n= 5\n", 4),
        ("[]\n", 1),
        ("[global]\nLogPrefix = \"open\n", 2),
    ] {
        let e = parse_config_file(text).unwrap_err();
        assert_eq!(e.line(), Some(line), "{text:?}: {e}");
        assert!(e.to_string().starts_with(&format!("line {line}:")), "{e}");
    }
}

#[test]
fn ini_last_duplicate_wins() {
    let m = parse_config_file("[global]\nHealthPort = 1\nHealthPort = 2\n").unwrap();
    assert_eq!(m.get("HealthPort").map(String::as_str), Some("2"));
}

#[test]
fn load_config_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("felix.cfg");
    std::fs::write(&path, "[global]\nbroken line\n").unwrap();
    let e = load_config_file(&path).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("felix.cfg") && msg.contains("line 2"), "{msg}");
    assert_eq!(e.line(), Some(2));
    let missing = load_config_file(&dir.path().join("absent.cfg")).unwrap_err();
    assert!(missing.is_not_found());
    std::fs::write(&path, "[global]\nHealthPort = 9199\n").unwrap();
    assert_eq!(load_config_file(&path).unwrap().len(), 1);
}

#[test]
fn env_prefix_is_case_insensitive_and_stripped() {
    let m = env_overrides(vec![
        ("FELIX_LOGSEVERITYSCREEN".to_string(), "debug".to_string()),
        ("Felix_InterfacePrefix".to_string(), "tap".to_string()),
        ("FELIXX".to_string(), "no".to_string()),
        ("HOME".to_string(), "/root".to_string()),
    ]);
    assert_eq!(m.len(), 2);
    assert_eq!(
        m.get("LOGSEVERITYSCREEN").map(String::as_str),
        Some("debug")
    );
    assert_eq!(m.get("InterfacePrefix").map(String::as_str), Some("tap"));
    let (c, errs) = Config::build(&[(Source::Environment, m)]);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(c.log_severity_screen_str(), "DEBUG");
    assert_eq!(c.interface_prefix(), ["tap".to_string()]);
}

#[test]
fn v3_field_names_map_to_params() {
    assert_eq!(
        param_name_from_v3_field("iptablesRefreshInterval"),
        Some("IptablesRefreshInterval")
    );
    assert_eq!(
        param_name_from_v3_field("logSeverityScreen"),
        Some("LogSeverityScreen")
    );
    assert_eq!(
        param_name_from_v3_field("ipipEnabled"),
        Some("IpInIpEnabled")
    );
    assert_eq!(
        param_name_from_v3_field("reportingInterval"),
        Some("ReportingIntervalSecs")
    );
    assert_eq!(
        param_name_from_v3_field("externalNodesList"),
        Some("ExternalNodesCIDRList")
    );
    assert_eq!(
        param_name_from_v3_field("iptablesLockProbeInterval"),
        Some("IptablesLockProbeIntervalMillis")
    );
    assert_eq!(
        param_name_from_v3_field("nftablesMode"),
        Some("NFTablesMode")
    );
    assert_eq!(param_name_from_v3_field("vxlanVNI"), Some("VXLANVNI"));
    assert_eq!(
        param_name_from_v3_field("IPTABLESREFRESHINTERVAL"),
        Some("IptablesRefreshInterval")
    );
    assert_eq!(param_name_from_v3_field("wireguardEnabled"), None);
    assert_eq!(param_name_from_v3_field("datastoreType"), None);
}

#[test]
fn felix_configuration_resource_converts_and_merges() {
    let global = json!({
        "apiVersion": "projectcalico.org/v3", "kind": "FelixConfiguration",
        "metadata": {"name": "default", "annotations": {"config.projectcalico.org/LogPrefix": "from-annotation"}},
        "spec": {
            "iptablesRefreshInterval": "1m30s",
            "iptablesLockProbeInterval": "100ms",
            "logSeverityScreen": "Debug",
            "logPrefix": "from-spec",
            "bpfEnabled": false,
            "healthPort": 9199,
            "iptablesMarkMask": 4294901760u64,
            "failsafeInboundHostPorts": [{"protocol": "TCP", "port": 22}, {"protocol": "UDP", "net": "fd00::/8", "port": 53}, {"port": 80, "net": "10.0.0.0/8"}],
            "routeTableRanges": [{"min": 1, "max": 100}, {"min": 300, "max": 400}],
            "healthTimeoutOverrides": [{"name": "CalculationGraph", "timeout": "45s"}],
            "kubeNodePortRanges": [30000, "31000:32000"],
            "bpfLogFilters": {"all": "tcp"},
            "wireguardEnabled": true,
            "madeUpField": 1,
            "nodeSelector": "all()"
        }
    });
    assert_eq!(
        felix_configuration_scope("default", "n1"),
        Some(Source::DatastoreGlobal)
    );
    let (raw, errs) = felix_configuration_to_raw(&global, Source::DatastoreGlobal);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs
        .iter()
        .any(|e| matches!(e, ConfigError::Unsupported { name, .. } if name == "WireguardEnabled")));
    assert!(errs
        .iter()
        .any(|e| matches!(e, ConfigError::UnknownParam { name, .. } if name == "madeUpField")));
    assert_eq!(
        raw.get("FailsafeInboundHostPorts").map(String::as_str),
        Some("tcp:22,udp:[fd00::/8]:53,tcp:10.0.0.0/8:80")
    );
    assert_eq!(
        raw.get("LogPrefix").map(String::as_str),
        Some("from-annotation")
    );

    let node = json!({"metadata": {"name": "node.n1"}, "spec": {"logSeverityScreen": "Warning", "interfacePrefix": "tap"}});
    assert_eq!(
        felix_configuration_scope("node.n1", "n1"),
        Some(Source::DatastorePerHost)
    );
    assert_eq!(felix_configuration_scope("node.n2", "n1"), None);
    assert_eq!(felix_configuration_scope("rack-a", "n1"), None);
    let (node_raw, node_errs) = felix_configuration_to_raw(&node, Source::DatastorePerHost);
    assert!(node_errs.is_empty());

    let (c, errs) = Config::build(&[
        (Source::DatastoreGlobal, raw),
        (Source::DatastorePerHost, node_raw),
    ]);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(c.iptables_refresh_interval(), Duration::from_secs(90));
    assert_eq!(c.iptables_lock_probe_interval(), Duration::from_millis(100));
    assert_eq!(c.log_severity_screen_str(), "WARNING");
    assert_eq!(c.interface_prefix(), ["tap".to_string()]);
    assert_eq!(c.log_prefix(), "from-annotation");
    assert_eq!(c.health_port(), 9199);
    assert_eq!(c.iptables_mark_mask(), 0xffff_0000);
    assert_eq!(c.route_table_indices().len(), 2);
    assert_eq!(
        c.health_timeout_overrides().get("CalculationGraph"),
        Some(&Duration::from_secs(45))
    );
    assert_eq!(c.kube_node_port_ranges().len(), 2);
    assert_eq!(
        c.bpf_log_filters().get("all").map(String::as_str),
        Some("tcp")
    );
    assert_eq!(
        c.source(felix_config::Param::LogSeverityScreen),
        Source::DatastorePerHost
    );
}

#[test]
fn v3_empty_failsafe_list_means_none_and_bad_shapes_are_reported() {
    let (raw, errs) = felix_configuration_to_raw(
        &json!({"spec": {"failsafeOutboundHostPorts": [], "routeTableRange": "1-5", "healthPort": {"x": {"y": 1}}}}),
        Source::DatastoreGlobal,
    );
    assert_eq!(
        raw.get("FailsafeOutboundHostPorts").map(String::as_str),
        Some("none")
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(matches!(&errs[0], ConfigError::BadField { field, .. } if field == "healthPort"));
    let (c, _) = Config::build(&[(Source::DatastoreGlobal, raw)]);
    assert!(c.failsafe_outbound_host_ports().is_empty());
    assert_eq!(
        c.route_table_indices(),
        vec![felix_config::IndexRange { min: 1, max: 5 }]
    );
}
