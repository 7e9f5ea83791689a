//! The file datastore syncer (`--datastore file:DIR`).
//!
//! # API model
//!
//! [`FileSyncer::start`] spawns one OS thread (no async runtime needed)
//! that turns a directory of Calico v3 resource files into the
//! [`SyncerEvent`] stream of [`crate::model`]:
//!
//! 1. `Status(WaitForDatastore)`, held until `DIR` is a readable directory;
//! 2. `Status(ResyncInProgress)`, then the initial scan as `Updates`
//!    batches of at most [`FileSyncerConfig::batch_size`] updates;
//! 3. `Status(InSync)`, exactly once, after the whole initial scan has been
//!    sent;
//! 4. live changes as further `Updates` batches, forever.
//!
//! Only net per-key differences are sent: a change that leaves a key's
//! value as it was sends nothing for that key, and a rescan that finds
//! nothing new sends nothing at all.  `value: None` means absent; the
//! `update_type` is set for statistics only.
//!
//! # Design
//!
//! *Change detection.*  File-system notifications (`notify`, inotify on
//! Linux, recursive) are a latency optimisation; correctness rests on the
//! periodic full rescan ([`FileSyncerConfig::rescan_interval`], default
//! [`DEFAULT_RESCAN_INTERVAL`] = 30 s), which catches anything a lost or
//! overflowed notification missed.  Notifications are debounced on the
//! leading edge ([`Debounce`]): an isolated change whose writes are complete
//! (the file was closed after writing, renamed into place or removed) is
//! handled at once; complete changes that follow within
//! [`FileSyncerConfig::debounce`] (default 50 ms) of a handling are
//! handled together when that period ends (at most one handling per
//! period, however fast a writer goes), and a write still open waits for its
//! close or a quiet period, at most ten times that.  A path naming a datastore file is re-read;
//! anything else that is (or was) a directory triggers a full rescan, so
//! directory renames and Kubernetes-style `..data` symlink swaps are seen.
//! Editor and `kubectl` style atomic replacement (write a temporary file,
//! rename it over the original) is just "the original changed".
//!
//! *Cheap rescans.*  A rescan lists the tree and compares each file's
//! metadata (device, inode, size, mtime, ctime) with what was last read;
//! only files that differ are read, and only files whose content hash
//! differs are decoded.  Because file timestamps are coarse, a file changed
//! within two seconds of being read is re-read on the next rescan
//! regardless of its metadata (git's "racily clean" rule).
//!
//! *Bad input.*  Each file keeps its last good contents: a file that does
//! not parse logs one `error!` line (file, line, reason) and its previous
//! resources stay in force; a resource that fails validation logs one line
//! (file, line, field) and is treated as absent.  Duplicates follow the
//! rule on [`crate::datastore`].  A directory that cannot be read keeps its
//! files' resources in force (a transient permission problem or unmounted
//! volume must not delete policy); the same holds for the root.
//!
//! *Back-pressure.*  The output channel is bounded; while it is full the
//! syncer waits (polling with a short back-off so that a stop request is
//! still honoured), and notifications queue up meanwhile and are coalesced
//! into the next round.
//!
//! # Thread safety and shutdown
//!
//! All state lives on the syncer thread.  [`FileSyncer::stop`] (or dropping
//! the handle) asks the thread to finish and joins it; the thread also ends
//! by itself when the receiver is dropped (noticed on its next send).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use notify::{EventKind, RecursiveMode, Watcher};

use super::chunks::{self, FileChunks};
use super::emit::{self, Stopped};
use super::merge::{Merger, RelPath};
use super::source::{self, Fingerprint};
use super::walk;
use crate::model::{SyncStatus, SyncerEvent};

/// Default interval of the backstop full rescan.
pub const DEFAULT_RESCAN_INTERVAL: Duration = Duration::from_secs(30);
/// Default quiet period before a burst of notifications is handled.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(50);
/// Default maximum number of updates per `SyncerEvent::Updates`.
pub const DEFAULT_BATCH_SIZE: usize = 1000;

/// How often the syncer checks for `DIR` while waiting for it to appear.
const WAIT_FOR_DIR_POLL: Duration = Duration::from_secs(1);
/// Files changed this recently (seconds) before being read are re-read on
/// the next rescan even if their metadata looks unchanged.
const RACY_SECS: i64 = 2;

/// Settings of a [`FileSyncer`].
#[derive(Clone, Debug)]
pub struct FileSyncerConfig {
    /// The datastore directory.
    pub dir: PathBuf,
    /// Interval of the backstop full rescan.
    pub rescan_interval: Duration,
    /// Quiet period before a burst of notifications is handled.
    pub debounce: Duration,
    /// Maximum updates per batch (at least 1).
    pub batch_size: usize,
    /// Use file-system notifications.  With `false` only the periodic
    /// rescan sees changes (used by tests, and a fallback for file systems
    /// without inotify).
    pub watch: bool,
}

impl FileSyncerConfig {
    /// Defaults for `dir`: 30 s rescans, 50 ms debounce, batches of 1000,
    /// notifications on.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileSyncerConfig {
            dir: dir.into(),
            rescan_interval: DEFAULT_RESCAN_INTERVAL,
            debounce: DEFAULT_DEBOUNCE,
            batch_size: DEFAULT_BATCH_SIZE,
            watch: true,
        }
    }
}

