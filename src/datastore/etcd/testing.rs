//! A throwaway etcd server for tests and benchmarks.
//!
//! [`EtcdTestServer::start`] runs the system `etcd` binary (Debian's
//! `etcd-server`; `.ci/setup` installs it) as a single member on free
//! loopback ports with a temporary data directory, waits until it answers,
//! and kills it when dropped.  It can be stopped and started again on the
//! same ports and data (to test reconnection), or started on other ports
//! (so that writes can be made while a syncer cannot reach it).
//!
//! [`EtcdTestServer::start_tls`] serves `https://` with the given
//! certificate and requires client certificates signed by the given CA
//! (`--client-cert-auth`); the harness's own client uses
//! [`ServerTls::client`].

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::client::EtcdClient;
use super::tls::TlsFiles;

/// How long to wait for a started etcd to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A running (or stopped) throwaway etcd; see the module docs.
pub struct EtcdTestServer {
    data: tempdir::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    tls: Option<ServerTls>,
}

/// TLS settings of a test server (PEM files).
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// The server's certificate (must name 127.0.0.1 and, because etcd's
    /// gateway dials the server with it, allow client auth too).
    pub cert_file: std::path::PathBuf,
    /// The server certificate's private key.
    pub key_file: std::path::PathBuf,
    /// CA that client certificates must be signed by.
    pub client_ca_file: std::path::PathBuf,
    /// What the harness's own client uses.
    pub client: TlsFiles,
}

/// Why the server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TestServerError {
    #[error("etcd binary not found (install Debian's etcd-server): {0}")]
    /// The `etcd` binary is not installed.
    NotInstalled(std::io::Error),
    #[error("etcd test server: {0}")]
    /// Creating the data directory, finding free ports or spawning etcd failed.
    Io(#[from] std::io::Error),
    #[error("etcd did not become ready within {0:?}")]
    /// etcd did not answer within this time.
    NotReady(Duration),
}

impl EtcdTestServer {
    /// Starts etcd on free loopback ports.
    pub fn start() -> Result<EtcdTestServer, TestServerError> {
        EtcdTestServer::start_with(None)
    }

    /// Starts etcd serving `https://` with client-certificate auth.
    pub fn start_tls(tls: ServerTls) -> Result<EtcdTestServer, TestServerError> {
        EtcdTestServer::start_with(Some(tls))
    }

    fn start_with(tls: Option<ServerTls>) -> Result<EtcdTestServer, TestServerError> {
        let data = tempdir::TempDir::new()?;
        let mut server = EtcdTestServer {
            data,
            client_port: free_port()?,
            peer_port: free_port()?,
            child: None,
            tls,
        };
        server.restart()?;
        Ok(server)
    }

    /// The client URL (`http[s]://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        self.url_on(self.client_port)
    }

    fn url_on(&self, port: u16) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{port}")
    }

    /// A client for this server.
    ///
    /// # Panics
    ///
    /// If the TLS files given to [`EtcdTestServer::start_tls`] cannot be
    /// read (a broken test set-up).
    pub fn client(&self) -> EtcdClient {
        self.client_for(&self.url())
    }

    fn client_for(&self, url: &str) -> EtcdClient {
        let files = self
            .tls
            .as_ref()
            .map(|t| t.client.clone())
            .unwrap_or_default();
        match EtcdClient::with_tls(&[url.to_owned()], &files, None) {
            Ok(c) => c,
            Err(e) => panic!("etcd test client for {url}: {e}"),
        }
    }

    /// Kills etcd (SIGKILL, as a crash would) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// (Re)starts etcd on its usual ports with the same data and waits
    /// until it answers.
    pub fn restart(&mut self) -> Result<(), TestServerError> {
        self.stop();
        self.child = Some(self.spawn(self.client_port, self.peer_port)?);
        wait_ready(self.client_for(&self.url()))
    }

    /// Stops etcd, runs `f` with a client of the same data served on other
    /// ports (invisible to clients of [`EtcdTestServer::url`]), then starts
    /// it again on the usual ports.
    pub fn offline<T>(&mut self, f: impl FnOnce(&EtcdClient) -> T) -> Result<T, TestServerError> {
        self.stop();
        let (cp, pp) = (free_port()?, free_port()?);
        let mut child = self.spawn(cp, pp)?;
        let client = self.client_for(&self.url_on(cp));
        let result = wait_ready(client.clone_settings()).map(|()| f(&client));
        let _ = child.kill();
        let _ = child.wait();
        let value = result?;
        self.restart()?;
        Ok(value)
    }

    fn spawn(&self, client_port: u16, peer_port: u16) -> Result<Child, TestServerError> {
        let client = self.url_on(client_port);
        let peer = format!("http://127.0.0.1:{peer_port}");
        // The member's advertised peer URL is part of its stored identity,
        // so it stays the original one whichever ports we listen on.
        let advertised_peer = format!("http://127.0.0.1:{}", self.peer_port);
        let data_dir = self.data.path().join("data");
        let mut cmd = Command::new("etcd");
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&tls.cert_file)
                .arg("--key-file")
                .arg(&tls.key_file)
                .arg("--trusted-ca-file")
                .arg(&tls.client_ca_file)
                .arg("--client-cert-auth");
        }
        cmd.arg("--name")
            .arg("felix-test")
            .arg("--data-dir")
            .arg(&data_dir)
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&advertised_peer)
            .arg("--initial-cluster")
            .arg(format!("felix-test={advertised_peer}"))
            .arg("--logger")
            .arg("zap")
            .arg("--log-outputs")
            .arg(self.data.path().join("etcd.log"))
            .arg("--log-level")
            .arg("error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    TestServerError::NotInstalled(e)
                } else {
                    TestServerError::Io(e)
                }
            })
    }

    /// The process id of the running etcd (for CPU accounting).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The data directory (for inspection).
    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }
}

impl Drop for EtcdTestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_ready(client: EtcdClient) -> Result<(), TestServerError> {
    let client = client.with_request_timeout(Duration::from_secs(2));
    let deadline = felix_actors::clock::real_now() + READY_TIMEOUT;
    loop {
        if client.current_revision().is_ok() {
            return Ok(());
        }
        if felix_actors::clock::real_now() >= deadline {
            return Err(TestServerError::NotReady(READY_TIMEOUT));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A temporary directory removed on drop (kept tiny to avoid a
/// non-dev dependency).
mod tempdir {
    use std::path::{Path, PathBuf};

    pub(super) struct TempDir(PathBuf);

    impl TempDir {
        pub(super) fn new() -> std::io::Result<TempDir> {
            let base = std::env::temp_dir();
            for attempt in 0..100u32 {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                let path = base.join(format!(
                    "felix-etcd-{}-{nanos}-{attempt}",
                    std::process::id()
                ));
                match std::fs::create_dir(&path) {
                    Ok(()) => return Ok(TempDir(path)),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(std::io::Error::other("cannot create a temporary directory"))
        }

        pub(super) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
