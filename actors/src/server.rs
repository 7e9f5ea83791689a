//! Runs an HTTP server (see [`crate::http`]) on a dedicated thread with its own runtime.
//!
//! Invariant: the server thread never shares a runtime with the actor system, so a busy or
//! stalled arbiter cannot delay an admin or health answer.

use std::io;
use std::thread::JoinHandle;

use crate::http::{serve_connection, Handler};

/// A bound listening socket, handed to [`spawn_server`].
pub(crate) enum Listener {
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

/// A running server; dropping it (or [`ServerHandle::shutdown`]) stops accepting.
#[derive(Debug)]
pub struct ServerHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    local: String,
}

impl ServerHandle {
    /// Where the server listens (socket path or `host:port`).
    pub fn local_addr(&self) -> &str {
        &self.local
    }

    /// Stops the server and waits for its thread.
    pub fn shutdown(mut self) {
        self.stop_now();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn stop_now(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Starts serving `listener` with `handler` on a new thread named `name`.
pub(crate) fn spawn_server(
    name: &str,
    listener: Listener,
    local: String,
    handler: Handler,
) -> io::Result<ServerHandle> {
    match &listener {
        Listener::Unix(l) => l.set_nonblocking(true)?,
        Listener::Tcp(l) => l.set_nonblocking(true)?,
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let thread_name = name.to_string();
    let thread = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            rt.block_on(async move {
                let result: io::Result<()> = async {
                    match listener {
                        Listener::Unix(l) => {
                            let l = tokio::net::UnixListener::from_std(l)?;
                            loop {
                                tokio::select! {
                                    _ = &mut rx => return Ok(()),
                                    acc = l.accept() => match acc {
                                        Ok((s, _)) => {
                                            tokio::spawn(serve_connection(s, handler.clone()));
                                        }
                                        Err(e) => tracing::warn!(error = %e, "accept failed"),
                                    }
                                }
                            }
                        }
                        Listener::Tcp(l) => {
                            let l = tokio::net::TcpListener::from_std(l)?;
                            loop {
                                tokio::select! {
                                    _ = &mut rx => return Ok(()),
                                    acc = l.accept() => match acc {
                                        Ok((s, _)) => {
                                            tokio::spawn(serve_connection(s, handler.clone()));
                                        }
                                        Err(e) => tracing::warn!(error = %e, "accept failed"),
                                    }
                                }
                            }
                        }
                    }
                }
                .await;
                if let Err(e) = result {
                    tracing::error!(server = %thread_name, error = %e, "server stopped");
                }
            });
        })?;
    Ok(ServerHandle {
        stop: Some(tx),
        thread: Some(thread),
        local,
    })
}
