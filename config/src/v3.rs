//! Mapping from the v3 `FelixConfiguration` resource to raw parameters.
//!
//! The datastore holds `FelixConfiguration` resources whose `spec` fields
//! are the lowerCamelCase form of the parameter names (with a few renames,
//! e.g. `ipipEnabled` -> `IpInIpEnabled`, `reportingInterval` ->
//! `ReportingIntervalSecs`; the table's `v3_field` column is authoritative).
//! Upstream converts each set field to the v1 text form; so do we:
//! strings as-is, booleans and numbers in plain text, lists joined with
//! commas, failsafe ports as `proto:[net:]port`, route-table ranges as
//! `min-max`, health overrides as `name=duration`. Durations stay Go
//! duration strings (`90s`), which the duration parser accepts.
//!
//! Annotations `config.projectcalico.org/<Name>` override spec fields, as
//! upstream allows, and are not validated until the merge.

use crate::error::ConfigError;
use crate::params::{lookup_unsupported, Param, UNSUPPORTED_UPSTREAM};
use crate::source::Source;
use serde_json::Value as Json;
use std::collections::BTreeMap;

/// Annotation prefix for raw config overrides on a `FelixConfiguration`.
pub const ANNOTATION_PREFIX: &str = "config.projectcalico.org/";

/// Canonical parameter name for a v3 spec field (matched ignoring case, as
/// Go's JSON decoding does). `None` for fields felix-rs does not implement.
pub fn param_name_from_v3_field(field: &str) -> Option<&'static str> {
    param_from_v3_field(field).map(Param::name)
}

fn param_from_v3_field(field: &str) -> Option<Param> {
    Param::ALL.iter().copied().find(|p| {
        p.spec()
            .v3_field
            .is_some_and(|f| f.eq_ignore_ascii_case(field))
    })
}

fn unsupported_from_v3_field(field: &str) -> Option<&'static str> {
    UNSUPPORTED_UPSTREAM
        .iter()
        .find(|(_, v3)| v3.is_some_and(|f| f.eq_ignore_ascii_case(field)))
        .map(|(n, _)| *n)
        .or_else(|| lookup_unsupported(field))
}

/// Which layer a `FelixConfiguration` named `name` feeds for node `node`:
/// `default` is global, `node.<node>` is per-host; other names (another
/// node's, or upstream's selector-scoped resources) do not apply.
pub fn felix_configuration_scope(name: &str, node: &str) -> Option<Source> {
    if name == "default" {
        Some(Source::DatastoreGlobal)
    } else if name.strip_prefix("node.") == Some(node) {
        Some(Source::DatastorePerHost)
    } else {
        None
    }
}

/// Converts a whole `FelixConfiguration` resource (JSON form: `metadata`,
/// `spec`) into raw parameters for one layer. Fields that are unknown or
/// have an unexpected JSON shape give one error each and are skipped.
pub fn felix_configuration_to_raw(
    resource: &Json,
    origin: Source,
) -> (BTreeMap<String, String>, Vec<ConfigError>) {
    let empty = Json::Null;
    let spec = resource.get("spec").unwrap_or(&empty);
    let (mut raw, errors) = v3_spec_to_raw(spec, origin);
    if let Some(annotations) = resource
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Json::as_object)
    {
        let pairs = annotations
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)));
        for (name, value) in annotation_overrides(pairs) {
            // An annotation replaces a spec field of the same parameter.
            raw.retain(|k, _| !k.eq_ignore_ascii_case(&name));
            raw.insert(name, value);
        }
    }
    (raw, errors)
}

/// The `config.projectcalico.org/<Name>` annotations, prefix removed.
pub fn annotation_overrides<I, K, V>(annotations: I) -> BTreeMap<String, String>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    annotations
        .into_iter()
        .filter_map(|(k, v)| {
            k.as_ref()
                .strip_prefix(ANNOTATION_PREFIX)
                .filter(|n| !n.is_empty())
                .map(|n| (n.to_string(), v.as_ref().to_string()))
        })
        .collect()
}

