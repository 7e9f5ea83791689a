//! Admin endpoints the daemon adds for diagnostics (`felix admin diags` reads them with the
//! runtime's own `/status`, `/dataplane`, `/readback`, `/drift`, `/timings` and `/metrics`):
//!
//! | request | answer |
//! |---|---|
//! | `GET /config` | every parameter: its effective value, where it came from, and whether it has no effect here |
//! | `GET /logs` | the latest log lines (at the screen level), oldest first, as text |

use std::sync::Arc;

use felix_actors::http::{Request, Response};
use felix_actors::AdminContext;
use felix_config::{has_no_effect, Config, Param};
use serde_json::{json, Map, Value};

use super::logging::LogHandle;

/// The `GET /config` body for `cfg`.
pub fn config_json(cfg: &Config) -> Value {
    let mut params = Map::new();
    for p in Param::ALL {
        let mut entry = json!({
            "value": cfg.value(*p).render(),
            "source": cfg.source(*p).to_string(),
        });
        if has_no_effect(*p) {
            entry["noEffect"] = Value::Bool(true);
        }
        params.insert(p.name().to_string(), entry);
    }
    Value::Object(params)
}

/// Adds `GET /config` (a snapshot of `cfg`) and `GET /logs` to `admin`.
pub fn add_routes(admin: &AdminContext, cfg: &Config, log: &LogHandle) {
    let body = config_json(cfg).to_string();
    admin.route(
        "GET",
        "/config",
        Arc::new(move |_r: &Request| Response::json(200, body.clone())),
    );
    let log = log.clone();
    admin.route(
        "GET",
        "/logs",
        Arc::new(move |_r: &Request| {
            let mut text = log.recent().join("\n");
            text.push('\n');
            Response::text(200, text)
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use felix_config::Source;
    use std::collections::BTreeMap;

    #[test]
    fn config_json_names_value_source_and_no_effect_of_every_parameter() {
        let env = BTreeMap::from([
            ("LogSeverityScreen".to_string(), "DEBUG".to_string()),
            ("XDPEnabled".to_string(), "true".to_string()),
        ]);
        let (cfg, errs) = Config::build(&[(Source::Environment, env)]);
        assert!(errs.is_empty(), "{errs:?}");
        let v = config_json(&cfg);
        assert_eq!(v.as_object().map(Map::len), Some(Param::ALL.len()));
        assert_eq!(v["LogSeverityScreen"]["value"], "DEBUG");
        assert_eq!(
            v["LogSeverityScreen"]["source"],
            Source::Environment.to_string()
        );
        assert_eq!(
            v["IptablesRefreshInterval"]["source"],
            Source::Default.to_string()
        );
        assert_eq!(v["XDPEnabled"]["noEffect"], true);
        assert!(v["LogSeverityScreen"].get("noEffect").is_none());
    }
}
