//! Long-lived `iptables-nft-restore --noflush` processes: delta scripts are
//! written to a process that stays up, instead of a new process each time.
//!
//! A delta through a fresh `iptables-nft-restore` pays, besides the
//! kernel's commit: the process start and dynamic linking, and at exit the
//! close of its netlink socket, which waits for the kernel's deferred
//! destruction of every rule the transaction replaced or deleted (an RCU
//! grace period, 7-20 ms here).  A process that stays up pays neither.  The
//! request is the same [`CommandRequest`] either way, so hooks, fault
//! injection and the admin socket see no difference.
//!
//! How a script's end is known: the tool prints nothing on success, so each
//! script is followed by an acknowledgement block, `*<table>` / `-S OUTPUT`
//! / `COMMIT`, whose listing starts with `-P OUTPUT <policy>` (every
//! iptables table has a built-in `OUTPUT` chain, and iptables-nft lists it
//! even where the kernel has no such chain yet, creating nothing).  The tool
//! handles its input strictly in order, committing at each `COMMIT`, so
//! that header line is printed only after the script's commit returned.
//! The tool's standard output is made line-buffered with `stdbuf -oL` so
//! the header arrives when printed.  The rest of that listing (the chain's
//! `-A` lines) is skipped while waiting for the next header.
//!
//! Invariants:
//! - Only the nft backend's restore (`iptables-nft-restore`,
//!   `ip6tables-nft-restore`) with `--noflush`, a script of at most
//!   [`MAX_SESSION_SCRIPT`] bytes made of whole `*table` ... `COMMIT`
//!   blocks and without any listing command (`-S`, `-L`: its output would
//!   pass for the acknowledgement) is served here.
//!   The legacy backend never is: its restore holds the xtables lock for as
//!   long as it runs.
//! - The tool re-reads the kernel's state for each block (verified by
//!   `kernel_restore_session_sees_changes_made_by_others`), so a session
//!   holds no stale picture of the table between scripts.
//! - A script is written once and never retried here.  If the process
//!   fails, its error line number is translated back into the script's own
//!   numbering and the request reports the failure; the process has exited
//!   and the next script starts a new one.  If the script committed but the
//!   acknowledgement failed, the request succeeds and sessions are switched
//!   off for good (every later script runs a fresh process); so are they if
//!   the process ends without naming a failed line (it was killed, or could
//!   not start), after failing that request.
//! - One process per (program, arguments); requests to it are served one
//!   at a time.  Processes end when the seam is dropped.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::command::{command_in, program_on_path};
use super::{CommandOutput, CommandRequest};

/// Largest script written to a long-lived process; bigger ones (start of
/// day) run a fresh process, which returns its memory when it exits.
pub const MAX_SESSION_SCRIPT: usize = 256 * 1024;

/// The built-in chain listed to acknowledge a script (present in filter,
/// nat, mangle and raw).
const ACK_CHAIN: &str = "OUTPUT";

/// What serving a request came to.
#[derive(Debug)]
pub enum SessionRun {
    /// The script ran in a session; this is its outcome.
    Ran(CommandOutput),
    /// Not a request a session serves, or sessions are off: run a process.
    NotPassable,
}

/// One command line's session slot: empty until first used and after its
/// process ended.
type Slot = Arc<Mutex<Option<Session>>>;

/// The long-lived restore processes of one seam.
#[derive(Debug, Default)]
pub struct RestoreSessions {
    netns: Option<String>,
    off: AtomicBool,
    sessions: Mutex<HashMap<Vec<String>, Slot>>,
}

impl RestoreSessions {
    /// Sessions whose processes run in `netns` (or the caller's namespace).
    pub fn new(netns: Option<String>) -> Self {
        RestoreSessions {
            netns,
            ..RestoreSessions::default()
        }
    }

    /// Never serves anything (every script runs a fresh process).
    pub fn switch_off(&self) {
        self.off.store(true, Ordering::Relaxed);
    }

    /// True while sessions may serve requests.
    pub fn is_on(&self) -> bool {
        !self.off.load(Ordering::Relaxed)
    }

