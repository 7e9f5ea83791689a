//! In-process nftables: `nft -f -` requests served by libnftables in one
//! long-lived worker thread instead of a new `nft` process each time.
//!
//! A delta transaction through the `nft` binary pays, besides the kernel's
//! own work: the process start and dynamic linking, and on exit the close of
//! its netlink socket, which waits for the kernel's deferred destruction of
//! any rule the transaction deleted.  A context that lives as long as the
//! seam pays neither.  The request is the same [`CommandRequest`] either
//! way, so hooks, fault injection and the admin socket see no difference.
//!
//! Invariants:
//! - Only `nft -f -` with standard input, of at most
//!   [`MAX_INPROCESS_SCRIPT`] bytes, is served here; any other `nft`
//!   invocation (listings, JSON output, a start-of-day script) runs the
//!   binary.  The context keeps what it parsed and fetched until its next
//!   run: for a delta that is the table's chain list, for a start-of-day
//!   script every rule and set element (hundreds of MiB at scale), which a
//!   process hands back to the system when it exits.
//! - One context per seam, owned by one thread.  The thread enters the
//!   seam's network namespace (`setns` affects only that thread) before it
//!   creates the context, so the context's netlink socket lives there.
//!   Requests are served one at a time, in the order they arrive.
//! - Calls into the library are serialised process-wide ([`LIB_LOCK`]):
//!   contexts of different seams (tests run many namespaces at once) never
//!   run library code concurrently.  libnftables 1.0.6 keeps mutable state
//!   outside its contexts: the ruleset generation its cache fetch checks
//!   (`nft_genid`), the ids of anonymous sets and chains (`set_id`,
//!   `chain_id`, bumped without atomics), an interface-name cache freed at
//!   the end of every run, and its one-time xtables and bignum set-up.  So
//!   the IPv4 and IPv6 scripts of one change run one after the other here
//!   (about 6 ms of cache fetch each in nftables mode at scale), not side by
//!   side.
//! - If the library cannot be loaded, the namespace cannot be entered or the
//!   worker stops answering, the caller runs the binary instead; a script is
//!   never lost and never run twice (a job whose reply is lost reports an
//!   error rather than being retried here).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::mpsc;
use std::thread;

use super::CommandOutput;

/// Why the in-process path is unavailable.
#[derive(Debug, thiserror::Error)]
pub enum NftLibError {
    /// `libnftables.so.1` could not be loaded or lacks a symbol.
    #[error("libnftables unavailable: {0}")]
    Library(String),
    /// The network namespace could not be entered.
    #[error("cannot enter network namespace {netns}: {source}")]
    Netns {
        /// The namespace name or path.
        netns: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// libnftables returned no context.
    #[error("nft_ctx_new failed")]
    Context,
    /// The worker thread could not be started or died while starting.
    #[error("nft worker thread: {0}")]
    Worker(String),
}

/// The library name looked up at run time (the `nft` binary links it).
pub const LIBRARY: &str = "libnftables.so.1";

/// Held around every call into libnftables (see the module invariants).
static LIB_LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

type CtxNew = unsafe extern "C" fn(u32) -> *mut c_void;
type CtxFree = unsafe extern "C" fn(*mut c_void);
type CtxBuffer = unsafe extern "C" fn(*mut c_void) -> c_int;
type CtxGetBuffer = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type RunBuffer = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;

/// The entry points we use, resolved once; valid while `_lib` is alive.
struct Lib {
    _lib: libloading::Library,
    ctx_new: CtxNew,
    ctx_free: CtxFree,
    buffer_output: CtxBuffer,
    buffer_error: CtxBuffer,
    get_output: CtxGetBuffer,
    get_error: CtxGetBuffer,
    run: RunBuffer,
}

impl Lib {
    fn load() -> Result<Lib, NftLibError> {
        let err = |e: libloading::Error| NftLibError::Library(e.to_string());
        // SAFETY: loading libnftables runs its initialisers, which only set
        // up its own state; the symbols below are resolved with the C
        // signatures of libnftables' public header.
        unsafe {
            let lib = libloading::Library::new(LIBRARY).map_err(err)?;
            let ctx_new = *lib.get::<CtxNew>(b"nft_ctx_new\0").map_err(err)?;
            let ctx_free = *lib.get::<CtxFree>(b"nft_ctx_free\0").map_err(err)?;
            let buffer_output = *lib
                .get::<CtxBuffer>(b"nft_ctx_buffer_output\0")
                .map_err(err)?;
            let buffer_error = *lib
                .get::<CtxBuffer>(b"nft_ctx_buffer_error\0")
                .map_err(err)?;
            let get_output = *lib
                .get::<CtxGetBuffer>(b"nft_ctx_get_output_buffer\0")
                .map_err(err)?;
            let get_error = *lib
                .get::<CtxGetBuffer>(b"nft_ctx_get_error_buffer\0")
                .map_err(err)?;
            let run = *lib
                .get::<RunBuffer>(b"nft_run_cmd_from_buffer\0")
                .map_err(err)?;
            Ok(Lib {
                _lib: lib,
                ctx_new,
                ctx_free,
                buffer_output,
                buffer_error,
                get_output,
                get_error,
                run,
            })
        }
    }
}

/// A context, only ever touched by the worker thread that made it.
struct Ctx<'a> {
    lib: &'a Lib,
    ptr: *mut c_void,
}

