//! Datastore selection and etcd connection settings.
//!
//! * `--datastore file:DIR` or `--datastore etcdv3:URL[,URL...]` is parsed
//!   by [`parse_datastore_spec`]; a bare `etcdv3` means "etcd at the
//!   endpoints from the configuration" (see [`EtcdConfig::from_params`]).
//! * The Felix parameters upstream uses for etcd are `DatastoreType`
//!   (`etcdv3`), `EtcdEndpoints` (comma-separated URLs), `EtcdAddr`
//!   (`HOST:PORT`, used when `EtcdEndpoints` is empty, with `EtcdScheme`),
//!   and the TLS files `EtcdCaFile`, `EtcdCertFile`, `EtcdKeyFile`.
//!
//! # TLS
//!
//! `https://` endpoints use TLS with the files `EtcdCaFile` (trust
//! anchors; the system bundle without it), `EtcdCertFile` and
//! `EtcdKeyFile` (client certificate, both or neither); see
//! [`super::tls`].  [`EtcdConfig::validate`] reads them, so an unreadable
//! or mismatched file is reported at start-up, naming the parameter and
//! file ([`ConfigError::Tls`]).  The files are not used for `http://`
//! endpoints.

use std::path::PathBuf;

use super::http::Endpoint;
use super::tls::{self, TlsFiles};

/// Upstream's default etcd address.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:2379";

/// Bad datastore or etcd settings (exit code 2 material).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid --datastore {spec:?}: {reason}")]
    /// The `--datastore` value cannot be used.
    Spec {
        /// The `--datastore` value, as given.
        spec: String,
        /// Why it cannot be used.
        reason: String,
    },
    #[error("invalid etcd endpoint {0}")]
    /// The endpoint list is empty or an entry does not parse.
    Endpoint(String),
    #[error("etcd TLS settings: {0}")]
    /// The TLS files or settings cannot be used.
    Tls(String),
}

/// Which datastore to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatastoreSpec {
    /// `file:DIR`.
    File(PathBuf),
    /// `etcdv3:URLS`; `endpoints` is empty for a bare `etcdv3` (take them
    /// from the configuration).
    Etcd(EtcdConfig),
}

/// How to reach etcd.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct EtcdConfig {
    /// Member URLs, normalised to `http://HOST:PORT`.
    pub endpoints: Vec<String>,
    /// `EtcdCaFile`.
    pub ca_file: Option<PathBuf>,
    /// `EtcdCertFile`.
    pub cert_file: Option<PathBuf>,
    /// `EtcdKeyFile`.
    pub key_file: Option<PathBuf>,
}

impl EtcdConfig {
    /// Settings for the given endpoint list (`URL[,URL...]`).
    pub fn with_endpoints(list: &str) -> Result<EtcdConfig, ConfigError> {
        Ok(EtcdConfig {
            endpoints: parse_endpoints(list)?,
            ..EtcdConfig::default()
        })
    }

    /// Builds the settings from Felix parameters, looked up by their
    /// upstream names through `param` (case as written here; the caller
    /// handles precedence).  Endpoints already set (from `--datastore`) win
    /// over `EtcdEndpoints`, which wins over `EtcdScheme://EtcdAddr`, which
    /// defaults to [`DEFAULT_ENDPOINT`].
    pub fn from_params(
        mut self,
        param: impl Fn(&str) -> Option<String>,
    ) -> Result<EtcdConfig, ConfigError> {
        let nonempty = |name: &str| param(name).filter(|v| !v.trim().is_empty());
        if self.endpoints.is_empty() {
            self.endpoints = if let Some(list) = nonempty("EtcdEndpoints") {
                parse_endpoints(&list)?
            } else if let Some(addr) = nonempty("EtcdAddr") {
                let scheme = nonempty("EtcdScheme").unwrap_or_else(|| "http".into());
                parse_endpoints(&format!("{}://{}", scheme.trim(), addr.trim()))?
            } else {
                vec![DEFAULT_ENDPOINT.to_owned()]
            };
        }
        self.ca_file = self.ca_file.or(nonempty("EtcdCaFile").map(PathBuf::from));
        self.cert_file = self
            .cert_file
            .or(nonempty("EtcdCertFile").map(PathBuf::from));
        self.key_file = self.key_file.or(nonempty("EtcdKeyFile").map(PathBuf::from));
        self.validate()?;
        Ok(self)
    }

    /// The TLS file settings.
    pub fn tls_files(&self) -> TlsFiles {
        TlsFiles {
            ca_file: self.ca_file.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
        }
    }

