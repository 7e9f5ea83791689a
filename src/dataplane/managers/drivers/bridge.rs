//! Bridges the dataplane drivers' command seam to the actor runtime's kernel
//! seam, so every command a driver runs is one `ActorSeam::op` (fault
//! injection, per-operation metrics, tracing span).
//!
//! [`SeamBridge`] is both the [`OpHook`] and the [`CommandSeam`] of a
//! driver's [`Commands`]: `Commands` calls the hook's `before` with the
//! operation name and then `exec` on the same thread, so the bridge carries
//! the name across in a thread-local and runs the real command inside
//! `ActorSeam::op`. The actor seam of the apply in progress is installed
//! with [`SeamBridge::install`] at the start of every driver call. A
//! command run with no seam installed (never the case inside a driver
//! apply) runs directly.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use felix_actors::{ActorSeam, SeamError};
use parking_lot::Mutex;

use crate::dataplane::kernel::{
    CommandOutput, CommandRequest, CommandSeam, Commands, KernelError, OpHook,
};

thread_local! {
    static PENDING_OP: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A command that ran and exited non-zero, carried through the seam as an
/// error so the seam's metrics count it as failed.
#[derive(Debug, thiserror::Error)]
#[error("command exited with status {:?}", .0.status)]
struct ExitFailure(CommandOutput);

/// See the module docs.
pub struct SeamBridge {
    inner: Arc<dyn CommandSeam>,
    current: Mutex<Option<ActorSeam>>,
}

impl std::fmt::Debug for SeamBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeamBridge").finish_non_exhaustive()
    }
}

impl SeamBridge {
    /// A bridge running commands on `inner`.
    pub fn new(inner: Arc<dyn CommandSeam>) -> Arc<Self> {
        Arc::new(SeamBridge {
            inner,
            current: Mutex::new(None),
        })
    }

    /// A command handle for `actor` whose every operation goes through this
    /// bridge.
    pub fn commands(self: &Arc<Self>, actor: &str) -> Commands {
        Commands::new(self.clone(), self.clone(), actor)
    }

    /// Installs the actor seam of the driver call in progress.
    pub fn install(&self, seam: &ActorSeam) {
        *self.current.lock() = Some(seam.clone());
    }
}

impl OpHook for SeamBridge {
    fn before(&self, _actor: &str, op: &str) -> Result<(), KernelError> {
        PENDING_OP.with(|p| *p.borrow_mut() = Some(op.to_string()));
        Ok(())
    }

    fn after(&self, _actor: &str, _op: &str, _ok: bool, _elapsed: Duration) {}
}

impl CommandSeam for SeamBridge {
    fn exec(&self, req: &CommandRequest) -> Result<CommandOutput, KernelError> {
        let op = PENDING_OP
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| req.program.clone());
        let seam = self.current.lock().clone();
        let Some(seam) = seam else {
            return self.inner.exec(req);
        };
        let res = seam.op(&op, || match self.inner.exec(req) {
            Ok(out) if out.success() => Ok(out),
            Ok(out) => Err(BridgeErr::Exit(ExitFailure(out))),
            Err(e) => Err(BridgeErr::Kernel(e)),
        });
        match res {
            Ok(out) => Ok(out),
            Err(SeamError::Injected { actor, op }) => Err(KernelError::Refused {
                actor,
                op,
                reason: "injected fault".into(),
            }),
            Err(SeamError::Kernel { source, .. }) => match source.downcast::<BridgeErr>() {
                Ok(b) => match *b {
                    BridgeErr::Exit(ExitFailure(out)) => Ok(out),
                    BridgeErr::Kernel(e) => Err(e),
                },
                Err(other) => Err(KernelError::Refused {
                    actor: seam.actor().to_string(),
                    op,
                    reason: other.to_string(),
                }),
            },
        }
    }

    fn program_exists(&self, program: &str) -> bool {
        self.inner.program_exists(program)
    }

    fn path_exists(&self, path: &str) -> bool {
        self.inner.path_exists(path)
    }
}

#[derive(Debug, thiserror::Error)]
enum BridgeErr {
    #[error(transparent)]
    Exit(ExitFailure),
    #[error(transparent)]
    Kernel(KernelError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::kernel::{FakeResponse, ScriptedCommands};
    use felix_actors::{Fault, FaultAction, FaultRegistry, KernelSeam, Metrics};

    #[test]
    fn commands_go_through_the_actor_seam_with_their_op_names() {
        let fake = ScriptedCommands::new(|r| {
            if r.program == "false" {
                FakeResponse::Fail(1, "no".into())
            } else {
                FakeResponse::Ok("hi".into())
            }
        });
        let faults = FaultRegistry::new();
        let metrics = Metrics::new();
        let seam = KernelSeam::new(faults.clone(), metrics.clone()).for_actor("driver/x");
        let bridge = SeamBridge::new(fake.clone());
        bridge.install(&seam);
        let cmds = bridge.commands("driver/x");
        assert_eq!(cmds.run("probe", "echo", &[], None).unwrap().stdout, "hi");
        // A non-zero exit is still reported as a failed command.
        let err = cmds.run("probe", "false", &[], None).unwrap_err();
        assert!(matches!(
            err,
            KernelError::Failed {
                status: Some(1),
                ..
            }
        ));
        faults
            .arm(Fault {
                target: "driver/x".into(),
                op: "probe".into(),
                action: FaultAction::Error,
                count: 1,
                delay_ms: 0,
            })
            .unwrap();
        let err = cmds.run("probe", "echo", &[], None).unwrap_err();
        assert!(matches!(err, KernelError::Refused { .. }));
        // The injected failure did not run the command.
        assert_eq!(fake.calls().len(), 2);
        let text = metrics.render_prometheus();
        assert!(text.contains("probe"), "{text}");
    }
}
