//! The etcd datastore over TLS against a real etcd started with
//! `--cert-file/--key-file/--trusted-ca-file/--client-cert-auth`, with
//! certificates generated here (rcgen): the client, the syncer and
//! `felix datastore` work with the right files; a wrong CA or a missing
//! client certificate gives a clear error naming the endpoint, and the
//! syncer retries with backoff rather than spinning.  Skipped, with a
//! note, when the `etcd` binary is not installed (a failure under CI: see
//! `felix_netns::require!`).

mod etcd_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use etcd_support::Consumer;
use felix::datastore::etcd::testing::{EtcdTestServer, ServerTls};
use felix::datastore::etcd::{
    keys, EtcdClient, EtcdConfig, EtcdError, EtcdSyncer, EtcdSyncerConfig, TlsFiles,
};
use felix::model::{Key, SyncStatus, SyncerEvent};
use felix::resources::Kind;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

const FELIX: &str = env!("CARGO_BIN_EXE_felix");

struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn new_ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca { cert, key }
}

/// Writes a certificate signed by `ca` (and its key) to `dir/name.pem`,
/// `dir/name-key.pem`.
fn issue(
    ca: &Ca,
    dir: &Path,
    name: &str,
    sans: &[&str],
    usages: Vec<ExtendedKeyUsagePurpose>,
) -> (PathBuf, PathBuf) {
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = usages;
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
    let (c, k) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

struct Pki {
    _dir: tempfile::TempDir,
    ca_file: PathBuf,
    wrong_ca_file: PathBuf,
    client: TlsFiles,
    server: ServerTls,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("felix test CA");
    let wrong = new_ca("some other CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert.pem()).unwrap();
    let wrong_ca_file = dir.path().join("wrong-ca.pem");
    std::fs::write(&wrong_ca_file, wrong.cert.pem()).unwrap();
    // etcd's JSON gateway dials the server with the server's own
    // certificate, so it needs client auth too.
    let (server_cert, server_key) = issue(
        &ca,
        dir.path(),
        "server",
        &["127.0.0.1", "localhost"],
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    );
    let (client_cert, client_key) = issue(
        &ca,
        dir.path(),
        "felix",
        &[],
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    );
    let client = TlsFiles {
        ca_file: Some(ca_file.clone()),
        cert_file: Some(client_cert),
        key_file: Some(client_key),
    };
    Pki {
        ca_file: ca_file.clone(),
        wrong_ca_file,
        server: ServerTls {
            cert_file: server_cert,
            key_file: server_key,
            client_ca_file: ca_file,
            client: client.clone(),
        },
        client,
        _dir: dir,
    }
}

/// Starts etcd over TLS; the test has checked `etcd` with
/// `felix_netns::require!`.
fn start(pki: &Pki) -> EtcdTestServer {
    EtcdTestServer::start_tls(pki.server.clone()).unwrap_or_else(|e| panic!("{e}"))
}

fn gnp(name: &str, order: f64) -> (String, String) {
    let key = keys::resource_key(Kind::GlobalNetworkPolicy, None, name);
    let value = serde_json::json!({
        "kind": "GlobalNetworkPolicy", "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": name},
        "spec": {"order": order, "selector": "all()", "types": ["Ingress"],
                 "ingress": [{"action": "Allow"}]}
    });
    (key, value.to_string())
}

fn has_policy(c: &Consumer, name: &str) -> bool {
    c.state.keys().any(|k| match k {
        Key::Policy(p) => p.name == name,
        _ => false,
    })
}

#[test]
fn client_and_syncer_work_over_tls_with_client_certificates() {
    felix_netns::require!(tools["etcd"]);
    let pki = pki();
    let server = start(&pki);
    let url = server.url();
    assert!(url.starts_with("https://"), "{url}");
    let client = server.client();
    let (k, v) = gnp("over-tls", 1.0);
    client.put(k.as_bytes(), v.as_bytes()).unwrap();
    assert_eq!(
        client.get(k.as_bytes()).unwrap().unwrap().value,
        v.as_bytes()
    );
    // Range reads (gRPC over TLS with ALPN h2) answer what the JSON
    // gateway (HTTP/1.1 over TLS) answers.
    let prefix = b"/calico/";
    let end = felix::datastore::etcd::client::prefix_end(prefix);
    let grpc = client.range(prefix, &end, 0, 10).unwrap();
    let gateway = client.range_gateway(prefix, &end, 0, 10).unwrap();
    assert_eq!(grpc.kvs.len(), 1);
    assert_eq!(
        (grpc.revision, grpc.more, &grpc.kvs),
        (gateway.revision, gateway.more, &gateway.kvs)
    );

    let config = EtcdConfig {
        endpoints: vec![url.clone()],
        ca_file: pki.client.ca_file.clone(),
        cert_file: pki.client.cert_file.clone(),
        key_file: pki.client.key_file.clone(),
    };
    let (tx, rx) = mpsc::sync_channel(16);
    let syncer = EtcdSyncer::start(EtcdSyncerConfig::new(config), tx).unwrap();
    let mut c = Consumer::new(rx);
    assert!(c.wait_until(|c| c.statuses.contains(&SyncStatus::InSync)));
    assert!(has_policy(&c, "over-tls"));
    // Live changes arrive over the TLS watch stream.
    let (k2, v2) = gnp("live-over-tls", 2.0);
    client.put(k2.as_bytes(), v2.as_bytes()).unwrap();
    assert!(c.wait_until(|c| has_policy(c, "live-over-tls")));
    client.delete(k.as_bytes()).unwrap();
    assert!(c.wait_until(|c| !has_policy(c, "over-tls")));
    assert_eq!(c.redundant, 0);
    syncer.stop();
}

#[test]
fn wrong_ca_or_missing_client_cert_is_a_clear_error_naming_the_endpoint() {
    felix_netns::require!(tools["etcd"]);
    let pki = pki();
    let server = start(&pki);
    let url = server.url();

    // A CA that did not sign the server's certificate.
    let wrong = TlsFiles {
        ca_file: Some(pki.wrong_ca_file.clone()),
        ..pki.client.clone()
    };
    let client = EtcdClient::with_tls(std::slice::from_ref(&url), &wrong, None).unwrap();
    match client.current_revision() {
        Err(EtcdError::Tls(m)) => {
            eprintln!("error: {m}");
            assert!(m.contains(&url), "{m}");
            assert!(m.contains("EtcdCaFile"), "{m}");
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }

    // The right CA but no client certificate: etcd refuses us.
    let anonymous = TlsFiles {
        ca_file: Some(pki.ca_file.clone()),
        ..TlsFiles::default()
    };
    let client = EtcdClient::with_tls(std::slice::from_ref(&url), &anonymous, None).unwrap();
    match client.current_revision() {
        Err(EtcdError::Tls(m)) => {
            eprintln!("error: {m}");
            assert!(m.contains(&url), "{m}");
            assert!(m.contains("client certificate"), "{m}");
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }

    // The syncer keeps retrying with backoff (50 ms doubling to 1 s):
    // a handful of attempts in 3 s, never in sync, no busy loop.
    let config = EtcdConfig {
        endpoints: vec![url.clone()],
        ca_file: wrong.ca_file.clone(),
        cert_file: wrong.cert_file.clone(),
        key_file: wrong.key_file.clone(),
    };
    let (tx, rx) = mpsc::sync_channel(16);
    let syncer = EtcdSyncer::start(EtcdSyncerConfig::new(config), tx).unwrap();
    let t = felix_actors::clock::real_now();
    let mut statuses = Vec::new();
    while t.elapsed() < Duration::from_secs(3) {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(SyncerEvent::Status(s)) => statuses.push(s),
            Ok(SyncerEvent::Updates(u)) => panic!("updates without a trusted server: {u:?}"),
            Err(_) => {}
        }
    }
    let failures = syncer.stats().failures;
    syncer.stop();
    assert_eq!(statuses, vec![SyncStatus::WaitForDatastore]);
    assert!(
        (2..=12).contains(&failures),
        "{failures} failed attempts in 3 s"
    );

    // felix datastore: exit 1 with a message naming the endpoint.
    let out = Command::new(FELIX)
        .args(["datastore", "--endpoints", &url, "--ca-cert-file"])
        .arg(&pki.wrong_ca_file)
        .arg("--cert-file")
        .arg(pki.client.cert_file.as_ref().unwrap())
        .arg("--key-file")
        .arg(pki.client.key_file.as_ref().unwrap())
        .args(["get", "gnp"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&url), "{stderr}");
}

#[test]
fn felix_datastore_cli_applies_and_gets_over_tls() {
    felix_netns::require!(tools["etcd"]);
    let pki = pki();
    let server = start(&pki);
    let ds = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/datastore");
    let felix = |args: &[&str]| {
        Command::new(FELIX)
            .arg("datastore")
            .args(args)
            .env("ETCD_ENDPOINTS", server.url())
            .env("ETCD_CA_CERT_FILE", &pki.ca_file)
            .env("ETCD_CERT_FILE", pki.client.cert_file.as_ref().unwrap())
            .env("ETCD_KEY_FILE", pki.client.key_file.as_ref().unwrap())
            .output()
            .unwrap()
    };
    let out = felix(&["apply", "-f", ds.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = felix(&["get", "GlobalNetworkPolicy", "-o", "json"]);
    assert!(out.status.success());
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!list["items"].as_array().unwrap().is_empty(), "{list}");
    // Unreadable files are bad input (exit 2) naming the parameter.
    let out = Command::new(FELIX)
        .args(["datastore", "--endpoints", &server.url()])
        .args(["--ca-cert-file", "/nonexistent/ca.pem", "get", "gnp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("EtcdCaFile /nonexistent/ca.pem"));
}