/// Handle of a running file syncer thread; see the module docs.
pub struct FileSyncer {
    stop: Arc<AtomicBool>,
    wake: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl FileSyncer {
    /// Starts the syncer thread.  Fails only if the thread cannot be
    /// spawned; a missing directory is waited for.
    pub fn start(config: FileSyncerConfig, out: SyncSender<SyncerEvent>) -> io::Result<FileSyncer> {
        let stop = Arc::new(AtomicBool::new(false));
        let (wake, rx) = mpsc::channel();
        let worker = Worker {
            batch_size: config.batch_size.max(1),
            merger: Merger::new(&config.dir),
            root: config.dir.clone(),
            config,
            out,
            stop: stop.clone(),
            rx,
            events_tx: wake.clone(),
            tracked: BTreeMap::new(),
        };
        let thread = std::thread::Builder::new()
            .name("file-syncer".into())
            .spawn(move || worker.run())?;
        Ok(FileSyncer {
            stop,
            wake,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it to finish.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// True once the thread has ended (stopped, or its receiver dropped).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.wake.send(Msg::Stop);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("file syncer thread panicked");
            }
        }
    }
}

impl Drop for FileSyncer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What the syncer thread waits on.
enum Msg {
    Fs(notify::Result<notify::Event>),
    Stop,
}

/// Forwards notifications into the syncer's own channel.
struct Forward(Sender<Msg>);

impl notify::EventHandler for Forward {
    fn handle_event(&mut self, event: notify::Result<notify::Event>) {
        let _ = self.0.send(Msg::Fs(event));
    }
}

/// What the syncer last read from one file.
struct Tracked {
    fingerprint: Fingerprint,
    /// `None` if the file could not be read.
    hash: Option<u64>,
    /// When it was read (seconds since the epoch).
    read_at: i64,
    /// Its documents' digests, for re-decoding only what changed (see [`chunks`]).
    chunks: FileChunks,
}

/// Notifications received but not handled yet.
#[derive(Default)]
struct Pending {
    paths: BTreeSet<PathBuf>,
    full: bool,
    /// Paths written to (or created) with no close-after-write, rename or
    /// removal seen since: their contents may still be incomplete.
    open: BTreeSet<PathBuf>,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// What a notification says about the state of the writes it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Completion {
    /// The paths' contents are final for now: closed after writing,
    /// renamed, removed, a directory or symlink created, metadata changed.
    Complete,
    /// A write or creation that a later close-after-write will finish.
    InProgress,
    /// Says nothing either way (an open or a read): ignored.
    Irrelevant,
}

/// Classifies a notification (see [`Completion`]); `is_link_or_dir` is
/// asked only for creations.
fn completion(kind: &EventKind, is_link_or_dir: impl Fn() -> bool) -> Completion {
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Completion::Complete,
        EventKind::Access(_) => Completion::Irrelevant,
        EventKind::Create(CreateKind::Folder) => Completion::Complete,
        EventKind::Create(_) if is_link_or_dir() => Completion::Complete,
        EventKind::Create(_) => Completion::InProgress,
        EventKind::Modify(ModifyKind::Name(_) | ModifyKind::Metadata(_)) => Completion::Complete,
        EventKind::Remove(_) => Completion::Complete,
        EventKind::Modify(_) | EventKind::Any | EventKind::Other => Completion::InProgress,
    }
}

/// The leading-edge debounce of notifications.
///
/// Invariants:
/// * **An isolated complete change waits for nothing**: when no write is
///   open and no handling happened within the last `quiet` period, the
///   pending paths are due at once.
/// * **A burst is paced, not held**: complete changes within `quiet` of the
///   last handling are due when `quiet` has passed since that handling, so
///   a writer that never pauses is handled once per `quiet` (each change
///   waits at most `quiet`, and the syncer reads at most once per `quiet`).
/// * **An open write waits**: with a write still open, the pending paths are
///   due `quiet` after the last notification, and never later than
///   `10 * quiet` after the first (a writer that keeps a file open cannot
///   starve the syncer).
#[derive(Debug, Clone, Copy)]
struct Debounce {
    quiet: Duration,
    /// End of the burst window opened by the last handling.
    burst_until: Option<Instant>,
}

impl Debounce {
    fn new(quiet: Duration) -> Self {
        Debounce {
            quiet,
            burst_until: None,
        }
    }

    /// When `pending` is to be handled (`None`: nothing pending).
    fn due(&self, pending: &Pending) -> Option<Instant> {
        let (first, last) = (pending.first?, pending.last?);
        if pending.open.is_empty() {
            return Some(self.burst_until.map_or(first, |until| first.max(until)));
        }
        Some((last + self.quiet).min(first + self.quiet * 10))
    }

    /// Records that pending notifications were handled at `now`.
    fn handled(&mut self, now: Instant) {
        self.burst_until = Some(now + self.quiet);
    }
}

struct Worker {
    config: FileSyncerConfig,
    batch_size: usize,
    /// The directory as configured, canonicalised once it exists.
    root: PathBuf,
    out: SyncSender<SyncerEvent>,
    stop: Arc<AtomicBool>,
    rx: Receiver<Msg>,
    events_tx: Sender<Msg>,
    tracked: BTreeMap<RelPath, Tracked>,
    merger: Merger,
}

impl Worker {
    fn run(mut self) {
        let _ = self.run_inner();
    }