    /// Checks the settings: at least one endpoint, and (when an endpoint
    /// is `https://`) TLS files that can be read and fit together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.endpoints.is_empty() {
            return Err(ConfigError::Endpoint("list is empty".into()));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(ConfigError::Tls(
                "EtcdCertFile and EtcdKeyFile must be set together".into(),
            ));
        }
        if self.endpoints.iter().any(|e| e.starts_with("https://")) {
            tls::client_config(&self.tls_files()).map_err(ConfigError::Tls)?;
        }
        Ok(())
    }
}

/// Parses a comma-separated endpoint list (spaces around entries and empty
/// entries are ignored); each entry must be `http[s]://HOST[:PORT]`.
pub fn parse_endpoints(list: &str) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let ep = Endpoint::parse(entry).map_err(ConfigError::Endpoint)?;
        let url = ep.url();
        if !out.contains(&url) {
            out.push(url);
        }
    }
    if out.is_empty() {
        return Err(ConfigError::Endpoint(format!("{list:?}: no URLs given")));
    }
    Ok(out)
}

/// Parses a `--datastore` value: `file:DIR`, `etcdv3:URL[,URL...]` or a
/// bare `etcdv3`.
pub fn parse_datastore_spec(spec: &str) -> Result<DatastoreSpec, ConfigError> {
    let bad = |reason: &str| ConfigError::Spec {
        spec: spec.to_owned(),
        reason: reason.to_owned(),
    };
    if let Some(dir) = spec.strip_prefix("file:") {
        if dir.is_empty() {
            return Err(bad("file: needs a directory"));
        }
        return Ok(DatastoreSpec::File(PathBuf::from(dir)));
    }
    if spec == "etcdv3" {
        return Ok(DatastoreSpec::Etcd(EtcdConfig::default()));
    }
    if let Some(urls) = spec.strip_prefix("etcdv3:") {
        if urls.trim().is_empty() {
            return Err(bad("etcdv3: needs at least one http[s]://HOST:PORT"));
        }
        return Ok(DatastoreSpec::Etcd(EtcdConfig::with_endpoints(urls)?));
    }
    Err(bad(
        "expected file:DIR or etcdv3:http://HOST:PORT[,http://HOST:PORT...]",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datastore_specs() {
        assert_eq!(
            parse_datastore_spec("file:/etc/calico").unwrap(),
            DatastoreSpec::File("/etc/calico".into())
        );
        match parse_datastore_spec("etcdv3:http://10.0.0.1:2379, http://etcd-2:4001/").unwrap() {
            DatastoreSpec::Etcd(c) => assert_eq!(
                c.endpoints,
                vec!["http://10.0.0.1:2379", "http://etcd-2:4001"]
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_datastore_spec("etcdv3").unwrap(),
            DatastoreSpec::Etcd(EtcdConfig::default())
        );
        for bad in [
            "",
            "file:",
            "etcdv3:",
            "etcd:http://x:1",
            "etcdv3:x:1",
            "kubernetes",
        ] {
            assert!(parse_datastore_spec(bad).is_err(), "{bad}");
        }
        match parse_datastore_spec("etcdv3:https://x:2379").unwrap() {
            DatastoreSpec::Etcd(c) => assert_eq!(c.endpoints, vec!["https://x:2379"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn params_fill_in_what_the_spec_left_open() {
        let params = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let c = EtcdConfig::default()
            .from_params(params(&[("EtcdEndpoints", "http://a:1,http://b:2")]))
            .unwrap();
        assert_eq!(c.endpoints, vec!["http://a:1", "http://b:2"]);
        let c = EtcdConfig::default()
            .from_params(params(&[("EtcdAddr", "c:3")]))
            .unwrap();
        assert_eq!(c.endpoints, vec!["http://c:3"]);
        let c = EtcdConfig::default().from_params(params(&[])).unwrap();
        assert_eq!(c.endpoints, vec![DEFAULT_ENDPOINT]);
        // Endpoints from --datastore win.
        let c = EtcdConfig::with_endpoints("http://d:4")
            .unwrap()
            .from_params(params(&[("EtcdEndpoints", "http://a:1")]))
            .unwrap();
        assert_eq!(c.endpoints, vec!["http://d:4"]);
        // TLS files are read (and so checked) for https endpoints only.
        let c = EtcdConfig::default()
            .from_params(params(&[("EtcdCaFile", "/nonexistent/ca.pem")]))
            .unwrap();
        assert_eq!(c.ca_file, Some(PathBuf::from("/nonexistent/ca.pem")));
        match EtcdConfig::default().from_params(params(&[
            ("EtcdEndpoints", "https://a:1"),
            ("EtcdCaFile", "/nonexistent/ca.pem"),
        ])) {
            Err(ConfigError::Tls(m)) => {
                assert!(m.contains("EtcdCaFile /nonexistent/ca.pem"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            EtcdConfig::default().from_params(params(&[("EtcdKeyFile", "/k.pem")])),
            Err(ConfigError::Tls(_))
        ));
    }
}
