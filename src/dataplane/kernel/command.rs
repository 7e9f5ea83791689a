//! Command runners (run a program with arguments and optional stdin, capturing its output,
//! optionally inside a network namespace) and [`Commands`], a driver's handle that runs each
//! command as one seam operation.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use felix_actors::ActorSeam;

use super::nftlib::{script_request, NftRun, NftWorker};
use super::restore_session::{RestoreSessions, SessionRun};
use super::KernelError;

/// One program invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRequest {
    /// Program name (looked up on `PATH`) or path.
    pub program: String,
    /// Arguments, not including the program.
    pub args: Vec<String>,
    /// Bytes fed to standard input; `None` means stdin is closed.
    pub stdin: Option<Vec<u8>>,
}

impl CommandRequest {
    /// The command line, space separated, for errors and logs.
    pub fn display(&self) -> String {
        let mut s = self.program.clone();
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// What a finished program produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOutput {
    /// Exit code; `None` if the process was killed by a signal.
    pub status: Option<i32>,
    /// Captured standard output.
    pub stdout: String,
    /// Captured standard error.
    pub stderr: String,
}

impl CommandOutput {
    /// True if the program exited with status 0.
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

/// Runs programs, behind the seam. Implementations: [`SystemCommands`] (real processes) and
/// [`super::ScriptedCommands`] (tests).
pub trait CommandRunner: Send + Sync {
    /// Runs the program to completion. Returns `Err` only if it could not be
    /// started; a non-zero exit is reported in [`CommandOutput::status`].
    fn exec(&self, req: &CommandRequest) -> std::io::Result<CommandOutput>;
    /// True if `program` can be found (on `PATH` or as a path).
    fn program_exists(&self, program: &str) -> bool;
    /// True if `path` exists on the host file system (used for probes such
    /// as `/proc/net/ip_tables_names` that must not autoload modules).
    fn path_exists(&self, path: &str) -> bool {
        std::path::Path::new(path).exists()
    }
    /// The rtnetlink access of the same kernel (network namespace) the commands run in; none
    /// by default (a scripted runner without a netlink fake).
    fn netlink(&self) -> Arc<dyn crate::dataplane::netlink::NetlinkProvider> {
        Arc::new(crate::dataplane::netlink::NoNetlink)
    }
}

/// Runs real processes, optionally inside a named network namespace (by
/// prefixing `ip netns exec <ns>`).  `nft -f -` scripts are served in
/// process by libnftables when it can be loaded ([`super::nftlib`]); the
/// binary is the fallback.  Delta scripts for `iptables-nft-restore
/// --noflush` are written to a long-lived process
/// ([`super::restore_session`]); a fresh process is the fallback.
#[derive(Debug, Clone)]
pub struct SystemCommands {
    netns: Option<String>,
    nft_inprocess: bool,
    restore: Arc<RestoreSessions>,
    /// Started on the first script; `None` inside: unavailable, use the
    /// binary from then on.
    nft: Arc<OnceLock<Option<NftWorker>>>,
}

impl Default for SystemCommands {
    fn default() -> Self {
        SystemCommands {
            netns: None,
            nft_inprocess: true,
            restore: Arc::default(),
            nft: Arc::default(),
        }
    }
}

impl SystemCommands {
    /// Runs commands in the caller's network namespace.
    pub fn new() -> Self {
        SystemCommands::default()
    }

    /// Runs every command inside the named network namespace.
    pub fn in_netns(netns: impl Into<String>) -> Self {
        let netns = netns.into();
        SystemCommands {
            restore: Arc::new(RestoreSessions::new(Some(netns.clone()))),
            netns: Some(netns),
            ..SystemCommands::default()
        }
    }

    /// Never keeps a restore process between scripts (a fresh
    /// `iptables-nft-restore` for each).
    pub fn without_restore_sessions(self) -> Self {
        self.restore.switch_off();
        self
    }

    /// The long-lived restore processes (tests inspect them).
    #[cfg(test)]
    pub(crate) fn restore_sessions(&self) -> &RestoreSessions {
        &self.restore
    }

    /// True if delta restore scripts may be served by a long-lived process.
    pub fn restore_sessions_on(&self) -> bool {
        self.restore.is_on()
    }

    /// Never serves `nft` scripts in process (always runs the binary).
    pub fn without_inprocess_nft(mut self) -> Self {
        self.nft_inprocess = false;
        self
    }

    /// The namespace commands run in, if any.
    pub fn netns(&self) -> Option<&str> {
        self.netns.as_deref()
    }

    /// True if `nft -f -` scripts are served in process: enabled and the
    /// library loaded (starts the worker if it has not started yet).
    pub fn nft_inprocess_active(&self) -> bool {
        self.nft_worker().is_some()
    }