    fn run_inner(&mut self) -> Result<(), Stopped> {
        self.send(SyncerEvent::Status(SyncStatus::WaitForDatastore))?;
        self.wait_for_dir()?;
        // Watch before scanning so no change between the two is lost.
        let _watcher = if self.config.watch {
            self.start_watcher()
        } else {
            None
        };
        self.send(SyncerEvent::Status(SyncStatus::ResyncInProgress))?;
        self.full_rescan(true)?;
        self.flush()?;
        self.send(SyncerEvent::Status(SyncStatus::InSync))?;
        tracing::info!(dir = %self.root.display(), files = self.tracked.len(), "file datastore in sync");

        let mut pending = Pending::default();
        let mut next_rescan = felix_actors::clock::real_now() + self.config.rescan_interval;
        let mut debounce = Debounce::new(self.config.debounce);
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Err(Stopped);
            }
            let now = felix_actors::clock::real_now();
            let debounce_due = debounce.due(&pending);
            if debounce_due.is_some_and(|due| now >= due) {
                let handled = std::mem::take(&mut pending);
                self.handle_pending(handled)?;
                self.flush()?;
                debounce.handled(felix_actors::clock::real_now());
                continue;
            }
            if now >= next_rescan {
                self.full_rescan(false)?;
                self.flush()?;
                next_rescan = felix_actors::clock::real_now() + self.config.rescan_interval;
                continue;
            }
            let deadline = debounce_due.map_or(next_rescan, |d| d.min(next_rescan));
            match self.rx.recv_timeout(deadline - now) {
                Ok(msg) => {
                    self.record(msg, &mut pending)?;
                    while let Ok(msg) = self.rx.try_recv() {
                        self.record(msg, &mut pending)?;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(Stopped),
            }
        }
    }

    /// Waits until the root is a readable directory, then canonicalises it.
    fn wait_for_dir(&mut self) -> Result<(), Stopped> {
        let mut warned = false;
        loop {
            match fs::read_dir(&self.config.dir) {
                Ok(_) => break,
                Err(e) => {
                    if !warned {
                        tracing::warn!(dir = %self.config.dir.display(), "waiting for datastore directory: {e}");
                        warned = true;
                    }
                }
            }
            let poll = WAIT_FOR_DIR_POLL.min(self.config.rescan_interval);
            match self.rx.recv_timeout(poll) {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return Err(Stopped),
                Ok(Msg::Fs(_)) | Err(RecvTimeoutError::Timeout) => {}
            }
            if self.stop.load(Ordering::SeqCst) {
                return Err(Stopped);
            }
        }
        if let Ok(canonical) = fs::canonicalize(&self.config.dir) {
            self.root = canonical;
        }
        Ok(())
    }

