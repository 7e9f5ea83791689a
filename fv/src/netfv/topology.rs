//! The standard FV topology: namespaces `shop` (env=prod) and `ops`
//! (env=infra) and four workloads on the node, each serving TCP 8080 and
//! 9090, plus [`Fv`], which ties a sandbox, its datastore and the daemon
//! starts of one test together.
//!
//! | workload | namespace | labels | iface | IPv4 / IPv6 | named ports |
//! |---|---|---|---|---|---|
//! | frontend | shop | app=frontend | califront0 | 10.65.0.10 / fd00:65::10 | http 8080 |
//! | backend | shop | app=backend | caliback0 | 10.65.0.11 / fd00:65::11 | api 8080 |
//! | db | shop | app=db | calidb0 | 10.65.0.12 / fd00:65::12 | |
//! | prom | ops | app=prom | caliprom0 | 10.65.0.13 / fd00:65::13 | |

use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::Result;

use super::daemon::{Backend, BpfFs, Daemon};
use super::datastore::{cluster_yaml, namespace_yaml, Datastore, Wep};
use super::sandbox::Sandbox;

/// Ports every standard workload serves.
pub const PORTS: [u16; 2] = [8080, 9090];

/// The four standard workload endpoints.
pub fn standard_weps() -> Vec<Wep> {
    vec![
        wep("frontend", "shop", "califront0", 10)
            .label("app", "frontend")
            .port("http", 8080),
        wep("backend", "shop", "caliback0", 11)
            .label("app", "backend")
            .port("api", 8080),
        wep("db", "shop", "calidb0", 12).label("app", "db"),
        wep("prom", "ops", "caliprom0", 13).label("app", "prom"),
    ]
}

/// A workload `name` in `ns` at 10.65.0.`host` / fd00:65::`host` (hex digits
/// of the decimal number, e.g. 10 -> fd00:65::10).
pub fn wep(name: &str, ns: &str, iface: &str, host: u8) -> Wep {
    Wep::new(name, ns, iface, ip4(host), ip6(host))
}

/// 10.65.0.`host`.
pub fn ip4(host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 65, 0, host)
}

/// fd00:65::`host` (written with the decimal digits).
pub fn ip6(host: u8) -> Ipv6Addr {
    let h = u16::from_str_radix(&host.to_string(), 16).unwrap_or(0);
    Ipv6Addr::new(0xfd00, 0x65, 0, 0, 0, 0, 0, h)
}

/// One test's world: sandbox, datastore, and the daemon while it runs.
pub struct Fv {
    // Field order is drop order: daemon, then workloads and node, then files.
    /// The running daemon; `None` before [`Fv::start`] and after [`Fv::stop`].
    pub daemon: Option<Daemon>,
    /// The node namespace and the workloads plugged into it.
    pub sandbox: Sandbox,
    /// The datastore directory the daemon reads.
    pub ds: Datastore,
    /// The backend [`Fv::start`] uses.
    pub backend: Backend,
    /// The workload endpoints plugged so far, in order.
    pub weps: Vec<Wep>,
    /// The bpffs of eBPF-mode daemons (mounted on the first BPF start, kept across
    /// restarts so pins survive them as on a node).
    pub bpffs: Option<BpfFs>,
}

impl Fv {
    /// The standard topology with `felix_config` extra FelixConfiguration
    /// fields; the daemon is not started yet.
    pub fn standard(backend: Backend, felix_config: &[(&str, &str)]) -> Result<Fv> {
        let ds = Datastore::new()?;
        ds.write("cluster", &cluster_yaml(felix_config))?;
        ds.write(
            "namespaces",
            &format!(
                "{}---\n{}",
                namespace_yaml("shop", &[("env", "prod")]),
                namespace_yaml("ops", &[("env", "infra")])
            ),
        )?;
        let mut fv = Fv {
            daemon: None,
            sandbox: Sandbox::new()?,
            ds,
            backend,
            weps: Vec::new(),
            bpffs: None,
        };
        for w in standard_weps() {
            fv.plug(w)?;
        }
        Ok(fv)
    }

    /// Plugs the workload into the sandbox and writes its endpoint as
    /// `wep-<pod>.yaml`.
    pub fn plug(&mut self, w: Wep) -> Result<()> {
        self.sandbox
            .add_workload(&w.pod, &w.iface, w.ip4, w.ip6, &PORTS)?;
        self.write_wep(&w)?;
        self.weps.push(w);
        Ok(())
    }

    /// Writes (or rewrites) a workload endpoint file.
    pub fn write_wep(&self, w: &Wep) -> Result<()> {
        self.ds.write(&format!("wep-{}", w.pod), &w.yaml())
    }

    /// Starts the daemon with this world's backend and waits for it to
    /// converge.
    pub fn start(&mut self, env: &[(&str, &str)]) -> Result<()> {
        self.start_with(self.backend, env)
    }

    /// Starts the daemon with `backend` and waits for convergence.
    pub fn start_with(&mut self, backend: Backend, env: &[(&str, &str)]) -> Result<()> {
        anyhow::ensure!(self.daemon.is_none(), "daemon already running");
        if backend == Backend::Bpf && self.bpffs.is_none() {
            let tag = self
                .ds
                .path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "fv".into());
            self.bpffs = Some(BpfFs::new(&tag)?);
        }
        let mut d = match &self.bpffs {
            Some(fs) => Daemon::start_with_bpffs(
                &self.sandbox.node,
                &self.ds.path(),
                self.ds.scratch(),
                backend,
                env,
                fs.path(),
            )?,
            None => Daemon::start(
                &self.sandbox.node,
                &self.ds.path(),
                self.ds.scratch(),
                backend,
                env,
            )?,
        };
        d.wait_converged(0)?;
        let st = d.status().unwrap_or_default();
        anyhow::ensure!(
            crate::netfv::daemon::dataplane_name(&st) == backend.status_name(),
            "daemon reports dataplane {} instead of {}",
            st["dataplane"],
            backend.status_name()
        );
        self.daemon = Some(d);
        Ok(())
    }

    /// The running daemon.
    pub fn d(&mut self) -> Result<&mut Daemon> {
        self.daemon
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("daemon not running"))
    }

    /// Stops the daemon with SIGTERM (clean exit required).
    pub fn stop(&mut self) -> Result<()> {
        match self.daemon.take() {
            Some(d) => d.stop(),
            None => Ok(()),
        }
    }

    /// Writes `<name>.yaml` and waits until the daemon applied it (an apply
    /// after the current one that left everything clean).
    pub fn apply(&mut self, name: &str, yaml: &str) -> Result<()> {
        let before = self.d()?.applies();
        self.ds.write(name, yaml)?;
        self.d()?.wait_converged(before)?;
        Ok(())
    }
}