    /// Process ids of the running sessions (tests check reuse).
    #[cfg(test)]
    pub(crate) fn pids(&self) -> Vec<u32> {
        let Ok(map) = self.sessions.lock() else {
            return Vec::new();
        };
        map.values()
            .filter_map(|slot| slot.lock().ok()?.as_ref().map(|s| s.child.id()))
            .collect()
    }

    /// Serves `req` in its session if it is a request sessions serve.
    pub fn run(&self, req: &CommandRequest) -> SessionRun {
        if !self.is_on() {
            return SessionRun::NotPassable;
        }
        let Some((script, table)) = passable(req) else {
            return SessionRun::NotPassable;
        };
        let mut key = vec![req.program.clone()];
        key.extend(req.args.iter().cloned());
        let slot = match self.sessions.lock() {
            Ok(mut map) => map.entry(key).or_default().clone(),
            Err(_) => return SessionRun::NotPassable,
        };
        let Ok(mut guard) = slot.lock() else {
            return SessionRun::NotPassable;
        };
        if guard.is_none() {
            match Session::start(self.netns.as_deref(), req) {
                Ok(s) => *guard = Some(s),
                Err(e) => {
                    tracing::info!(error = %e, program = %req.program,
                        "restore sessions unavailable; running a process per script");
                    self.switch_off();
                    return SessionRun::NotPassable;
                }
            }
        }
        let Some(session) = guard.as_mut() else {
            return SessionRun::NotPassable;
        };
        match session.run(script, table) {
            Outcome::Done(out) => SessionRun::Ran(out),
            Outcome::Failed(out) => {
                *guard = None;
                SessionRun::Ran(out)
            }
            Outcome::Ended(out) => {
                tracing::warn!(stderr = %out.stderr.trim(),
                    "restore session ended without naming a failed line; running a process per script from now on");
                *guard = None;
                self.switch_off();
                SessionRun::Ran(out)
            }
            Outcome::AckFailed(out) => {
                tracing::warn!(stderr = %out.stderr.trim(),
                    "restore session acknowledgement failed; running a process per script from now on");
                *guard = None;
                self.switch_off();
                SessionRun::Ran(CommandOutput {
                    status: Some(0),
                    ..out
                })
            }
        }
    }
}

/// The script and the table of its last block, if a session may serve it.
fn passable(req: &CommandRequest) -> Option<(&[u8], &str)> {
    let name = req.program.rsplit('/').next().unwrap_or(&req.program);
    if name != "iptables-nft-restore" && name != "ip6tables-nft-restore" {
        return None;
    }
    if !req.args.iter().any(|a| a == "--noflush") {
        return None;
    }
    // A dry run must not reach a session that commits.
    if req.args.iter().any(|a| a == "--test") {
        return None;
    }
    let script = req.stdin.as_deref()?;
    if script.len() > MAX_SESSION_SCRIPT {
        return None;
    }
    let text = std::str::from_utf8(script).ok()?;
    let mut table = None;
    let mut open = false;
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(t) = line.strip_prefix('*') {
            if open {
                return None;
            }
            table = Some(t);
            open = true;
        } else if line == "COMMIT" {
            if !open {
                return None;
            }
            open = false;
        } else if is_listing(line) {
            // A listing in the script would print before the script's own
            // commit and be taken for the acknowledgement.
            return None;
        }
    }
    if open || !text.ends_with('\n') {
        return None;
    }
    let table = table?;
    let known = ["filter", "nat", "mangle", "raw"].contains(&table);
    known.then_some((script, table))
}

/// True for a listing command (`-S`, `-L`, with or without a chain).
fn is_listing(line: &str) -> bool {
    let cmd = line.split_whitespace().next().unwrap_or("");
    matches!(cmd, "-S" | "-L" | "--list" | "--list-rules")
}

enum Outcome {
    /// Committed and acknowledged.
    Done(CommandOutput),
    /// A line of the script failed: nothing of its block was applied.
    Failed(CommandOutput),
    /// The process ended without naming a line (killed, could not start):
    /// the request fails and sessions are switched off, so a fault of the
    /// session itself cannot fail every later script.
    Ended(CommandOutput),
    /// The script committed; only the acknowledgement failed.
    AckFailed(CommandOutput),
}