    fn start_watcher(&self) -> Option<notify::RecommendedWatcher> {
        let result =
            notify::recommended_watcher(Forward(self.events_tx.clone())).and_then(|mut w| {
                w.watch(&self.root, RecursiveMode::Recursive)?;
                Ok(w)
            });
        match result {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(dir = %self.root.display(), "file notifications unavailable, relying on periodic rescans: {e}");
                None
            }
        }
    }

    fn record(&mut self, msg: Msg, pending: &mut Pending) -> Result<(), Stopped> {
        let event = match msg {
            Msg::Stop => return Err(Stopped),
            Msg::Fs(event) => event,
        };
        match event {
            Ok(mut event) => {
                // A file no reload or rescan would look at (a hidden or temporary file,
                // say an editor's or a `write, then rename` tool's) is no change: it must
                // not open a burst window that delays the rename that follows it.
                if !event.need_rescan() {
                    event
                        .paths
                        .retain(|p| !matches!(self.classify(p), PathAction::Ignore));
                    if event.paths.is_empty() {
                        return Ok(());
                    }
                }
                let link_or_dir = || {
                    event.paths.iter().all(|p| {
                        fs::symlink_metadata(p)
                            .is_ok_and(|m| m.file_type().is_symlink() || m.is_dir())
                    })
                };
                match completion(&event.kind, link_or_dir) {
                    Completion::Irrelevant => return Ok(()),
                    Completion::Complete => {
                        for p in &event.paths {
                            pending.open.remove(p);
                        }
                    }
                    Completion::InProgress => pending.open.extend(event.paths.iter().cloned()),
                }
                if event.need_rescan() {
                    pending.full = true;
                }
                pending.paths.extend(event.paths);
            }
            Err(e) => {
                tracing::warn!("file notification error, rescanning: {e}");
                pending.full = true;
                // Events were lost: give the writers a quiet period.
                pending.open.insert(self.root.clone());
            }
        }
        let now = felix_actors::clock::real_now();
        pending.first.get_or_insert(now);
        pending.last = Some(now);
        Ok(())
    }

    fn handle_pending(&mut self, pending: Pending) -> Result<(), Stopped> {
        let mut full = pending.full;
        if !full {
            for abs in &pending.paths {
                match self.classify(abs) {
                    PathAction::Reload(rel) => self.reload(&rel, None, true),
                    PathAction::Rescan => {
                        full = true;
                        break;
                    }
                    PathAction::Ignore => {}
                }
            }
        }
        if full {
            self.full_rescan(false)?;
        }
        Ok(())
    }

    /// Decides what a notification about `abs` calls for.
    fn classify(&self, abs: &Path) -> PathAction {
        let Ok(rel) = abs.strip_prefix(&self.root) else {
            return PathAction::Rescan;
        };
        if rel.as_os_str().is_empty() {
            return PathAction::Rescan;
        }
        let is_dir = fs::metadata(abs).map(|m| m.is_dir());
        if walk::is_candidate_path(rel) && !matches!(is_dir, Ok(true)) {
            return PathAction::Reload(RelPath::new(rel));
        }
        match is_dir {
            Ok(true) => PathAction::Rescan,
            Ok(false) => PathAction::Ignore,
            // Gone: it matters only if it was a directory we had files in.
            Err(_) => {
                if self.tracked.keys().any(|t| t.as_path().starts_with(rel)) {
                    PathAction::Rescan
                } else {
                    PathAction::Ignore
                }
            }
        }
    }

    /// Lists the tree, reloads what changed and drops what vanished.
    fn full_rescan(&mut self, initial: bool) -> Result<(), Stopped> {
        let listing = match walk::list(&self.root) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(dir = %self.root.display(), "cannot read datastore directory, keeping current resources: {e}");
                return Ok(());
            }
        };
        for (rel, e) in &listing.unreadable {
            tracing::error!(dir = %self.root.join(rel).display(), "cannot read directory, keeping its resources: {e}");
        }
        let mut seen = BTreeSet::new();
        for (rel, meta) in listing.files {
            let rel = RelPath::new(&rel);
            self.reload(&rel, Some(&meta), false);
            seen.insert(rel);
            if initial && self.merger.dirty_len() >= self.batch_size {
                self.flush()?;
            }
        }
        let gone: Vec<RelPath> = self
            .tracked
            .keys()
            .filter(|t| !seen.contains(*t))
            .filter(|t| {
                !listing
                    .unreadable
                    .iter()
                    .any(|(dir, _)| t.as_path().starts_with(dir))
            })
            .cloned()
            .collect();
        for rel in gone {
            self.forget(&rel);
        }
        Ok(())
    }

    /// Brings one file up to date.  `meta` is its metadata if the caller
    /// already has it; `force` skips the metadata shortcut.
    fn reload(&mut self, rel: &RelPath, meta: Option<&fs::Metadata>, force: bool) {
        let abs = self.root.join(rel.as_path());
        let meta = match meta {
            Some(m) => m.clone(),
            None => match fs::metadata(&abs) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.forget(rel);
                    return;
                }
                Err(e) => {
                    tracing::error!(file = %abs.display(), "cannot stat file, keeping its resources: {e}");
                    return;
                }
            },
        };
        if !meta.is_file() {
            self.forget(rel);
            return;
        }
        let fingerprint = Fingerprint::of(&meta);
        if !force {
            if let Some(t) = self.tracked.get(rel) {
                let racy = fingerprint.changed_secs() + RACY_SECS >= t.read_at;
                if t.fingerprint == fingerprint && !racy {
                    return;
                }
            }
        }
        let read_at = now_secs();
        let started = felix_actors::clock::real_now();
        let bytes = match fs::read(&abs) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.forget(rel);
                return;
            }
            Err(e) => {
                let known = self.tracked.get(rel).map(|t| t.fingerprint);
                if known != Some(fingerprint) {
                    tracing::error!(file = %abs.display(), "cannot read file, keeping its last good resources: {e}");
                }
                let chunks = self
                    .tracked
                    .remove(rel)
                    .map(|t| t.chunks)
                    .unwrap_or_default();
                self.tracked.insert(
                    rel.clone(),
                    Tracked {
                        fingerprint,
                        hash: None,
                        read_at,
                        chunks,
                    },
                );
                return;
            }
        };
        let read = felix_actors::clock::real_now();
        let hash = source::content_hash(&bytes);
        let previous = self.tracked.remove(rel);
        let unchanged = previous.as_ref().is_some_and(|t| t.hash == Some(hash));
        let mut chunks = previous.map(|t| t.chunks).unwrap_or_default();
        if !unchanged {
            let origin = self.config.dir.join(rel.as_path()).display().to_string();
            let format = walk::format_for(rel.as_path());
            let prev = Some((&chunks, self.merger.docs(rel)));
            match chunks::decode_reusing(&bytes, &origin, format, prev) {
                Ok((decoded, new_chunks)) => {
                    let decoded_at = felix_actors::clock::real_now();
                    chunks = new_chunks;
                    for message in &decoded.invalid {
                        tracing::error!("{message}");
                    }
                    let docs = decoded.docs.len();
                    for message in self.merger.replace_file(rel, Some(decoded.docs)) {
                        tracing::error!("{message}");
                    }
                    let merged = felix_actors::clock::real_now();
                    tracing::debug!(
                        file = %abs.display(),
                        bytes = bytes.len(),
                        docs,
                        read_ms = (read - started).as_secs_f64() * 1e3,
                        decode_ms = (decoded_at - read).as_secs_f64() * 1e3,
                        merge_ms = (merged - decoded_at).as_secs_f64() * 1e3,
                        "file reloaded"
                    );
                }
                Err(message) => {
                    tracing::error!("{message} (keeping the file's last good contents)");
                }
            }
        }
        self.tracked.insert(
            rel.clone(),
            Tracked {
                fingerprint,
                hash: Some(hash),
                read_at,
                chunks,
            },
        );
    }

    /// The file is gone: its resources go (unless a duplicate takes over).
    fn forget(&mut self, rel: &RelPath) {
        if self.tracked.remove(rel).is_some() {
            tracing::info!(file = %self.root.join(rel.as_path()).display(), "datastore file removed");
        }
        for message in self.merger.replace_file(rel, None) {
            tracing::error!("{message}");
        }
    }

    /// Sends the merger's net changes in bounded batches.
    fn flush(&mut self) -> Result<(), Stopped> {
        let started = felix_actors::clock::real_now();
        let updates = self.merger.take_updates();
        if !updates.is_empty() {
            tracing::debug!(
                updates = updates.len(),
                diff_ms = started.elapsed().as_secs_f64() * 1e3,
                "file datastore changes sent"
            );
        }
        emit::send_updates(&self.out, &self.stop, updates, self.batch_size)
    }

    /// Sends one event, waiting while the channel is full.
    fn send(&self, event: SyncerEvent) -> Result<(), Stopped> {
        emit::send(&self.out, &self.stop, event)
    }
}

enum PathAction {
    Reload(RelPath),
    Rescan,
    Ignore,
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::mpsc::Receiver;

    use super::*;
    use crate::model::{Key, Value};

    const WAIT: Duration = Duration::from_secs(10);

    /// The consumer side: applies events to a map and counts statuses.
    struct Consumer {
        rx: Receiver<SyncerEvent>,
        state: BTreeMap<Key, Value>,
        statuses: Vec<SyncStatus>,
        updates_seen: usize,
    }

