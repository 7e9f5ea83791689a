//! The `--datastore SPEC` argument and its default.
//!
//! Forms: `file:DIR` (the file datastore) and
//! `etcdv3:http://HOST:PORT[,http://HOST:PORT...]` (`https://` too).
//!
//! Without `--datastore`: if the config file or environment explicitly sets
//! `DatastoreType=etcdv3`, the etcd endpoints come from `EtcdEndpoints`
//! (else `EtcdScheme://EtcdAddr`); otherwise the file datastore in
//! [`DEFAULT_FILE_DATASTORE_DIR`] is used (upstream's built-in `etcdv3`
//! default is deliberately not followed: this build's embedded datastore is
//! the file one).

use std::fmt;
use std::path::PathBuf;

use felix_config::{Config, Param, Source};

/// Directory of the file datastore when neither `--datastore` nor
/// `DatastoreType` says otherwise.
pub const DEFAULT_FILE_DATASTORE_DIR: &str = "/etc/calico/datastore";

/// A parsed datastore location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatastoreSpec {
    /// `file:DIR`.
    File(PathBuf),
    /// `etcdv3:URL[,URL...]`.
    Etcd(Vec<String>),
}

impl fmt::Display for DatastoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatastoreSpec::File(d) => write!(f, "file:{}", d.display()),
            DatastoreSpec::Etcd(urls) => write!(f, "etcdv3:{}", urls.join(",")),
        }
    }
}

/// A `--datastore` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Neither `file:` nor `etcdv3:`.
    #[error("--datastore {0:?}: expected file:DIR or etcdv3:http://HOST:PORT[,...]")]
    UnknownScheme(String),
    /// `file:` with nothing after it.
    #[error("--datastore {0:?}: file: needs a directory")]
    EmptyDir(String),
    /// A malformed etcd endpoint.
    #[error("--datastore {spec:?}: bad etcd endpoint {url:?}: {reason}")]
    BadEndpoint {
        /// The whole `--datastore` value.
        spec: String,
        /// The offending endpoint.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `DatastoreType` names a datastore this build cannot use.
    #[error(
        "DatastoreType {0:?} is not supported by felix-rs; use --datastore file:DIR or etcdv3:URLS"
    )]
    Unsupported(String),
}

impl DatastoreSpec {
    /// Parses a `--datastore` value.
    pub fn parse(spec: &str) -> Result<DatastoreSpec, SpecError> {
        if let Some(dir) = spec.strip_prefix("file:") {
            if dir.is_empty() {
                return Err(SpecError::EmptyDir(spec.to_string()));
            }
            return Ok(DatastoreSpec::File(PathBuf::from(dir)));
        }
        if let Some(list) = spec.strip_prefix("etcdv3:") {
            let mut urls = Vec::new();
            for url in list.split(',').map(str::trim) {
                check_endpoint(url).map_err(|reason| SpecError::BadEndpoint {
                    spec: spec.to_string(),
                    url: url.to_string(),
                    reason,
                })?;
                urls.push(url.trim_end_matches('/').to_string());
            }
            return Ok(DatastoreSpec::Etcd(urls));
        }
        Err(SpecError::UnknownScheme(spec.to_string()))
    }

    /// The datastore to use: `flag` if given, else from the local config
    /// (see the module docs).
    pub fn resolve(flag: Option<&str>, local: &Config) -> Result<DatastoreSpec, SpecError> {
        if let Some(s) = flag {
            return DatastoreSpec::parse(s);
        }
        if local.source(Param::DatastoreType) == Source::Default {
            return Ok(DatastoreSpec::File(PathBuf::from(
                DEFAULT_FILE_DATASTORE_DIR,
            )));
        }
        match local.datastore_type() {
            "etcdv3" => Ok(DatastoreSpec::Etcd(
                local
                    .etcd_endpoint_urls()
                    .iter()
                    .map(|u| u.trim_end_matches('/').to_string())
                    .collect(),
            )),
            other => Err(SpecError::Unsupported(other.to_string())),
        }
    }
}

fn check_endpoint(url: &str) -> Result<(), &'static str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("must start with http:// or https://")?;
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        return Err("must be scheme://HOST:PORT");
    }
    let (host, port) = authority.rsplit_once(':').ok_or("missing :PORT")?;
    if host.is_empty() {
        return Err("missing host");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err("port must be 1-65535"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn parses_file_and_etcd_forms() {
        assert_eq!(
            DatastoreSpec::parse("file:/tmp/ds").unwrap(),
            DatastoreSpec::File("/tmp/ds".into())
        );
        assert_eq!(
            DatastoreSpec::parse("etcdv3:http://10.0.0.1:2379,https://h:2380/").unwrap(),
            DatastoreSpec::Etcd(vec!["http://10.0.0.1:2379".into(), "https://h:2380".into()])
        );
    }

    #[test]
    fn rejects_malformed_specs_naming_the_problem() {
        assert!(matches!(
            DatastoreSpec::parse("/tmp/ds"),
            Err(SpecError::UnknownScheme(_))
        ));
        assert!(matches!(
            DatastoreSpec::parse("file:"),
            Err(SpecError::EmptyDir(_))
        ));
        for bad in [
            "etcdv3:",
            "etcdv3:10.0.0.1:2379",
            "etcdv3:http://h",
            "etcdv3:http://h:0",
        ] {
            let e = DatastoreSpec::parse(bad).unwrap_err();
            assert!(matches!(e, SpecError::BadEndpoint { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn default_is_the_file_datastore_unless_datastore_type_is_set_locally() {
        let (cfg, _) = Config::build(&[]);
        assert_eq!(
            DatastoreSpec::resolve(None, &cfg).unwrap(),
            DatastoreSpec::File(DEFAULT_FILE_DATASTORE_DIR.into())
        );
        let env: BTreeMap<String, String> = [
            ("DatastoreType".to_string(), "etcdv3".to_string()),
            (
                "EtcdEndpoints".to_string(),
                "http://1.2.3.4:2379".to_string(),
            ),
        ]
        .into();
        let (cfg, errs) = Config::build(&[(Source::Environment, env)]);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            DatastoreSpec::resolve(None, &cfg).unwrap(),
            DatastoreSpec::Etcd(vec!["http://1.2.3.4:2379".into()])
        );
        assert_eq!(
            DatastoreSpec::resolve(Some("file:/x"), &cfg).unwrap(),
            DatastoreSpec::File("/x".into()),
            "the flag wins"
        );
    }
}