/// Converts a v3 `FelixConfigurationSpec` (JSON object) into raw
/// `canonical name -> text` pairs.
pub fn v3_spec_to_raw(spec: &Json, origin: Source) -> (BTreeMap<String, String>, Vec<ConfigError>) {
    let mut out = BTreeMap::new();
    let mut errors = Vec::new();
    let Some(obj) = spec.as_object() else {
        return (out, errors);
    };
    for (field, value) in obj {
        if field == "nodeSelector" || value.is_null() {
            continue;
        }
        let Some(param) = param_from_v3_field(field) else {
            errors.push(match unsupported_from_v3_field(field) {
                Some(name) => ConfigError::Unsupported {
                    name: name.to_string(),
                    origin,
                },
                None => ConfigError::UnknownParam {
                    name: field.clone(),
                    origin,
                },
            });
            continue;
        };
        match field_to_text(param, value) {
            Ok(Some(text)) => {
                out.insert(param.name().to_string(), text);
            }
            Ok(None) => {}
            Err(reason) => errors.push(ConfigError::BadField {
                field: field.clone(),
                param: param.name(),
                origin,
                value: value.to_string(),
                reason,
            }),
        }
    }
    (out, errors)
}

fn scalar(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Bool(b) => Some(b.to_string()),
        Json::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn get_str(o: &Json, key: &str) -> Option<String> {
    o.get(key).and_then(scalar).filter(|s| !s.is_empty())
}

/// Text form of one field; `Ok(None)` means "unset" (empty string/list).
fn field_to_text(param: Param, v: &Json) -> Result<Option<String>, String> {
    let shape_err = || "unexpected JSON shape for this field".to_string();
    let text = match (param, v) {
        (
            Param::FailsafeInboundHostPorts | Param::FailsafeOutboundHostPorts,
            Json::Array(items),
        ) => {
            if items.is_empty() {
                return Ok(Some("none".to_string()));
            }
            let parts = items
                .iter()
                .map(|pp| {
                    let port = get_str(pp, "port").ok_or_else(shape_err)?;
                    let proto = get_str(pp, "protocol")
                        .unwrap_or_else(|| "tcp".to_string())
                        .to_ascii_lowercase();
                    Ok(match get_str(pp, "net") {
                        Some(net) if net.contains(':') => format!("{proto}:[{net}]:{port}"),
                        Some(net) => format!("{proto}:{net}:{port}"),
                        None => format!("{proto}:{port}"),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            parts.join(",")
        }
        (Param::RouteTableRanges, Json::Array(items)) => items
            .iter()
            .map(|r| {
                Ok(format!(
                    "{}-{}",
                    get_str(r, "min").ok_or_else(shape_err)?,
                    get_str(r, "max").ok_or_else(shape_err)?
                ))
            })
            .collect::<Result<Vec<_>, String>>()?
            .join(","),
        (Param::RouteTableRange, r @ Json::Object(_)) => {
            format!(
                "{}-{}",
                get_str(r, "min").ok_or_else(shape_err)?,
                get_str(r, "max").ok_or_else(shape_err)?
            )
        }
        (Param::HealthTimeoutOverrides, Json::Array(items)) => items
            .iter()
            .map(|o| {
                Ok(format!(
                    "{}={}",
                    get_str(o, "name").ok_or_else(shape_err)?,
                    get_str(o, "timeout").ok_or_else(shape_err)?
                ))
            })
            .collect::<Result<Vec<_>, String>>()?
            .join(","),
        (_, Json::Array(items)) => items
            .iter()
            .map(|i| scalar(i).ok_or_else(shape_err))
            .collect::<Result<Vec<_>, String>>()?
            .join(","),
        (_, Json::Object(map)) => map
            .iter()
            .map(|(k, v)| Ok(format!("{k}={}", scalar(v).ok_or_else(shape_err)?)))
            .collect::<Result<Vec<_>, String>>()?
            .join(","),
        (_, other) => scalar(other).ok_or_else(shape_err)?,
    };
    Ok(if text.is_empty() { None } else { Some(text) })
}