    impl Consumer {
        fn new(rx: Receiver<SyncerEvent>) -> Self {
            Consumer {
                rx,
                state: BTreeMap::new(),
                statuses: Vec::new(),
                updates_seen: 0,
            }
        }

        fn handle(&mut self, event: SyncerEvent) {
            match event {
                SyncerEvent::Status(s) => self.statuses.push(s),
                SyncerEvent::Updates(updates) => {
                    assert!(!updates.is_empty(), "empty batch sent");
                    for u in updates {
                        self.updates_seen += 1;
                        match u.value {
                            Some(v) => {
                                self.state.insert(u.key, v);
                            }
                            None => {
                                self.state.remove(&u.key);
                            }
                        }
                    }
                }
            }
        }

        /// Receives until `pred` holds; false on timeout.
        fn wait_until(&mut self, pred: impl Fn(&Self) -> bool) -> bool {
            let deadline = felix_actors::clock::real_now() + WAIT;
            while !pred(self) {
                let now = felix_actors::clock::real_now();
                if now >= deadline {
                    return false;
                }
                match self.rx.recv_timeout(deadline - now) {
                    Ok(e) => self.handle(e),
                    Err(_) => return false,
                }
            }
            true
        }

        fn wait_in_sync(&mut self) {
            assert!(
                self.wait_until(|c| c.statuses.contains(&SyncStatus::InSync)),
                "no InSync; statuses {:?}",
                self.statuses
            );
        }

        /// Receives whatever arrives within `d` (used only to check that
        /// nothing more is sent).
        fn drain_for(&mut self, d: Duration) {
            let deadline = felix_actors::clock::real_now() + d;
            while let Some(left) = deadline.checked_duration_since(felix_actors::clock::real_now())
            {
                match self.rx.recv_timeout(left) {
                    Ok(e) => self.handle(e),
                    Err(_) => break,
                }
            }
        }

        fn tier_order(&self, name: &str) -> Option<f64> {
            match self.state.get(&Key::Tier(name.to_string())) {
                Some(Value::Tier(t)) => t.order,
                _ => None,
            }
        }

        fn has_tier(&self, name: &str) -> bool {
            self.state.contains_key(&Key::Tier(name.to_string()))
        }
    }