impl<'a> Ctx<'a> {
    fn new(lib: &'a Lib) -> Result<Ctx<'a>, NftLibError> {
        let _serial = LIB_LOCK.lock();
        // SAFETY: nft_ctx_new takes flags (0: defaults) and returns an owned
        // context or NULL; buffering output and errors makes the library
        // write into memory streams instead of our stdout/stderr.
        unsafe {
            let ptr = (lib.ctx_new)(0);
            if ptr.is_null() {
                return Err(NftLibError::Context);
            }
            if (lib.buffer_output)(ptr) != 0 || (lib.buffer_error)(ptr) != 0 {
                (lib.ctx_free)(ptr);
                return Err(NftLibError::Context);
            }
            Ok(Ctx { lib, ptr })
        }
    }

    fn buffer(&self, get: CtxGetBuffer) -> String {
        // SAFETY: the library returns a NUL-terminated buffer it owns, valid
        // until the next call on this context; it is copied at once.  Each
        // read rewinds the buffer, so one run's output never leaks into the
        // next.
        unsafe {
            let p = get(self.ptr);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }

    fn run(&self, script: &CStr) -> CommandOutput {
        let _serial = LIB_LOCK.lock();
        // SAFETY: `script` is NUL-terminated and outlives the call; the
        // context is valid and used by this thread only.
        let rc = unsafe { (self.lib.run)(self.ptr, script.as_ptr()) };
        CommandOutput {
            status: Some(if rc == 0 { 0 } else { 1 }),
            stdout: self.buffer(self.lib.get_output),
            stderr: self.buffer(self.lib.get_error),
        }
    }
}

impl Drop for Ctx<'_> {
    fn drop(&mut self) {
        let _serial = LIB_LOCK.lock();
        // SAFETY: the context came from nft_ctx_new and is freed once.
        unsafe { (self.lib.ctx_free)(self.ptr) }
    }
}

struct Job {
    script: CString,
    reply: mpsc::Sender<CommandOutput>,
}

/// Handle on the worker; dropping the last handle stops it.
pub struct NftWorker {
    jobs: mpsc::Sender<Job>,
}

impl std::fmt::Debug for NftWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NftWorker")
    }
}

/// What became of a script handed to the worker.
#[derive(Debug)]
pub enum NftRun {
    /// It ran; the output is what `nft -f -` would have reported.
    Ran(CommandOutput),
    /// The script cannot be passed to the library (it holds a NUL byte);
    /// nothing was sent to the kernel.
    NotPassable,
    /// The worker is gone and did not take the script.
    WorkerGone,
    /// The worker took the script but never answered: whether it reached
    /// the kernel is unknown.
    NoAnswer,
}

