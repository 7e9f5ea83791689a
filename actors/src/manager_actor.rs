//! The actix actor hosting one manager.
//!
//! Every manager call runs under `catch_unwind`; a panic stops the actor (its memory is no
//! longer trusted) and, for request/response calls, is reported as
//! [`ManagerFailure::Panicked`]. A panic while handling a fire-and-forget `OnUpdate` just stops
//! the actor; the supervisor notices the closed mailbox before or during the next apply. Either
//! way the supervisor rebuilds the manager from its factory and replays its messages.
//!
//! Faults: target = the manager's name; ops `on_update` (panic), `resolve_batch` and
//! `complete_deferred_work` (error, panic, delay — the delay is an async sleep, it does not
//! block the arbiter).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::driver_actor::panic_text;
use crate::manager::{ApplyCtx, ApplyError, CrossManagerMsg, Manager};
use crate::seam::{FaultAction, FaultRegistry};

/// How a manager request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ManagerFailure {
    Error(ApplyError),
    Panicked(String),
}

#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct OnUpdate<M>(pub M);

pub(crate) struct Resolve<M> {
    _m: std::marker::PhantomData<fn() -> M>,
}

impl<M: 'static> Message for Resolve<M> {
    type Result = Result<Vec<CrossManagerMsg<M>>, ManagerFailure>;
}

impl<M> Resolve<M> {
    pub(crate) fn new() -> Self {
        Self {
            _m: std::marker::PhantomData,
        }
    }
}

#[derive(Message)]
#[rtype(result = "Result<(), ManagerFailure>")]
pub(crate) struct Cross<M> {
    pub from: String,
    pub msg: M,
}

#[derive(Message)]
#[rtype(result = "Result<(), ManagerFailure>")]
pub(crate) struct Complete {
    pub full_rewrite: bool,
    pub apply_seq: u64,
}

/// The operations of a manager actor a fault can target.
pub const MANAGER_OPS: &[&str] = &["on_update", "resolve_batch", "complete_deferred_work"];

pub(crate) struct ManagerActor<M> {
    name: Arc<str>,
    mgr: Box<dyn Manager<M>>,
    faults: FaultRegistry,
}

impl<M: Clone + Send + 'static> ManagerActor<M> {
    pub(crate) fn new(name: &str, mgr: Box<dyn Manager<M>>, faults: FaultRegistry) -> Self {
        Self {
            name: Arc::from(name),
            mgr,
            faults,
        }
    }

    /// Runs `f` on the manager, converting a panic (injected or real) into a failure and
    /// stopping the actor.
    fn guarded<R>(
        &mut self,
        ctx: &mut Context<Self>,
        op: &str,
        injected: Option<FaultAction>,
        f: impl FnOnce(&mut dyn Manager<M>) -> R,
    ) -> Result<R, ManagerFailure> {
        if injected == Some(FaultAction::Error) {
            return Err(ManagerFailure::Error(ApplyError::Injected {
                actor: self.name.to_string(),
                op: op.to_string(),
            }));
        }
        let name = Arc::clone(&self.name);
        let mgr = &mut self.mgr;
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            if injected == Some(FaultAction::Panic) {
                panic!("{name}: injected panic in {op}");
            }
            f(mgr.as_mut())
        }));
        r.map_err(|p| {
            let text = format!(
                "{}: panicked in {op}: {}",
                self.name,
                panic_text(p.as_ref())
            );
            tracing::error!(actor = %self.name, "{text}");
            ctx.stop();
            ManagerFailure::Panicked(text)
        })
    }

    fn fault(&self, op: &'static str) -> (Option<FaultAction>, Duration) {
        match self.faults.take(&self.name, op) {
            Some(f) if f.action == FaultAction::Delay => (None, f.delay),
            Some(f) => (Some(f.action), Duration::ZERO),
            None => (None, Duration::ZERO),
        }
    }
}

/// Waits for an injected delay.  No delay resolves at once: a zero-length
/// timer still waits for the runtime's next timer tick (about 1 ms), which
/// every phase of every apply would otherwise pay once per manager.
fn injected_delay(delay: Duration) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    if delay.is_zero() {
        Box::pin(std::future::ready(()))
    } else {
        Box::pin(actix_rt::time::sleep(delay))
    }
}

impl<M: Clone + Send + 'static> Actor for ManagerActor<M> {
    type Context = Context<Self>;
}

impl<M: Clone + Send + 'static> Handler<OnUpdate<M>> for ManagerActor<M> {
    type Result = ();

    fn handle(&mut self, msg: OnUpdate<M>, ctx: &mut Context<Self>) {
        let (injected, _) = self.fault("on_update");
        let injected = injected.filter(|a| *a == FaultAction::Panic);
        let _ = self.guarded(ctx, "on_update", injected, |m| m.on_update(&msg.0));
    }
}

impl<M: Clone + Send + 'static> Handler<Resolve<M>> for ManagerActor<M> {
    type Result = ResponseActFuture<Self, Result<Vec<CrossManagerMsg<M>>, ManagerFailure>>;

    fn handle(&mut self, _msg: Resolve<M>, _ctx: &mut Context<Self>) -> Self::Result {
        let (injected, delay) = self.fault("resolve_batch");
        Box::pin(
            injected_delay(delay)
                .into_actor(self)
                .map(move |_, act, ctx| {
                    act.guarded(ctx, "resolve_batch", injected, |m| m.resolve_batch())
                }),
        )
    }
}

impl<M: Clone + Send + 'static> Handler<Cross<M>> for ManagerActor<M> {
    type Result = Result<(), ManagerFailure>;

    fn handle(&mut self, msg: Cross<M>, ctx: &mut Context<Self>) -> Self::Result {
        self.guarded(ctx, "on_cross_manager", None, |m| {
            m.on_cross_manager(&msg.from, &msg.msg)
        })
    }
}

impl<M: Clone + Send + 'static> Handler<Complete> for ManagerActor<M> {
    type Result = ResponseActFuture<Self, Result<(), ManagerFailure>>;

    fn handle(&mut self, msg: Complete, _ctx: &mut Context<Self>) -> Self::Result {
        let (injected, delay) = self.fault("complete_deferred_work");
        Box::pin(
            injected_delay(delay)
                .into_actor(self)
                .map(move |_, act, ctx| {
                    let name = Arc::clone(&act.name);
                    let mut actx = ApplyCtx::new(&name, msg.full_rewrite, msg.apply_seq);
                    act.guarded(ctx, "complete_deferred_work", injected, |m| {
                        m.complete_deferred_work(&mut actx)
                    })?
                    .map_err(ManagerFailure::Error)
                }),
        )
    }
}

#[cfg(test)]
mod delay_tests {
    use super::*;
    use std::task::{Context as TaskContext, Poll, Waker};

    fn first_poll(mut f: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>) -> Poll<()> {
        f.as_mut().poll(&mut TaskContext::from_waker(Waker::noop()))
    }

    #[test]
    fn no_injected_delay_is_ready_at_once_and_a_delay_waits() {
        actix_rt::System::new().block_on(async {
            assert_eq!(first_poll(injected_delay(Duration::ZERO)), Poll::Ready(()));
            assert_eq!(
                first_poll(injected_delay(Duration::from_secs(60))),
                Poll::Pending
            );
        });
    }
}
