//! The actix actor hosting one driver.
//!
//! The actor's handlers only do cheap bookkeeping on its arbiter; the driver's reconcile work
//! runs on tokio's blocking pool (`spawn_blocking`), so a long or stalled kernel operation never
//! occupies a thread that serves other actors. A panic in that blocking work (or in the cheap
//! inline calls, which run under `catch_unwind`) is turned into [`DriverReply::Died`]; the
//! driver instance is then gone and the supervisor rebuilds the actor from the factory.

use std::sync::Arc;

use actix::prelude::*;

use crate::driver::{DriverError, DriverStep, ErasedDriver, ErasedFactory, FailureKind};
use crate::readback::{DriverReadBack, ReadBack};
use crate::seam::ActorSeam;
use crate::timings::ApplyTimings;

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

/// Asks the driver for its read-back (see [`crate::readback`]).
#[derive(Debug, Message)]
#[rtype(result = "DriverReadBack")]
pub(crate) struct ReadBackRequest;

pub(crate) struct DriverActor {
    name: Arc<str>,
    driver: Option<Box<dyn ErasedDriver>>,
    seam: ActorSeam,
    factory: ErasedFactory,
    timings: ApplyTimings,
}

impl DriverActor {
    /// The actor for a driver built by `factory` on `seam`; each reconcile step runs as seam
    /// operation [`DRIVER_APPLY_OP`] of `seam` (faultable, timed and counted as one). The
    /// factory also builds the read-back probes.
    pub(crate) fn new(
        name: &str,
        factory: ErasedFactory,
        seam: ActorSeam,
        timings: ApplyTimings,
    ) -> Self {
        Self {
            name: Arc::from(name),
            driver: Some(factory(&seam)),
            seam,
            factory,
            timings,
        }
    }
}

/// Runs a fresh instance from `factory` on a recording copy of `seam`: one apply (every step),
/// reads real, writes recorded.
fn probe(factory: &ErasedFactory, seam: &ActorSeam) -> DriverReadBack {
    let (recording_seam, rec) = seam.recording();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut fresh = factory(&recording_seam);
        for step in fresh.steps() {
            fresh.run(*step)?;
        }
        Ok::<(), DriverError>(())
    }));
    let error = match res {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(Failure::from(&e).message),
        Err(p) => Some(format!(
            "read-back probe panicked: {}",
            panic_text(p.as_ref())
        )),
    };
    DriverReadBack {
        read_back: rec.take(),
        error,
    }
}

/// The driver's own read-back, or the probe's.
fn read_back_of(
    drv: &mut Box<dyn ErasedDriver>,
    factory: &ErasedFactory,
    seam: &ActorSeam,
) -> DriverReadBack {
    let own = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drv.read_back()));
    match own {
        Ok(None) => probe(factory, seam),
        Ok(Some(Ok(read_back))) => DriverReadBack {
            read_back,
            error: None,
        },
        Ok(Some(Err(e))) => DriverReadBack {
            read_back: ReadBack::default(),
            error: Some(Failure::from(&e).message),
        },
        Err(p) => DriverReadBack {
            read_back: ReadBack::default(),
            error: Some(format!("read-back panicked: {}", panic_text(p.as_ref()))),
        },
    }
}

impl Handler<ReadBackRequest> for DriverActor {
    type Result = AtomicResponse<Self, DriverReadBack>;

    fn handle(&mut self, _req: ReadBackRequest, _ctx: &mut Context<Self>) -> Self::Result {
        let Some(mut drv) = self.driver.take() else {
            return AtomicResponse::new(Box::pin(fut::ready(DriverReadBack {
                read_back: ReadBack::default(),
                error: Some(format!("{}: driver instance lost earlier", self.name)),
            })));
        };
        let (factory, seam) = (Arc::clone(&self.factory), self.seam.clone());
        let span = tracing::info_span!("read_back", actor = %self.name);
        let work = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let rb = read_back_of(&mut drv, &factory, &seam);
            (drv, rb)
        });
        AtomicResponse::new(Box::pin(work.into_actor(self).map(
            |res, act, _ctx| match res {
                Ok((drv, rb)) => {
                    act.driver = Some(drv);
                    rb
                }
                Err(_) => DriverReadBack {
                    read_back: ReadBack::default(),
                    error: Some(format!(
                        "{}: read-back died; the driver is rebuilt",
                        act.name
                    )),
                },
            },
        )))
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
    type Result = AtomicResponse<Self, DriverReply>;

    fn handle(&mut self, req: DriverRequest, _ctx: &mut Context<Self>) -> Self::Result {
        let ready =
            |r: DriverReply| -> Self::Result { AtomicResponse::new(Box::pin(fut::ready(r))) };
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
        let (timings, name) = (self.timings.clone(), Arc::clone(&self.name));
        let work = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let t0 = crate::clock::real_now();
            let r = seam.op(DRIVER_APPLY_OP, || drv.run(step));
            timings.driver_call(&name, t0.elapsed());
            let dirty = drv.is_dirty(step);
            (drv, r, dirty)
        });
        AtomicResponse::new(Box::pin(work.into_actor(self).map(
            |res, act, _ctx| match res {
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
            },
        )))
    }
}