/// One running restore process.
#[derive(Debug)]
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<String>>,
    /// The thread draining stderr; joined once the process has ended, so
    /// everything it wrote has been collected.
    stderr_thread: Option<std::thread::JoinHandle<()>>,
    /// Lines written so far: the tool numbers lines across its whole input.
    lines: usize,
}

impl Session {
    fn start(netns: Option<&str>, req: &CommandRequest) -> std::io::Result<Session> {
        if !program_on_path("stdbuf") {
            return Err(std::io::Error::other("stdbuf is not installed"));
        }
        let mut cmd = command_in(netns, "stdbuf");
        cmd.arg("-oL");
        cmd.arg(&req.program)
            .args(&req.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let missing = || std::io::Error::other("child pipe missing");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let mut err_pipe = child.stderr.take().ok_or_else(missing)?;
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        // Drained continuously so the tool can never block on a full pipe;
        // the thread ends when the process does.
        let stderr_thread = std::thread::Builder::new()
            .name("restore-stderr".into())
            .spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = err_pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut s) = sink.lock() {
                        s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            })?;
        Ok(Session {
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            stderr,
            stderr_thread: Some(stderr_thread),
            lines: 0,
        })
    }

    fn take_stderr(&self) -> String {
        self.stderr
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }

    fn run(&mut self, script: &[u8], table: &str) -> Outcome {
        let before = self.lines;
        let script_lines = script.iter().filter(|&&b| b == b'\n').count();
        let ack = format!("*{table}\n-S {ACK_CHAIN}\nCOMMIT\n");
        let header = format!("-P {ACK_CHAIN} ");
        let wrote = self.stdin.as_mut().map(|pipe| {
            pipe.write_all(script)
                .and_then(|_| pipe.write_all(ack.as_bytes()))
                .and_then(|_| pipe.flush())
        });
        self.lines += script_lines + 3;
        if matches!(wrote, Some(Ok(()))) {
            let mut line = String::new();
            loop {
                line.clear();
                match self.stdout.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.starts_with(&header) => {
                        return Outcome::Done(CommandOutput {
                            status: Some(0),
                            stdout: String::new(),
                            stderr: self.take_stderr(),
                        });
                    }
                    Ok(_) => {}
                }
            }
        }
        // The process ended (or its pipe broke) before acknowledging.
        self.stdin = None;
        let status = self.child.wait().ok().and_then(|s| s.code());
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
        let stderr = self.take_stderr();
        match failed_line(&stderr) {
            Some(n) if n > before + script_lines => Outcome::AckFailed(CommandOutput {
                status,
                stdout: String::new(),
                stderr,
            }),
            Some(n) if n > before => Outcome::Failed(CommandOutput {
                status: status.filter(|&c| c != 0).or(Some(1)),
                stdout: String::new(),
                stderr: renumber(&stderr, n, n - before),
            }),
            _ => Outcome::Ended(CommandOutput {
                status: status.filter(|&c| c != 0).or(Some(1)),
                stdout: String::new(),
                stderr: if stderr.trim().is_empty() {
                    "restore session ended before acknowledging the script".into()
                } else {
                    stderr
                },
            }),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // End of input: the tool exits by itself; reap it so no zombie stays.
        self.stdin = None;
        let _ = self.child.wait();
    }
}

/// The input line number of the tool's `line N failed` message.
fn failed_line(stderr: &str) -> Option<usize> {
    let at = stderr.find("line ")?;
    let rest = &stderr[at + 5..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if !rest[digits.len()..].starts_with(" failed") {
        return None;
    }
    digits.parse().ok()
}

/// The message with the session's line number replaced by the script's.
fn renumber(stderr: &str, session_line: usize, script_line: usize) -> String {
    stderr.replacen(
        &format!("line {session_line} failed"),
        &format!("line {script_line} failed"),
        1,
    )
}

#[cfg(test)]
mod tests;