    fn tier(name: &str, order: u32) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: {name}\nspec:\n  order: {order}\n"
        )
    }

    /// A resource that parses but fails validation (bad CIDR).
    fn bad_netset(name: &str) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: {name}\nspec:\n  nets:\n  - 10.0.0.0/33\n"
        )
    }

    fn good_netset(name: &str) -> String {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: {name}\nspec:\n  nets:\n  - 10.0.0.0/24\n"
        )
    }

    fn netset_key(name: &str) -> Key {
        Key::NetworkSet(crate::model::NetworkSetKey {
            name: name.to_string(),
        })
    }

    fn start(dir: &Path, tweak: impl FnOnce(&mut FileSyncerConfig)) -> (FileSyncer, Consumer) {
        let mut config = FileSyncerConfig::new(dir);
        config.debounce = Duration::from_millis(20);
        tweak(&mut config);
        let (tx, rx) = mpsc::sync_channel(4);
        (FileSyncer::start(config, tx).unwrap(), Consumer::new(rx))
    }

    /// Atomically replaces `path` as editors and kubectl-style tools do.
    fn atomic_write(path: &Path, text: &str) {
        let tmp = path.with_extension("yaml.tmp");
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn initial_scan_is_sent_in_bounded_batches_then_in_sync_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        for f in 0..5 {
            let text: String = (0..10)
                .map(|i| format!("---\n{}", tier(&format!("t{f}x{i}"), i)))
                .collect();
            fs::write(dir.path().join(format!("f{f}.yaml")), text).unwrap();
        }
        let (syncer, mut c) = start(dir.path(), |cfg| cfg.batch_size = 7);
        let mut max_batch = 0;
        let deadline = felix_actors::clock::real_now() + WAIT;
        while !c.statuses.contains(&SyncStatus::InSync)
            && felix_actors::clock::real_now() < deadline
        {
            let e = c.rx.recv_timeout(WAIT).unwrap();
            if let SyncerEvent::Updates(u) = &e {
                max_batch = max_batch.max(u.len());
            }
            c.handle(e);
        }
        assert_eq!(c.state.len(), 50, "whole initial scan before InSync");
        assert!(max_batch <= 7, "batch of {max_batch}");
        assert_eq!(
            c.statuses,
            vec![
                SyncStatus::WaitForDatastore,
                SyncStatus::ResyncInProgress,
                SyncStatus::InSync
            ]
        );
        // A live change afterwards does not repeat InSync.
        fs::write(dir.path().join("f0.yaml"), tier("t0x0", 99)).unwrap();
        assert!(c.wait_until(|c| c.tier_order("t0x0") == Some(99.0)));
        assert!(!c.has_tier("t0x1"));
        syncer.stop();
        let in_syncs = c
            .statuses
            .iter()
            .filter(|s| **s == SyncStatus::InSync)
            .count();
        assert_eq!(in_syncs, 1);
    }

    #[test]
    fn create_modify_rename_atomic_replace_and_delete_are_seen_live() {
        let dir = tempfile::tempdir().unwrap();
        let (_syncer, mut c) = start(dir.path(), |_| {});
        c.wait_in_sync();
        assert!(c.state.is_empty());

        let a = dir.path().join("a.yaml");
        fs::write(&a, tier("alpha", 1)).unwrap();
        assert!(
            c.wait_until(|c| c.tier_order("alpha") == Some(1.0)),
            "create"
        );

        fs::write(&a, tier("alpha", 2)).unwrap();
        assert!(
            c.wait_until(|c| c.tier_order("alpha") == Some(2.0)),
            "modify"
        );

        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        fs::rename(&a, sub.join("moved.yaml")).unwrap();
        // Renamed within the datastore: still present, same value.
        c.drain_for(Duration::from_millis(300));
        assert_eq!(
            c.tier_order("alpha"),
            Some(2.0),
            "rename keeps the resource"
        );

        atomic_write(&sub.join("moved.yaml"), &tier("alpha", 3));
        assert!(
            c.wait_until(|c| c.tier_order("alpha") == Some(3.0)),
            "atomic replace"
        );

        // Renamed to a non-datastore name: gone.
        fs::rename(sub.join("moved.yaml"), sub.join("moved.yaml.bak")).unwrap();
        assert!(c.wait_until(|c| !c.has_tier("alpha")), "rename away");

        fs::write(dir.path().join("b.yml"), tier("beta", 5)).unwrap();
        assert!(c.wait_until(|c| c.has_tier("beta")));
        fs::remove_file(dir.path().join("b.yml")).unwrap();
        assert!(c.wait_until(|c| !c.has_tier("beta")), "delete");

        // Moving a whole directory in is seen too.
        let outside = tempfile::tempdir().unwrap();
        fs::create_dir(outside.path().join("d")).unwrap();
        fs::write(outside.path().join("d/g.json"), r#"{"apiVersion":"projectcalico.org/v3","kind":"Tier","metadata":{"name":"gamma"},"spec":{"order":7}}"#).unwrap();
        if fs::rename(outside.path().join("d"), dir.path().join("d")).is_ok() {
            assert!(
                c.wait_until(|c| c.tier_order("gamma") == Some(7.0)),
                "directory moved in"
            );
            fs::remove_dir_all(dir.path().join("d")).unwrap();
            assert!(c.wait_until(|c| !c.has_tier("gamma")), "directory removed");
        }
    }

    #[test]
    fn malformed_file_keeps_its_last_good_contents() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.yaml");
        fs::write(&a, format!("{}---\n{}", tier("one", 1), tier("two", 2))).unwrap();
        let (_syncer, mut c) = start(dir.path(), |_| {});
        c.wait_in_sync();
        assert!(c.has_tier("one") && c.has_tier("two"));

        fs::write(
            &a,
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: [unclosed\n",
        )
        .unwrap();
        // A canary in another file proves the broken write was processed.
        fs::write(dir.path().join("canary.yaml"), tier("canary", 1)).unwrap();
        assert!(c.wait_until(|c| c.has_tier("canary")));
        c.drain_for(Duration::from_millis(200));
        assert_eq!(c.tier_order("one"), Some(1.0));
        assert_eq!(c.tier_order("two"), Some(2.0));

        fs::write(&a, tier("one", 10)).unwrap();
        assert!(c.wait_until(|c| c.tier_order("one") == Some(10.0) && !c.has_tier("two")));
    }

    #[test]
    fn malformed_file_at_startup_contributes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("bad.yaml"), "kind: [\n").unwrap();
        fs::write(dir.path().join("good.yaml"), tier("g", 1)).unwrap();
        let (_syncer, mut c) = start(dir.path(), |_| {});
        c.wait_in_sync();
        assert_eq!(c.state.len(), 1);
        assert!(c.has_tier("g"));
    }

    #[test]
    fn invalid_resource_is_absent_and_restored_when_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("sets.yaml");
        fs::write(
            &f,
            format!("{}---\n{}", good_netset("ok"), good_netset("flaky")),
        )
        .unwrap();
        let (_syncer, mut c) = start(dir.path(), |_| {});
        c.wait_in_sync();
        assert!(c.state.contains_key(&netset_key("flaky")));

        fs::write(
            &f,
            format!("{}---\n{}", good_netset("ok"), bad_netset("flaky")),
        )
        .unwrap();
        assert!(
            c.wait_until(|c| !c.state.contains_key(&netset_key("flaky"))),
            "invalid → absent"
        );
        assert!(
            c.state.contains_key(&netset_key("ok")),
            "other resource unaffected"
        );

        fs::write(
            &f,
            format!("{}---\n{}", good_netset("ok"), good_netset("flaky")),
        )
        .unwrap();
        assert!(
            c.wait_until(|c| c.state.contains_key(&netset_key("flaky"))),
            "fixed → restored"
        );
    }

    #[test]
    fn unknown_kind_does_not_affect_other_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("odd.yaml"),
            "apiVersion: projectcalico.org/v3\nkind: Frobnicator\nmetadata:\n  name: x\nspec: {}\n",
        )
        .unwrap();
        fs::write(dir.path().join("good.yaml"), tier("g", 1)).unwrap();
        let (_syncer, mut c) = start(dir.path(), |_| {});
        c.wait_in_sync();
        assert_eq!(
            c.state.keys().cloned().collect::<Vec<_>>(),
            vec![Key::Tier("g".into())]
        );
    }

    #[test]
    fn duplicate_in_two_files_first_path_wins_whatever_the_creation_order() {
        for reverse in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (syncer, mut c) = start(dir.path(), |_| {});
            c.wait_in_sync();
            let mut writes = vec![("a.yaml", 1), ("b.yaml", 2)];
            if reverse {
                writes.reverse();
            }
            for (name, order) in &writes {
                fs::write(dir.path().join(name), tier("dup", *order)).unwrap();
                assert!(c.wait_until(|c| c.has_tier("dup")));
            }
            c.drain_for(Duration::from_millis(300));
            assert_eq!(c.tier_order("dup"), Some(1.0), "reverse={reverse}");

            // The winner's file disappears: the other copy takes over.
            fs::remove_file(dir.path().join("a.yaml")).unwrap();
            assert!(c.wait_until(|c| c.tier_order("dup") == Some(2.0)));
            syncer.stop();
        }
    }

    #[test]
    fn file_deleted_while_being_edited_removes_its_resources() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.yaml");
        fs::write(&f, tier("edited", 1)).unwrap();
        let (_syncer, mut c) = start(dir.path(), |_| {});
        c.wait_in_sync();
        // The editor's swap / backup / lock files are ignored...
        fs::write(dir.path().join(".p.yaml.swp"), tier("swap", 1)).unwrap();
        fs::write(dir.path().join("p.yaml~"), tier("backup", 1)).unwrap();
        fs::write(dir.path().join(".#p.yaml"), tier("lock", 1)).unwrap();
        // ...and the original vanishes under it.
        fs::remove_file(&f).unwrap();
        assert!(c.wait_until(|c| !c.has_tier("edited")));
        c.drain_for(Duration::from_millis(200));
        assert!(
            c.state.is_empty(),
            "{:?}",
            c.state.keys().collect::<Vec<_>>()
        );
    }

    #[test]
    fn hidden_and_temporary_files_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let hidden = dir.path().join(".git");
        fs::create_dir(&hidden).unwrap();
        fs::write(hidden.join("x.yaml"), tier("in-hidden-dir", 1)).unwrap();
        fs::write(dir.path().join(".hidden.yaml"), tier("hidden", 1)).unwrap();
        fs::write(dir.path().join("x.yaml.tmp"), tier("tmp", 1)).unwrap();
        fs::write(dir.path().join("notes.txt"), tier("txt", 1)).unwrap();
        fs::write(dir.path().join("real.yaml"), tier("real", 1)).unwrap();
        let (_syncer, mut c) = start(dir.path(), |_| {});
        c.wait_in_sync();
        fs::write(dir.path().join("late.yaml.swp"), tier("swp", 1)).unwrap();
        fs::write(dir.path().join("canary.yaml"), tier("canary", 1)).unwrap();
        assert!(c.wait_until(|c| c.has_tier("canary")));
        c.drain_for(Duration::from_millis(200));
        let names: Vec<_> = c.state.keys().cloned().collect();
        assert_eq!(
            names,
            vec![Key::Tier("canary".into()), Key::Tier("real".into())]
        );
    }

    #[test]
    fn periodic_rescan_catches_changes_when_notifications_are_lost() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.yaml");
        fs::write(&f, tier("r", 1)).unwrap();
        let (_syncer, mut c) = start(dir.path(), |cfg| {
            cfg.watch = false;
            cfg.rescan_interval = Duration::from_millis(100);
        });
        c.wait_in_sync();
        assert_eq!(c.tier_order("r"), Some(1.0));
        // Same length, written immediately: only content (and the racy
        // rule) can reveal the change.
        fs::write(&f, tier("r", 2)).unwrap();
        assert!(c.wait_until(|c| c.tier_order("r") == Some(2.0)), "modify");
        fs::write(dir.path().join("b.yaml"), tier("s", 1)).unwrap();
        assert!(c.wait_until(|c| c.has_tier("s")), "create");
        fs::remove_file(&f).unwrap();
        assert!(c.wait_until(|c| !c.has_tier("r")), "delete");
    }

    #[test]
    fn rescans_that_find_nothing_new_send_nothing() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.yaml"), tier("r", 1)).unwrap();
        let (_syncer, mut c) = start(dir.path(), |cfg| {
            cfg.rescan_interval = Duration::from_millis(50);
        });
        c.wait_in_sync();
        let seen = c.updates_seen;
        // Touching a file (metadata change, same content) sends nothing either.
        fs::write(dir.path().join("a.yaml"), tier("r", 1)).unwrap();
        c.drain_for(Duration::from_millis(500));
        assert_eq!(c.updates_seen, seen);
    }

    #[test]
    fn waits_for_a_missing_directory_without_claiming_sync() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("later");
        let (_syncer, mut c) = start(&dir, |cfg| cfg.rescan_interval = Duration::from_millis(50));
        assert!(c.wait_until(|c| !c.statuses.is_empty()));
        c.drain_for(Duration::from_millis(200));
        assert_eq!(c.statuses, vec![SyncStatus::WaitForDatastore]);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("a.yaml"), tier("r", 1)).unwrap();
        c.wait_in_sync();
        assert!(c.wait_until(|c| c.has_tier("r")));
    }

    #[test]
    fn stop_returns_even_while_the_consumer_is_not_reading() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..20 {
            fs::write(
                dir.path().join(format!("f{i}.yaml")),
                tier(&format!("t{i}"), 1),
            )
            .unwrap();
        }
        let (syncer, c) = start(dir.path(), |cfg| cfg.batch_size = 1);
        std::thread::sleep(Duration::from_millis(100));
        let t = felix_actors::clock::real_now();
        syncer.stop();
        assert!(t.elapsed() < Duration::from_secs(5));
        drop(c);
    }

    #[test]
    fn thread_ends_when_the_receiver_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.yaml"), tier("r", 1)).unwrap();
        let (syncer, mut c) = start(dir.path(), |_| {});
        c.wait_in_sync();
        drop(c);
        fs::write(dir.path().join("b.yaml"), tier("s", 1)).unwrap();
        let deadline = felix_actors::clock::real_now() + WAIT;
        while !syncer.is_finished() && felix_actors::clock::real_now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(syncer.is_finished());
    }

    /// A pending set recorded at `first`..`last`, with `open` open writes.
    fn pending_at(first: Instant, last: Instant, open: bool) -> Pending {
        let mut p = Pending {
            first: Some(first),
            last: Some(last),
            ..Pending::default()
        };
        p.paths.insert(PathBuf::from("/d/a.yaml"));
        if open {
            p.open.insert(PathBuf::from("/d/a.yaml"));
        }
        p
    }

    #[test]
    fn an_isolated_complete_change_waits_for_nothing() {
        let d = Debounce::new(Duration::from_millis(50));
        let t0 = felix_actors::clock::real_now();
        assert_eq!(d.due(&Pending::default()), None);
        assert_eq!(d.due(&pending_at(t0, t0, false)), Some(t0));
        // Long after an earlier handling, still the leading edge.
        let mut d = d;
        d.handled(t0);
        let later = t0 + Duration::from_millis(51);
        assert_eq!(d.due(&pending_at(later, later, false)), Some(later));
    }

    #[test]
    fn a_burst_is_paced_not_held() {
        let q = Duration::from_millis(50);
        let mut d = Debounce::new(q);
        let t0 = felix_actors::clock::real_now();
        d.handled(t0);
        let first = t0 + Duration::from_millis(10);
        let last = first + Duration::from_millis(30);
        // Changes right after a handling wait for the end of its quiet period, together.
        assert_eq!(d.due(&pending_at(first, last, false)), Some(t0 + q));
        // A writer that never pauses is still handled once per quiet period: its changes
        // wait at most that long.
        let last = first + Duration::from_secs(5);
        assert_eq!(d.due(&pending_at(first, last, false)), Some(t0 + q));
        // With a write open, the quiet period counts from the last notification, capped.
        assert_eq!(d.due(&pending_at(first, last, true)), Some(first + q * 10));
    }

    #[test]
    fn an_open_write_waits_for_its_close_or_the_quiet_period() {
        let q = Duration::from_millis(50);
        let d = Debounce::new(q);
        let t0 = felix_actors::clock::real_now();
        assert_eq!(d.due(&pending_at(t0, t0, true)), Some(t0 + q));
    }

    #[test]
    fn notifications_are_classified_by_whether_the_write_is_finished() {
        use notify::event::{
            AccessKind, AccessMode, CreateKind, DataChange, MetadataKind, ModifyKind, RemoveKind,
            RenameMode,
        };
        let no = || false;
        let yes = || true;
        let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(completion(&close, no), Completion::Complete);
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        assert_eq!(completion(&open, no), Completion::Irrelevant);
        let data = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        assert_eq!(completion(&data, no), Completion::InProgress);
        let create = EventKind::Create(CreateKind::File);
        assert_eq!(completion(&create, no), Completion::InProgress);
        assert_eq!(completion(&create, yes), Completion::Complete, "symlink");
        let mkdir = EventKind::Create(CreateKind::Folder);
        assert_eq!(completion(&mkdir, no), Completion::Complete);
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::To));
        assert_eq!(completion(&rename, no), Completion::Complete);
        let attrib = EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any));
        assert_eq!(completion(&attrib, no), Completion::Complete);
        let remove = EventKind::Remove(RemoveKind::File);
        assert_eq!(completion(&remove, no), Completion::Complete);
        assert_eq!(completion(&EventKind::Any, no), Completion::InProgress);
    }

    #[test]
    fn an_isolated_write_is_handled_without_the_debounce_period() {
        let dir = tempfile::tempdir().unwrap();
        // A quiet period far longer than the wait: only the leading edge
        // can deliver the change in time.
        let (_syncer, mut c) = start(dir.path(), |cfg| {
            cfg.debounce = Duration::from_secs(120);
            cfg.rescan_interval = Duration::from_secs(600);
        });
        c.wait_in_sync();
        fs::write(dir.path().join("a.yaml"), tier("alpha", 1)).unwrap();
        assert!(c.wait_until(|c| c.tier_order("alpha") == Some(1.0)));
        // A second change right after the first falls in its burst window
        // and is held for the quiet period.
        atomic_write(&dir.path().join("b.yaml"), &tier("beta", 2));
        c.drain_for(Duration::from_millis(200));
        assert!(!c.has_tier("beta"), "a change in a burst is coalesced");
    }

    #[test]
    fn a_temporary_file_written_before_a_rename_does_not_delay_the_rename() {
        let dir = tempfile::tempdir().unwrap();
        let (_syncer, mut c) = start(dir.path(), |cfg| {
            cfg.debounce = Duration::from_secs(120);
            cfg.rescan_interval = Duration::from_secs(600);
        });
        c.wait_in_sync();
        let tmp = dir.path().join(".a.yaml.tmp");
        fs::write(&tmp, tier("alpha", 1)).unwrap();
        // Let the syncer see the temporary file's events on their own first.
        c.drain_for(Duration::from_millis(200));
        fs::rename(&tmp, dir.path().join("a.yaml")).unwrap();
        assert!(c.wait_until(|c| c.tier_order("alpha") == Some(1.0)));
    }

    #[test]
    fn a_file_still_open_for_writing_is_not_read_until_closed() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let (_syncer, mut c) = start(dir.path(), |cfg| {
            cfg.debounce = Duration::from_secs(120);
            cfg.rescan_interval = Duration::from_secs(600);
        });
        c.wait_in_sync();
        let path = dir.path().join("a.yaml");
        let mut f = fs::File::create(&path).unwrap();
        let text = tier("alpha", 1);
        let (head, tail) = text.split_at(text.len() / 2);
        f.write_all(head.as_bytes()).unwrap();
        f.flush().unwrap();
        c.drain_for(Duration::from_millis(300));
        assert!(c.state.is_empty(), "half a file was read: {:?}", c.state);
        f.write_all(tail.as_bytes()).unwrap();
        drop(f);
        assert!(c.wait_until(|c| c.tier_order("alpha") == Some(1.0)));
    }
}
