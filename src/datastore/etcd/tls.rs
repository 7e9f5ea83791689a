//! TLS settings for `https://` etcd endpoints (rustls, ring provider).
//!
//! [`client_config`] turns the upstream parameters `EtcdCaFile`,
//! `EtcdCertFile` and `EtcdKeyFile` into one shared rustls client
//! configuration:
//!
//! * the CA file (PEM, one or more certificates) is the only trust anchor
//!   set when given; without it the system bundle
//!   ([`SYSTEM_CA_BUNDLES`]) is used, as upstream's client falls back to
//!   the system roots;
//! * a client certificate (PEM chain) and its key (PKCS#8, PKCS#1 or SEC1
//!   PEM) are presented when both are given; one without the other is an
//!   error;
//! * the server's certificate must name the endpoint's host (DNS name or
//!   IP address SAN), and ALPN offers `http/1.1` (the JSON gateway; the
//!   gRPC transport uses a copy offering `h2`).
//!
//! Every error names the parameter and file it is about.  Certificate
//! files are read once, when the client is built.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Where the system's CA bundle is looked for (Debian/Ubuntu, then
/// Fedora/RHEL), when no `EtcdCaFile` is set.
pub const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// The TLS files of an etcd connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// `EtcdCaFile`.
    pub ca_file: Option<PathBuf>,
    /// `EtcdCertFile`.
    pub cert_file: Option<PathBuf>,
    /// `EtcdKeyFile`.
    pub key_file: Option<PathBuf>,
}

/// Builds the client configuration for `files`; the error names the
/// parameter and file at fault.
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match &files.ca_file {
        Some(ca) => {
            let certs = read_certs("EtcdCaFile", ca)?;
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("EtcdCaFile {}: unusable CA: {e}", ca.display()))?;
            }
        }
        None => {
            let bundle = SYSTEM_CA_BUNDLES
                .iter()
                .map(Path::new)
                .find(|p| p.exists())
                .ok_or_else(|| {
                    format!(
                        "https endpoint without EtcdCaFile and no system CA bundle (looked for {})",
                        SYSTEM_CA_BUNDLES.join(", ")
                    )
                })?;
            let certs = read_certs("system CA bundle", bundle)?;
            roots.add_parsable_certificates(certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots);
    let mut config = match (&files.cert_file, &files.key_file) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = read_certs("EtcdCertFile", cert)?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                format!("EtcdKeyFile {}: no usable private key: {e}", key.display())
            })?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                format!(
                    "EtcdCertFile {} / EtcdKeyFile {}: {e}",
                    cert.display(),
                    key.display()
                )
            })?
        }
        (Some(_), None) => return Err("EtcdCertFile is set but EtcdKeyFile is not".into()),
        (None, Some(_)) => return Err("EtcdKeyFile is set but EtcdCertFile is not".into()),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Reads every certificate of a PEM file; at least one is required.
fn read_certs(param: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{param} {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{param} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{param} {}: no PEM certificate in the file",
            path.display()
        ));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_bad_files_are_named_in_the_error() {
        let e = client_config(&TlsFiles {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsFiles::default()
        })
        .unwrap_err();
        assert!(e.contains("EtcdCaFile /nonexistent/ca.pem"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = client_config(&TlsFiles {
            ca_file: Some(junk.clone()),
            ..TlsFiles::default()
        })
        .unwrap_err();
        assert!(e.contains("no PEM certificate"), "{e}");

        let e = client_config(&TlsFiles {
            ca_file: None,
            cert_file: Some(junk),
            key_file: None,
        });
        // Either the system bundle is missing, or the pairing is wrong;
        // both are errors.
        assert!(e.is_err());
    }
}
