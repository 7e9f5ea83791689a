//! The actix actor hosting one driver.
//!
//! The actor's handlers only do cheap bookkeeping on its arbiter; the driver's reconcile work
//! runs on tokio's blocking pool (`spawn_blocking`), so a long or stalled kernel operation never
//! occupies a thread that serves other actors. A panic in that blocking work (or in the cheap
//! inline calls, which run under `catch_unwind`) is turned into [`DriverReply::Died`]; the
//! driver instance is then gone and the supervisor rebuilds the actor from the factory.

use std::sync::Arc;

use actix::prelude::*;

use crate::driver::{DriverError, DriverStep, ErasedDriver, FailureKind};
use crate::seam::ActorSeam;

/// One driver call from the supervisor.
#[derive(Debug, Message)]
#[rtype(result = "DriverReply")]
pub(crate) struct DriverRequest {
    pub step: DriverStep,
    /// Queue a full resync before deciding whether there is work.
    pub resync: bool,
    /// Only report dirtiness (the step is blocked by a failed dependency).
    pub probe_only: bool,
}

/// Result of one driver call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DriverReply {
    /// Nothing to do.
    Clean,
    /// Work ran successfully; `dirty` if the driver still reports pending work.
    Applied { dirty: bool },
    /// Work failed and stays pending.
    Failed {
        failure: Failure,
        needs_restart: bool,
    },
    /// Not run because a dependency failed.
    Skipped { dirty: bool },
    /// The driver panicked or its actor is gone.
    Died { reason: String },
}

/// A failed driver call, as the supervisor logs it and `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The seam operation that failed, when the driver named one.
    pub op: Option<String>,
    /// Its kind, when known.
    pub kind: Option<FailureKind>,
    /// The whole message, the kernel's or tool's own text included.
    pub message: String,
}

impl From<&DriverError> for Failure {
    fn from(e: &DriverError) -> Self {
        // The whole chain: the tool's stderr or the OS error is at the end of it.
        let mut message = e.to_string();
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            let text = c.to_string();
            if !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            cause = c.source();
        }
        Failure {
            op: e.operation().map(str::to_string),
            kind: e.kind(),
            message,
        }
    }
}

impl DriverReply {
    pub(crate) fn succeeded(&self) -> bool {
        matches!(self, DriverReply::Clean | DriverReply::Applied { .. })
    }

    pub(crate) fn dirty(&self) -> bool {
        match self {
            DriverReply::Clean => false,
            DriverReply::Applied { dirty } | DriverReply::Skipped { dirty } => *dirty,
            DriverReply::Failed { .. } | DriverReply::Died { .. } => true,
        }
    }
}

/// The fault operation covering a driver's whole reconcile step (every driver accepts it).
pub const DRIVER_APPLY_OP: &str = "apply";

pub(crate) struct DriverActor {
    name: Arc<str>,
    driver: Option<Box<dyn ErasedDriver>>,
    seam: ActorSeam,
}

impl DriverActor {
    /// The actor for `driver`; each reconcile step runs as seam operation
    /// [`DRIVER_APPLY_OP`] of `seam` (faultable, timed and counted as one).
    pub(crate) fn new(name: &str, driver: Box<dyn ErasedDriver>, seam: ActorSeam) -> Self {
        Self {
            name: Arc::from(name),
            driver: Some(driver),
            seam,
        }
    }
}

impl Actor for DriverActor {
    type Context = Context<Self>;
}

/// Text of a panic payload.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".to_string()
    }
}

impl Handler<DriverRequest> for DriverActor {
    type Result = ResponseActFuture<Self, DriverReply>;

    fn handle(&mut self, req: DriverRequest, _ctx: &mut Context<Self>) -> Self::Result {
        let ready = |r: DriverReply| -> Self::Result { Box::pin(fut::ready(r)) };
        let Some(mut drv) = self.driver.take() else {
            return ready(DriverReply::Died {
                reason: format!("{}: driver instance lost earlier", self.name),
            });
        };
        let pre = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if req.resync {
                drv.queue_resync();
            }
            drv.is_dirty(req.step)
        }));
        let dirty = match pre {
            Ok(d) => d,
            Err(p) => {
                return ready(DriverReply::Died {
                    reason: format!("{}: panicked: {}", self.name, panic_text(p.as_ref())),
                })
            }
        };
        if req.probe_only || !dirty {
            self.driver = Some(drv);
            return ready(if req.probe_only {
                DriverReply::Skipped { dirty }
            } else {
                DriverReply::Clean
            });
        }
        let step = req.step;
        let span = tracing::info_span!("driver", actor = %self.name);
        let seam = self.seam.clone();
        let work = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let r = seam.op(DRIVER_APPLY_OP, || drv.run(step));
            let dirty = drv.is_dirty(step);
            (drv, r, dirty)
        });
        Box::pin(work.into_actor(self).map(|res, act, _ctx| match res {
            Ok((drv, r, dirty)) => {
                act.driver = Some(drv);
                match r {
                    Ok(()) => DriverReply::Applied { dirty },
                    Err(e) => DriverReply::Failed {
                        failure: Failure::from(&e),
                        needs_restart: matches!(e, DriverError::NeedsRestart { .. }),
                    },
                }
            }
            Err(join) => {
                let reason = if join.is_panic() {
                    let p = join.into_panic();
                    format!("{}: panicked: {}", act.name, panic_text(p.as_ref()))
                } else {
                    format!("{}: blocking work cancelled", act.name)
                };
                DriverReply::Died { reason }
            }
        }))
    }
}
