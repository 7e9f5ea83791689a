//! A scripted command runner for unit tests: records every request and answers
//! from a caller-supplied responder, with "fail the next N calls" injection.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{CommandOutput, CommandRequest, CommandRunner};

/// The scripted answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeResponse {
    /// Exit 0 with this stdout.
    Ok(String),
    /// Exit with this non-zero status and stderr.
    Fail(i32, String),
}

type Responder = dyn Fn(&CommandRequest) -> FakeResponse + Send + Sync;

/// A [`CommandRunner`] that never runs anything.
pub struct ScriptedCommands {
    responder: Box<Responder>,
    calls: Mutex<Vec<CommandRequest>>,
    fail_next: Mutex<(usize, Option<String>)>,
    programs: Mutex<Option<BTreeSet<String>>>,
    paths: Mutex<BTreeSet<String>>,
    netlink: Arc<crate::dataplane::netlink::fake::FakeNetlink>,
}

impl std::fmt::Debug for ScriptedCommands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedCommands")
            .field("calls", &self.calls.lock().len())
            .finish_non_exhaustive()
    }
}

impl ScriptedCommands {
    /// A seam answering every request with `responder`.
    pub fn new(
        responder: impl Fn(&CommandRequest) -> FakeResponse + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(ScriptedCommands {
            responder: Box::new(responder),
            calls: Mutex::new(Vec::new()),
            fail_next: Mutex::new((0, None)),
            programs: Mutex::new(None),
            paths: Mutex::new(BTreeSet::new()),
            netlink: Arc::default(),
        })
    }

    /// The in-memory routing kernel behind this runner's netlink access.
    pub fn netlink_fake(&self) -> &Arc<crate::dataplane::netlink::fake::FakeNetlink> {
        &self.netlink
    }

    /// Makes the next `n` calls (optionally only those to `program`) exit
    /// with status 1 and stderr "injected failure".
    pub fn fail_next(&self, n: usize, program: Option<&str>) {
        *self.fail_next.lock() = (n, program.map(str::to_string));
    }

    /// Restricts which programs exist (default: all do).
    pub fn set_programs(&self, programs: &[&str]) {
        *self.programs.lock() = Some(programs.iter().map(|s| s.to_string()).collect());
    }

    /// Declares host paths that exist (default: none).
    pub fn set_paths(&self, paths: &[&str]) {
        *self.paths.lock() = paths.iter().map(|s| s.to_string()).collect();
    }

    /// Every request so far, in order.
    pub fn calls(&self) -> Vec<CommandRequest> {
        self.calls.lock().clone()
    }

    /// Number of requests to `program` so far.
    pub fn count(&self, program: &str) -> usize {
        self.calls
            .lock()
            .iter()
            .filter(|c| c.program == program)
            .count()
    }

    /// Forgets recorded calls.
    pub fn clear_calls(&self) {
        self.calls.lock().clear();
    }
}

impl CommandRunner for ScriptedCommands {
    fn netlink(&self) -> Arc<dyn crate::dataplane::netlink::NetlinkProvider> {
        Arc::new(self.netlink.clone())
    }

    fn exec(&self, req: &CommandRequest) -> std::io::Result<CommandOutput> {
        self.calls.lock().push(req.clone());
        {
            let mut f = self.fail_next.lock();
            let applies = f.1.as_deref().is_none_or(|p| p == req.program);
            if f.0 > 0 && applies {
                f.0 -= 1;
                return Ok(CommandOutput {
                    status: Some(1),
                    stdout: String::new(),
                    stderr: "injected failure".into(),
                });
            }
        }
        Ok(match (self.responder)(req) {
            FakeResponse::Ok(stdout) => CommandOutput {
                status: Some(0),
                stdout,
                stderr: String::new(),
            },
            FakeResponse::Fail(code, stderr) => CommandOutput {
                status: Some(code),
                stdout: String::new(),
                stderr,
            },
        })
    }

    fn program_exists(&self, program: &str) -> bool {
        self.programs
            .lock()
            .as_ref()
            .is_none_or(|p| p.contains(program))
    }

    fn path_exists(&self, path: &str) -> bool {
        self.paths.lock().contains(path)
    }
}