fn enter_netns(netns: &str) -> Result<(), NftLibError> {
    let path = if netns.starts_with('/') {
        netns.to_string()
    } else {
        format!("/run/netns/{netns}")
    };
    let err = |source| NftLibError::Netns {
        netns: netns.to_string(),
        source,
    };
    let file = std::fs::File::open(&path).map_err(err)?;
    use std::os::fd::AsRawFd;
    // SAFETY: setns with an open namespace file descriptor; it changes the
    // namespace of the calling thread only.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    Ok(())
}

impl NftWorker {
    /// Starts a worker whose context lives in `netns` (a name under
    /// `/run/netns` or a path; `None`: the process's namespace).
    pub fn start(netns: Option<&str>) -> Result<NftWorker, NftLibError> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), NftLibError>>();
        let netns = netns.map(str::to_string);
        thread::Builder::new()
            .name("nft-inproc".into())
            .spawn(move || {
                let lib = match netns
                    .as_deref()
                    .map_or(Ok(()), enter_netns)
                    .and_then(|()| Lib::load())
                {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let ctx = match Ctx::new(&lib) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                for job in rx {
                    let out = ctx.run(&job.script);
                    let _ = job.reply.send(out);
                }
            })
            .map_err(|e| NftLibError::Worker(e.to_string()))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(NftWorker { jobs }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(NftLibError::Worker("exited while starting".into())),
        }
    }

    /// Runs one script as one `nft -f -` would.
    pub fn run(&self, script: &[u8]) -> NftRun {
        let Ok(script) = CString::new(script) else {
            return NftRun::NotPassable;
        };
        let (reply, answer) = mpsc::channel();
        if self.jobs.send(Job { script, reply }).is_err() {
            return NftRun::WorkerGone;
        }
        match answer.recv() {
            Ok(out) => NftRun::Ran(out),
            Err(_) => NftRun::NoAnswer,
        }
    }
}

/// Largest script served in process (see the module invariants).
pub const MAX_INPROCESS_SCRIPT: usize = 256 * 1024;