    fn nft_worker(&self) -> Option<&NftWorker> {
        if !self.nft_inprocess {
            return None;
        }
        self.nft
            .get_or_init(|| match NftWorker::start(self.netns.as_deref()) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::info!(error = %e, "nft scripts run through the nft binary");
                    None
                }
            })
            .as_ref()
    }

    fn exec_process(&self, req: &CommandRequest) -> std::io::Result<CommandOutput> {
        let mut cmd = command_in(self.netns.as_deref(), &req.program);
        cmd.args(&req.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if req.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = cmd.spawn()?;
        // Feed stdin from a separate thread so a program that writes a lot of
        // output before reading all its input cannot deadlock us.  The
        // thread borrows the request's bytes (a start-of-day script is tens
        // of MiB; no copy).
        let out = std::thread::scope(|scope| {
            if let (Some(mut pipe), Some(data)) = (child.stdin.take(), req.stdin.as_deref()) {
                scope.spawn(move || {
                    // A broken pipe means the program exited early; its exit
                    // status reports the real problem.
                    let _ = pipe.write_all(data);
                });
            }
            child.wait_with_output()
        })?;
        Ok(CommandOutput {
            status: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

impl CommandRunner for SystemCommands {
    fn exec(&self, req: &CommandRequest) -> std::io::Result<CommandOutput> {
        if let Some(script) = script_request(&req.program, &req.args, req.stdin.as_deref()) {
            if let Some(w) = self.nft_worker() {
                match w.run(script) {
                    NftRun::Ran(out) => return Ok(out),
                    NftRun::NoAnswer => {
                        return Err(std::io::Error::other(
                            "in-process nft worker stopped during the script",
                        ))
                    }
                    NftRun::NotPassable | NftRun::WorkerGone => {}
                }
            }
        }
        if let SessionRun::Ran(out) = self.restore.run(req) {
            return Ok(out);
        }
        self.exec_process(req)
    }

    fn program_exists(&self, program: &str) -> bool {
        program_on_path(program)
    }

    fn netlink(&self) -> Arc<dyn crate::dataplane::netlink::NetlinkProvider> {
        Arc::new(crate::dataplane::netlink::SystemNetlink::new(
            self.netns.clone(),
        ))
    }
}

/// A command for `program`, prefixed with `ip netns exec <ns>` when a
/// namespace is given.
pub(super) fn command_in(netns: Option<&str>, program: &str) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    }
}

/// True if `program` is a path to a file, or is found on `PATH` or in the
/// sbin directories (root's tools live there, not always on `PATH`).
pub(super) fn program_on_path(program: &str) -> bool {
    if program.contains('/') {
        return std::path::Path::new(program).is_file();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<std::path::PathBuf> = std::env::split_paths(&path).collect();
    for extra in ["/usr/sbin", "/sbin", "/usr/local/sbin"] {
        dirs.push(extra.into());
    }
    dirs.iter().any(|d| d.join(program).is_file())
}

/// A driver's command handle: every call is one operation of its [`ActorSeam`] (fault
/// injection, metrics, tracing span), run by its [`CommandRunner`].
#[derive(Clone)]
pub struct Commands {
    runner: Arc<dyn CommandRunner>,
    seam: ActorSeam,
}

impl std::fmt::Debug for Commands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commands")
            .field("actor", &self.seam.actor())
            .finish_non_exhaustive()
    }
}

impl Commands {
    /// A handle running commands on `runner` through `seam`.
    pub fn new(runner: Arc<dyn CommandRunner>, seam: ActorSeam) -> Self {
        Commands { runner, seam }
    }

    /// A handle for `actor` with a seam of its own (no armed faults, private metrics): for
    /// tests, benchmarks and one-off probes outside the actor runtime.
    pub fn standalone(runner: Arc<dyn CommandRunner>, actor: &str) -> Self {
        Self::new(runner, felix_actors::Seam::default().for_actor(actor))
    }

    /// The same runner and shared seam under another actor name.
    pub fn for_actor(&self, actor: &str) -> Self {
        Commands {
            runner: self.runner.clone(),
            seam: self.seam.renamed(actor),
        }
    }

    /// The actor name operations are reported under.
    pub fn actor(&self) -> &str {
        self.seam.actor()
    }

    /// The seam this handle runs through.
    pub fn seam(&self) -> &ActorSeam {
        &self.seam
    }

    /// This driver's rtnetlink handle: the runner's namespace, and the same seam (actor
    /// name, faults, metrics) as its commands.
    pub fn netlink(&self) -> crate::dataplane::netlink::Seamed {
        crate::dataplane::netlink::Seamed::new(self.runner.netlink(), self.seam.clone())
    }

    /// True if the program exists.
    pub fn program_exists(&self, program: &str) -> bool {
        self.runner.program_exists(program)
    }

    /// True if the host path exists.
    pub fn path_exists(&self, path: &str) -> bool {
        self.runner.path_exists(path)
    }

    /// Runs the program; a non-zero exit is an error naming the operation, command, status
    /// and the tool's stderr.
    pub fn run(
        &self,
        op: &str,
        program: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<CommandOutput, KernelError> {
        self.run_owned(op, program, args, stdin.map(<[u8]>::to_vec))
    }

    /// [`Commands::run`] taking the input by value (no copy of a large
    /// script).
    pub fn run_owned(
        &self,
        op: &str,
        program: &str,
        args: &[&str],
        stdin: Option<Vec<u8>>,
    ) -> Result<CommandOutput, KernelError> {
        let req = CommandRequest {
            program: program.to_string(),
            args: args.iter().map(|s| s.to_string()).collect(),
            stdin,
        };
        if let Some(out) = self.recorded_write(op, &req) {
            return Ok(out);
        }
        self.seam.op(op, || {
            let out = self.spawn(op, &req)?;
            if out.success() {
                Ok(out)
            } else {
                Err(KernelError::Failed {
                    op: op.to_string(),
                    command: req.display(),
                    status: out.status,
                    stderr: out.stderr.trim().to_string(),
                })
            }
        })
    }

    /// Runs the program and returns its output whatever its exit status (the seam still
    /// counts a non-zero exit as a failed operation).
    pub fn run_unchecked(
        &self,
        op: &str,
        req: &CommandRequest,
    ) -> Result<CommandOutput, KernelError> {
        if let Some(out) = self.recorded_write(op, req) {
            return Ok(out);
        }
        let res = self.seam.op(op, || {
            let out = self.spawn(op, req)?;
            if out.success() {
                Ok(out)
            } else {
                Err(Unchecked::Exited(out))
            }
        });
        match res {
            Ok(out) | Err(Unchecked::Exited(out)) => Ok(out),
            Err(Unchecked::Kernel(e)) => Err(e),
        }
    }

    /// On a read-back probe's seam: records a write instead of running it (answering success
    /// with no output). Reads run; their output is recorded by [`Commands::spawn`].
    fn recorded_write(&self, op: &str, req: &CommandRequest) -> Option<CommandOutput> {
        let rec = self.seam.recorder()?;
        if super::is_read_only(op) {
            return None;
        }
        let mut detail = req.display();
        if let Some(stdin) = &req.stdin {
            detail.push('\n');
            detail.push_str(&String::from_utf8_lossy(stdin));
        }
        rec.write(op, detail);
        Some(CommandOutput {
            status: Some(0),
            ..CommandOutput::default()
        })
    }

    fn spawn(&self, op: &str, req: &CommandRequest) -> Result<CommandOutput, KernelError> {
        let out = self.runner.exec(req).map_err(|source| KernelError::Spawn {
            op: op.to_string(),
            command: req.display(),
            source,
        })?;
        if let Some(rec) = self.seam.recorder() {
            rec.read(op, format!("{}\n{}", req.display(), out.stdout));
        }
        Ok(out)
    }
}

/// [`Commands::run_unchecked`]'s result inside the seam: a non-zero exit is a failed operation
/// for the seam's metrics, but an answer for the caller.
enum Unchecked {
    Exited(CommandOutput),
    Kernel(KernelError),
}

impl From<KernelError> for Unchecked {
    fn from(e: KernelError) -> Self {
        Unchecked::Kernel(e)
    }
}

impl From<felix_actors::Injected> for Unchecked {
    fn from(e: felix_actors::Injected) -> Self {
        Unchecked::Kernel(KernelError::Injected(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::kernel::{FakeResponse, ScriptedCommands};

    #[test]
    fn probe_writes_nothing_and_reads_for_real() {
        let fake = ScriptedCommands::new(|req| {
            if req.program == "iptables-save" {
                FakeResponse::Ok("*filter\n:cali-FORWARD - [0:0]\nCOMMIT\n".into())
            } else {
                FakeResponse::Ok(String::new())
            }
        });
        let (probe, rec) = ActorSeam::default().recording();
        let cmds = Commands::new(fake.clone(), probe);
        let out = cmds
            .run("iptables-save", "iptables-save", &["-t", "filter"], None)
            .expect("read");
        assert!(out.stdout.contains("cali-FORWARD"));
        let out = cmds
            .run(
                "iptables-restore",
                "iptables-restore",
                &["--noflush"],
                Some(b"*filter\n-F cali-FORWARD\nCOMMIT\n"),
            )
            .expect("recorded, answered as success");
        assert!(out.success());
        let programs: Vec<String> = fake.calls().into_iter().map(|c| c.program).collect();
        assert_eq!(
            programs,
            ["iptables-save"],
            "the write never reached the runner"
        );
        let got = rec.take();
        assert_eq!(got.actual.len(), 1);
        assert!(got.actual[0]
            .detail
            .starts_with("iptables-save -t filter\n*filter"));
        assert_eq!(got.changes.len(), 1);
        assert_eq!(got.changes[0].op, "iptables-restore");
        assert!(got.changes[0].detail.contains("-F cali-FORWARD"));
    }
}