/// The script, if `program` and `args` are an `nft -f -` the worker can
/// serve.
pub fn script_request<'a>(
    program: &str,
    args: &[String],
    stdin: Option<&'a [u8]>,
) -> Option<&'a [u8]> {
    let nft_stdin = program == "nft" && args.len() == 2 && args[0] == "-f" && args[1] == "-";
    stdin.filter(|s| nft_stdin && s.len() <= MAX_INPROCESS_SCRIPT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::kernel::testns::TestNetns;
    use crate::dataplane::kernel::{CommandRequest, CommandRunner, SystemCommands};

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_nft_scripts_on_stdin_are_served_in_process() {
        let f = args(&["-f", "-"]);
        assert!(script_request("nft", &f, Some(b"list ruleset")).is_some());
        assert!(script_request("nft", &f, None).is_none());
        assert!(script_request("/usr/sbin/nft", &f, Some(b"")).is_none());
        assert!(script_request("iptables-restore", &f, Some(b"")).is_none());
        assert!(script_request("nft", &args(&["-f", "/tmp/x"]), Some(b"")).is_none());
        assert!(script_request("nft", &args(&["-j", "list", "ruleset"]), Some(b"")).is_none());
        assert!(script_request("nft", &args(&["list", "tables"]), None).is_none());
        let big = vec![b'#'; MAX_INPROCESS_SCRIPT + 1];
        assert!(script_request("nft", &f, Some(&big)).is_none());
        assert!(script_request("nft", &f, Some(&big[1..])).is_some());
    }

    /// The kernel tests' extra requirement: libnftables loads.
    fn library_loads() -> Result<(), String> {
        // SAFETY: as in `Lib::load`.
        let ok = unsafe { libloading::Library::new(LIBRARY).is_ok() };
        felix_netns::ensure(ok, &format!("{LIBRARY} (loadable)"))
    }

    fn script(sys: &SystemCommands, text: &str) -> CommandOutput {
        sys.exec(&CommandRequest {
            program: "nft".into(),
            args: args(&["-f", "-"]),
            stdin: Some(text.as_bytes().to_vec()),
        })
        .unwrap()
    }

    /// Scripts run in process land in the seam's namespace, report errors
    /// as `nft` does, and each output is that run's alone.
    #[test]
    fn kernel_inprocess_nft_runs_in_the_seams_namespace() {
        felix_netns::require!(netns["nft"], library_loads());
        let ns = TestNetns::create_tagged("nftlib");
        let sys = SystemCommands::in_netns(&ns.name);
        // Selection follows feature detection: the library, not a guess.
        assert!(sys.nft_inprocess_active());
        let table = format!("felixlibtest{}", std::process::id());
        let out = script(
            &sys,
            &format!("add table ip {table}\nadd chain ip {table} c\n"),
        );
        assert!(out.success(), "{out:?}");
        assert!(ns.sh("nft", &["list", "tables"]).contains(&table));
        let host = std::process::Command::new("nft")
            .args(["list", "tables"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&host.stdout).contains(&table),
            "the script must not reach the host namespace"
        );

        // Output is per run (the buffer is rewound between runs).
        let listing = |sys: &SystemCommands| script(sys, &format!("list chain ip {table} c\n"));
        let first = listing(&sys);
        let second = listing(&sys);
        assert!(
            first.success() && first.stdout.contains("chain c"),
            "{first:?}"
        );
        assert_eq!(first.stdout, second.stdout);

        // A failing script: non-zero status, nft's message, nothing applied
        // (the transaction is atomic).
        let bad = script(
            &sys,
            &format!("add chain ip {table} d\nadd rule ip {table} nosuch accept\n"),
        );
        assert_eq!(bad.status, Some(1));
        assert!(bad.stderr.contains("Error"), "{bad:?}");
        assert!(!ns
            .sh("nft", &["list", "table", "ip", &table])
            .contains("chain d"));
        assert!(script(&sys, "").success());

        // The binary gives the same answer for the same script.
        let proc = SystemCommands::in_netns(&ns.name).without_inprocess_nft();
        assert!(!proc.nft_inprocess_active());
        assert_eq!(listing(&proc).stdout, first.stdout);
    }

    /// Seams of two namespaces used from two threads at once: each
    /// namespace gets exactly its own scripts.
    #[test]
    fn kernel_inprocess_nft_workers_of_two_namespaces_stay_apart() {
        felix_netns::require!(netns["nft"], library_loads());
        let (a, b) = (
            TestNetns::create_tagged("nftlib-a"),
            TestNetns::create_tagged("nftlib-b"),
        );
        let run = |ns: &TestNetns, tag: &'static str| {
            let sys = SystemCommands::in_netns(&ns.name);
            let name = ns.name.clone();
            std::thread::spawn(move || {
                assert!(script(&sys, "add table ip felixpar\n").success(), "{name}");
                for i in 0..30 {
                    let out = script(&sys, &format!("add chain ip felixpar {tag}{i}\n"));
                    assert!(out.success(), "{name}: {out:?}");
                }
            })
        };
        let (ta, tb) = (run(&a, "a"), run(&b, "b"));
        ta.join().unwrap();
        tb.join().unwrap();
        for (ns, mine, other) in [(&a, "chain a", "chain b"), (&b, "chain b", "chain a")] {
            let listed = ns.sh("nft", &["list", "table", "ip", "felixpar"]);
            assert_eq!(listed.matches(mine).count(), 30, "{listed}");
            assert!(!listed.contains(other), "{listed}");
        }
    }

    #[test]
    fn worker_in_a_missing_namespace_is_a_typed_error() {
        match NftWorker::start(Some("felix-no-such-netns-for-test")) {
            Err(NftLibError::Netns { netns, .. }) => {
                assert_eq!(netns, "felix-no-such-netns-for-test")
            }
            other => panic!("expected a namespace error, got {other:?}"),
        }
    }
}
