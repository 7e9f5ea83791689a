//! The etcd datastore syncer (`--datastore etcdv3:URLS`).
//!
//! # Contract
//!
//! [`EtcdSyncer::start`] spawns one OS thread that turns the Calico keys in
//! etcd (layout in [`super::keys`]) into the [`SyncerEvent`] stream of
//! [`crate::model`], with the same contract as the file syncer:
//!
//! 1. `Status(WaitForDatastore)` until etcd first answers;
//! 2. `Status(ResyncInProgress)`, then the initial listing as `Updates`
//!    batches of at most [`EtcdSyncerConfig::batch_size`];
//! 3. `Status(InSync)`, exactly once, after a complete listing at one
//!    revision has been delivered;
//! 4. live changes as further `Updates` batches.
//!
//! Only net per-key differences are sent; `value: None` means absent.
//!
//! # Design
//!
//! *List, then watch.*  A listing reads every key under
//! [`super::keys::SYNC_PREFIXES`] page by page
//! ([`EtcdSyncerConfig::page_size`]), all pages at the revision of the
//! first, so the result is one consistent snapshot.  Pages are large
//! (25,000 keys) because etcd 3.4 walks its whole index from a page's
//! start key to the range end for every page: with 5,000-key pages that
//! walk doubled etcd's CPU per key on 110,000 keys.  The watch then starts
//! at that revision + 1 over the whole `/calico/` prefix; keys outside the
//! layout are ignored.
//!
//! *Pipelined first listing.*  When nothing is known yet, a fetcher
//! thread reads the pages and decodes the values while the syncer thread
//! merges and sends, the fetcher running at most two decoded pages ahead;
//! it asks etcd for the next page before decoding the current one, so
//! etcd's serving overlaps felix's decoding.  At most four pages are held
//! at once (one being read, one being decoded, two queued).
//!
//! *Resync.*  When the watch is cancelled (compaction, or etcd's own
//! reasons), the connection drops, or a listing page's revision has been
//! compacted, the syncer lists again.  It remembers each key's
//! `mod_revision`; a resync lists keys and revisions only and fetches the
//! values of the keys that changed (at the listing's revision), so
//! unchanged keys cost neither transfer nor decoding, and keys that are no
//! longer listed are deleted: only real differences are emitted,
//! including deletions that happened while it was disconnected.  Statuses
//! are never sent again after `InSync`.
//!
//! *Resume.*  A watch that broke for any reason other than compaction
//! (connection lost, etcd restarted) is re-created from the last revision
//! whose changes were all applied, as upstream's watcher cache does: etcd
//! replays what was missed, including deletions, and the replay is sent as
//! net differences (flushed once it reaches the revision the store had when
//! the watch was re-created).  No listing is needed, so recovery does not
//! grow with the number of keys.  If that history has been compacted, the
//! syncer relists as above.
//!
//! *Backoff.*  Failed attempts are retried after a delay that doubles from
//! [`EtcdSyncerConfig::backoff_min`] up to
//! [`EtcdSyncerConfig::backoff_max`] (default 50 ms to 1 s), reset by the
//! next complete listing.  A compaction triggers an immediate relist, except
//! that three in a row fall back to the backoff.  The first failure of an
//! outage is logged as a warning, the rest at debug level.
//!
//! *Memory.*  Per key the syncer keeps its `mod_revision` and its decoded
//! model entries (the merger's view); nothing is queued while etcd is
//! unreachable, and a listing holds at most four pages (see above).
//!
//! *Bad values.*  A value that does not decode or validate is logged once
//! per change with its key and treated as absent.  Two keys that convert to
//! one model key (a `Profile` `kns.x` and a `Namespace` `x`) follow the file
//! datastore's rule, with the etcd key in place of the file path: the value
//! from the byte-wise smaller key is in force.
//!
//! # Shutdown
//!
//! [`EtcdSyncer::stop`] (or dropping the handle) raises a flag that blocked
//! network reads, backoff sleeps and sends all check within 200 ms; the
//! thread also ends when the receiver is dropped (noticed on its next send).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::client::{prefix_end, EtcdClient, EtcdError, KeyValue, WatchEvent, WatchMessage};
use super::config::{ConfigError, EtcdConfig};
use super::keys;
use super::pb;
use super::value;
use crate::datastore::emit;
use crate::datastore::keyed::{KeyedMerger, Produced};
use crate::model::{SyncStatus, SyncerEvent};

/// Default maximum number of updates per `SyncerEvent::Updates`.
pub const DEFAULT_BATCH_SIZE: usize = 1000;
/// Default number of keys per listing page.
pub const DEFAULT_PAGE_SIZE: i64 = 25_000;
/// Decoded pages the initial listing's fetcher may run ahead.
const PREFETCH_PAGES: usize = 2;
/// Default first retry delay.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Default longest retry delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Granularity of interruptible sleeps.
const SLEEP_SLICE: Duration = Duration::from_millis(50);
/// A resync page with more changed keys than this is re-read whole.
const REFETCH_ONE_BY_ONE: usize = 16;
/// Immediate relists (after compactions) allowed in a row before backing off.
const MAX_IMMEDIATE: u32 = 3;

/// Settings of an [`EtcdSyncer`].
#[derive(Clone, Debug)]
pub struct EtcdSyncerConfig {
    /// Connection settings.
    pub etcd: EtcdConfig,
    /// Maximum updates per batch (at least 1).
    pub batch_size: usize,
    /// Keys per listing page (at least 1).
    pub page_size: i64,
    /// Start reading the next page of the first listing before decoding
    /// the current one (default true; false is for measurements).
    pub prefetch: bool,
    /// First delay before retrying after a failure.
    pub backoff_min: Duration,
    /// Longest delay between retries (the backoff doubles up to it).
    pub backoff_max: Duration,
    /// Timeout of one unary request (a listing page).
    pub request_timeout: Duration,
}

impl EtcdSyncerConfig {
    /// Defaults for `etcd`.
    pub fn new(etcd: EtcdConfig) -> Self {
        EtcdSyncerConfig {
            etcd,
            batch_size: DEFAULT_BATCH_SIZE,
            page_size: DEFAULT_PAGE_SIZE,
            prefetch: true,
            backoff_min: DEFAULT_BACKOFF_MIN,
            backoff_max: DEFAULT_BACKOFF_MAX,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Why an [`EtcdSyncer`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum EtcdSyncerError {
    #[error(transparent)]
    /// The etcd settings are unusable.
    Config(#[from] ConfigError),
    #[error("cannot start the etcd syncer thread: {0}")]
    /// The syncer's thread could not be spawned.
    Spawn(#[from] io::Error),
}

/// Counters of a running syncer (for tests, benchmarks and metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EtcdSyncerStats {
    /// Complete listings (the initial one and every resync).
    pub lists: u64,
    /// Watches resumed from the last processed revision after a broken
    /// connection (no listing needed).
    pub resumes: u64,
    /// Watches or listings that failed because of compaction.
    pub compactions: u64,
    /// Failed attempts (connection errors, broken watches, ...).
    pub failures: u64,
    /// Last revision fully processed.
    pub revision: i64,
    /// Calico keys currently known.
    pub keys: u64,
}

#[derive(Default)]
struct Counters {
    lists: AtomicU64,
    resumes: AtomicU64,
    compactions: AtomicU64,
    failures: AtomicU64,
    revision: AtomicI64,
    keys: AtomicU64,
}

/// Handle of a running etcd syncer thread; see the module docs.
pub struct EtcdSyncer {
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl EtcdSyncer {
    /// Validates `config` and starts the syncer thread.  An unreachable
    /// etcd is not an error: it is waited for.
    pub fn start(
        config: EtcdSyncerConfig,
        out: SyncSender<SyncerEvent>,
    ) -> Result<EtcdSyncer, EtcdSyncerError> {
        config.etcd.validate()?;
        let stop = Arc::new(AtomicBool::new(false));
        let client = EtcdClient::from_config(&config.etcd, Some(stop.clone()))
            .map_err(ConfigError::Endpoint)?
            .with_request_timeout(config.request_timeout);
        let counters = Arc::new(Counters::default());
        let worker = Worker {
            batch_size: config.batch_size.max(1),
            page_size: config.page_size.max(1),
            config,
            client: Arc::new(client),
            out,
            stop: stop.clone(),
            counters: counters.clone(),
            merger: KeyedMerger::default(),
            known: foldhash::HashMap::default(),
            generation: 0,
            resume: None,
        };
        let thread = std::thread::Builder::new()
            .name("etcd-syncer".into())
            .spawn(move || worker.run())?;
        Ok(EtcdSyncer {
            stop,
            counters,
            thread: Some(thread),
        })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> EtcdSyncerStats {
        EtcdSyncerStats {
            lists: self.counters.lists.load(Ordering::SeqCst),
            resumes: self.counters.resumes.load(Ordering::SeqCst),
            compactions: self.counters.compactions.load(Ordering::SeqCst),
            failures: self.counters.failures.load(Ordering::SeqCst),
            revision: self.counters.revision.load(Ordering::SeqCst),
            keys: self.counters.keys.load(Ordering::SeqCst),
        }
    }

    /// Stops the thread and waits for it to finish.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// True once the thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("etcd syncer thread panicked");
            }
        }
    }
}

impl Drop for EtcdSyncer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Why the current attempt ended.
enum Interrupt {
    /// Stop requested or receiver gone.
    Stopped,
    /// Try again: relist (after the backoff unless `immediate`).
    Retry { reason: String, immediate: bool },
}

impl From<emit::Stopped> for Interrupt {
    fn from(_: emit::Stopped) -> Self {
        Interrupt::Stopped
    }
}

/// What the syncer remembers per etcd key.
struct Known {
    mod_revision: i64,
    /// Listing generation that last saw the key.
    generation: u64,
    /// The model keys its value produced (none while it is invalid).
    produced: Produced,
}

struct Worker {
    config: EtcdSyncerConfig,
    batch_size: usize,
    page_size: i64,
    client: Arc<EtcdClient>,
    out: SyncSender<SyncerEvent>,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    merger: KeyedMerger,
    /// Per etcd key (foldhash: the keys come from our own etcd, and
    /// SipHash showed in the listing profile). The key is shared with the merger, which
    /// names a model key's owners by it.
    known: foldhash::HashMap<Arc<str>, Known>,
    generation: u64,
    /// Last revision whose changes are all applied, once a listing has
    /// completed (cleared when a listing starts or history was compacted):
    /// a broken watch resumes from here instead of relisting.
    resume: Option<i64>,
}

/// Progress of the status sequence.
#[derive(Default)]
struct Phase {
    resync_sent: bool,
    in_sync: bool,
}

impl Worker {
    fn run(mut self) {
        if self
            .send(SyncerEvent::Status(SyncStatus::WaitForDatastore))
            .is_err()
        {
            return;
        }
        let mut phase = Phase::default();
        let mut backoff = self.config.backoff_min;
        let mut outage_logged = false;
        let mut immediate_in_a_row = 0u32;
        loop {
            let reason = match self.attempt(&mut phase, &mut backoff, &mut outage_logged) {
                Interrupt::Stopped => return,
                Interrupt::Retry { reason, immediate } => {
                    if immediate && immediate_in_a_row < MAX_IMMEDIATE {
                        immediate_in_a_row += 1;
                        tracing::info!("etcd resync: {reason}");
                        continue;
                    }
                    reason
                }
            };
            immediate_in_a_row = 0;
            self.counters.failures.fetch_add(1, Ordering::SeqCst);
            if outage_logged {
                tracing::debug!(retry_in_ms = backoff.as_millis() as u64, "etcd: {reason}");
            } else {
                tracing::warn!(
                    endpoints = %self.client.urls().join(","),
                    retry_in_ms = backoff.as_millis() as u64,
                    "etcd: {reason}"
                );
                outage_logged = true;
            }
            if self.sleep(backoff).is_err() {
                return;
            }
            backoff = (backoff * 2).min(self.config.backoff_max.max(self.config.backoff_min));
        }
    }

    /// One list-then-watch attempt; returns why it ended.
    fn attempt(
        &mut self,
        phase: &mut Phase,
        backoff: &mut Duration,
        outage_logged: &mut bool,
    ) -> Interrupt {
        if let (true, Some(revision)) = (phase.in_sync, self.resume) {
            return self.watch(revision, Some((backoff, outage_logged)));
        }
        let revision = match self.list(phase) {
            Ok(r) => r,
            Err(i) => return i,
        };
        *backoff = self.config.backoff_min;
        if *outage_logged {
            tracing::info!(revision, "etcd reachable again; resynced");
            *outage_logged = false;
        }
        if let Err(i) = self.flush() {
            return i;
        }
        if !phase.in_sync {
            if let Err(i) = self.send(SyncerEvent::Status(SyncStatus::InSync)) {
                return i;
            }
            phase.in_sync = true;
            tracing::info!(revision, keys = self.known.len(), "etcd datastore in sync");
        }
        self.watch(revision, None)
    }

    fn interrupt(&self, e: EtcdError) -> Interrupt {
        match e {
            EtcdError::Stopped => Interrupt::Stopped,
            EtcdError::Compacted { .. } => {
                self.counters.compactions.fetch_add(1, Ordering::SeqCst);
                Interrupt::Retry {
                    reason: e.to_string(),
                    immediate: true,
                }
            }
            other => Interrupt::Retry {
                reason: other.to_string(),
                immediate: false,
            },
        }
    }

    /// Lists every Calico key at one revision, applying differences from
    /// what is known; returns the revision.
    fn list(&mut self, phase: &mut Phase) -> Result<i64, Interrupt> {
        self.generation += 1;
        let generation = self.generation;
        self.resume = None;
        let started = felix_actors::clock::real_now();
        let revision = if self.known.is_empty() {
            self.list_pipelined(phase, generation)?
        } else {
            self.relist(phase, generation)?
        };
        let gone: Vec<Arc<str>> = self
            .known
            .iter()
            .filter(|(_, k)| k.generation != generation)
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            self.delete(&key);
        }
        self.counters.lists.fetch_add(1, Ordering::SeqCst);
        self.counters.revision.store(revision, Ordering::SeqCst);
        self.counters
            .keys
            .store(self.known.len() as u64, Ordering::SeqCst);
        tracing::debug!(
            revision,
            keys = self.known.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "etcd listing done"
        );
        self.resume = Some(revision);
        Ok(revision)
    }

    /// The listing when nothing is known (the first one, or after a
    /// resync that found the store empty): a fetcher thread reads the
    /// pages and decodes the values, running at most [`PREFETCH_PAGES`]
    /// ahead, while this thread merges and sends; returns the revision.
    fn list_pipelined(&mut self, phase: &mut Phase, generation: u64) -> Result<i64, Interrupt> {
        let (tx, rx) = mpsc::sync_channel(PREFETCH_PAGES);
        let client = Arc::clone(&self.client);
        let page_size = self.page_size;
        let prefetch = self.config.prefetch;
        std::thread::scope(|scope| {
            let fetcher = std::thread::Builder::new()
                .name("etcd-fetch".into())
                .spawn_scoped(scope, move || {
                    fetch_decoded(&client, page_size, prefetch, &tx)
                });
            if let Err(e) = fetcher {
                return Err(Interrupt::Retry {
                    reason: format!("cannot start the listing thread: {e}"),
                    immediate: false,
                });
            }
            // `rx` is dropped when this closure returns, so the fetcher
            // stops at its next page whatever happens here.
            let mut revision = 0i64;
            for page in rx {
                let page = page.map_err(|e| self.interrupt(e))?;
                if revision == 0 {
                    revision = page.revision;
                    if !phase.resync_sent {
                        self.send(SyncerEvent::Status(SyncStatus::ResyncInProgress))?;
                        phase.resync_sent = true;
                    }
                }
                // Room for the rest of the prefix at once: the maps then grow once per
                // prefix, not by doubling (a rehash of every entry each time) as keys come.
                self.known.reserve(page.remaining);
                self.merger.reserve(page.remaining);
                for kv in page.kvs {
                    self.note_and_apply(kv, generation);
                }
                if self.merger.dirty_len() >= self.batch_size {
                    self.flush()?;
                }
            }
            if revision == 0 {
                // The fetcher ended without a page: only a stop does that.
                return Err(Interrupt::Stopped);
            }
            Ok(revision)
        })
    }

    /// A resync listing: keys and revisions first, values only for keys
    /// that changed; returns the revision.
    fn relist(&mut self, phase: &mut Phase, generation: u64) -> Result<i64, Interrupt> {
        let mut revision = 0i64;
        for prefix in keys::SYNC_PREFIXES {
            let end = prefix_end(prefix.as_bytes());
            let mut start = prefix.as_bytes().to_vec();
            loop {
                if self.stop.load(Ordering::SeqCst) {
                    return Err(Interrupt::Stopped);
                }
                // A resync first reads keys and revisions only, then the
                // values of the keys that changed.
                let keys_only = !self.known.is_empty();
                let page = if keys_only {
                    self.client
                        .range_keys(&start, &end, revision, self.page_size)
                } else {
                    self.client.range(&start, &end, revision, self.page_size)
                }
                .map_err(|e| self.interrupt(e))?;
                if revision == 0 {
                    revision = page.revision;
                    if !phase.resync_sent {
                        self.send(SyncerEvent::Status(SyncStatus::ResyncInProgress))?;
                        phase.resync_sent = true;
                    }
                }
                let more = page.more;
                let page_start = std::mem::take(&mut start);
                if let Some(last) = page.kvs.last() {
                    start.clone_from(&last.key);
                    start.push(0);
                }
                let kvs = if keys_only {
                    self.with_values(page.kvs, &page_start, &start, revision)?
                } else {
                    page.kvs
                };
                for kv in kvs {
                    self.put(kv, generation);
                }
                if self.merger.dirty_len() >= self.batch_size {
                    self.flush()?;
                }
                if !more {
                    break;
                }
            }
        }
        Ok(revision)
    }

    /// Completes a keys-only page: fetches (at `revision`) the values of
    /// the keys whose `mod_revision` differs from what is known.  Keys
    /// known unchanged are returned without values (only their revision
    /// is looked at).  Many changes re-read the page's whole range.
    fn with_values(
        &self,
        kvs: Vec<KeyValue>,
        page_start: &[u8],
        page_end: &[u8],
        revision: i64,
    ) -> Result<Vec<KeyValue>, Interrupt> {
        let changed = |kv: &KeyValue| {
            let Ok(key) = std::str::from_utf8(&kv.key) else {
                return false;
            };
            keys::parse_key(key).is_some()
                && self
                    .known
                    .get(key)
                    .is_none_or(|k| k.mod_revision != kv.mod_revision)
        };
        let need = kvs.iter().filter(|kv| changed(kv)).count();
        if need == 0 {
            return Ok(kvs);
        }
        if need > REFETCH_ONE_BY_ONE {
            let page = self
                .client
                .range(page_start, page_end, revision, self.page_size)
                .map_err(|e| self.interrupt(e))?;
            return Ok(page.kvs);
        }
        let mut out = Vec::with_capacity(kvs.len());
        for kv in kvs {
            if !changed(&kv) {
                out.push(kv);
                continue;
            }
            let mut end = kv.key.clone();
            end.push(0);
            let page = self
                .client
                .range(&kv.key, &end, revision, 1)
                .map_err(|e| self.interrupt(e))?;
            out.extend(page.kvs);
        }
        Ok(out)
    }

    /// Watches from `revision + 1` until something breaks.
    ///
    /// `resuming` (the backoff state) is given when the watch replaces one
    /// that broke: the changes missed meanwhile are replayed and sent as
    /// net differences (flushed once the replay reaches the revision the
    /// store had when the watch was created, or when a batch is full), and
    /// the backoff is reset once etcd accepted the watch.
    fn watch(&mut self, revision: i64, resuming: Option<(&mut Duration, &mut bool)>) -> Interrupt {
        let prefix = keys::WATCH_PREFIX.as_bytes();
        let mut stream = match self.client.watch(prefix, &prefix_end(prefix), revision + 1) {
            Ok(s) => s,
            Err(e) => return self.interrupt(e),
        };
        let mut resuming = resuming;
        // Hold flushes back until the replay reaches this revision.
        let mut catch_up_to = 0i64;
        loop {
            let message = match stream.next_message() {
                None => {
                    return Interrupt::Retry {
                        reason: "watch connection closed".into(),
                        immediate: false,
                    }
                }
                Some(Err(e)) => return self.interrupt(e),
                Some(Ok(m)) => m,
            };
            match message {
                WatchMessage::Created { revision: current } => {
                    if let Some((backoff, outage_logged)) = resuming.take() {
                        *backoff = self.config.backoff_min;
                        self.counters.resumes.fetch_add(1, Ordering::SeqCst);
                        if *outage_logged {
                            tracing::info!(
                                from = revision + 1,
                                to = current,
                                "etcd reachable again; watch resumed"
                            );
                            *outage_logged = false;
                        }
                        catch_up_to = current;
                    }
                }
                WatchMessage::Progress { revision } => {
                    if revision >= catch_up_to {
                        if let Err(i) = self.flush() {
                            return i;
                        }
                    }
                    self.counters.revision.fetch_max(revision, Ordering::SeqCst);
                    self.resume = Some(self.resume.unwrap_or(0).max(revision));
                }
                WatchMessage::Canceled {
                    compact_revision,
                    reason,
                } => {
                    if compact_revision > 0 {
                        // The missed history is gone: only a listing can
                        // tell what changed.
                        self.resume = None;
                        return self.interrupt(EtcdError::Compacted {
                            revision: revision + 1,
                            compact_revision,
                        });
                    }
                    return Interrupt::Retry {
                        reason: format!("watch cancelled by etcd: {reason}"),
                        immediate: false,
                    };
                }
                WatchMessage::Events { revision, events } => {
                    let generation = self.generation;
                    // The header revision is the store's, which may be
                    // ahead of these events while history is replayed:
                    // progress is the newest event's revision.
                    let mut applied = self.resume.unwrap_or(0);
                    for event in events {
                        match event {
                            WatchEvent::Put(kv) => {
                                applied = applied.max(kv.mod_revision);
                                self.put(kv, generation);
                            }
                            WatchEvent::Delete { key, mod_revision } => {
                                applied = applied.max(mod_revision);
                                if let Ok(key) = String::from_utf8(key) {
                                    self.delete(&key);
                                }
                            }
                        }
                    }
                    if applied >= catch_up_to || self.merger.dirty_len() >= self.batch_size {
                        if let Err(i) = self.flush() {
                            return i;
                        }
                    }
                    self.resume = Some(applied);
                    self.counters
                        .revision
                        .fetch_max(applied.min(revision), Ordering::SeqCst);
                    self.counters
                        .keys
                        .store(self.known.len() as u64, Ordering::SeqCst);
                }
            }
        }
    }

    /// A key was listed or written.
    fn put(&mut self, kv: KeyValue, generation: u64) {
        let Ok(key) = std::str::from_utf8(&kv.key) else {
            return;
        };
        let Some(id) = keys::parse_key(key) else {
            return;
        };
        if let Some(known) = self.known.get(key) {
            if known.mod_revision == kv.mod_revision {
                if let Some(k) = self.known.get_mut(key) {
                    k.generation = generation;
                }
                return;
            }
        }
        let result = value::decode(key, &id, &kv.value);
        if let Err(message) = &result {
            tracing::error!("{message}");
        }
        let key: Arc<str> = Arc::from(key);
        self.note_and_apply(
            DecodedKv {
                key,
                mod_revision: kv.mod_revision,
                result,
            },
            generation,
        );
    }

    /// Records a listed or written key with its decoded value and hands the value to the
    /// merger, unless the key is known at that revision already.
    fn note_and_apply(&mut self, kv: DecodedKv, generation: u64) {
        let new = kv.result.ok();
        if let Some(known) = self.known.get_mut(&*kv.key) {
            known.generation = generation;
            if known.mod_revision == kv.mod_revision {
                return;
            }
            known.mod_revision = kv.mod_revision;
            let old = std::mem::take(&mut known.produced);
            let (produced, messages) = self.merger.replace(&kv.key, &old, new);
            if let Some(known) = self.known.get_mut(&*kv.key) {
                known.produced = produced;
            }
            log_messages(messages);
            return;
        }
        let (produced, messages) = self.merger.replace(&kv.key, &[], new);
        log_messages(messages);
        self.known.insert(
            kv.key,
            Known {
                mod_revision: kv.mod_revision,
                generation,
                produced,
            },
        );
    }

    /// A key was deleted (or is no longer listed).
    fn delete(&mut self, key: &str) {
        let Some((key, known)) = self.known.remove_entry(key) else {
            return;
        };
        let (_, messages) = self.merger.replace(&key, &known.produced, None);
        log_messages(messages);
    }

    /// Sends the merger's net changes in bounded batches.
    fn flush(&mut self) -> Result<(), Interrupt> {
        let updates = self.merger.take_updates();
        emit::send_updates(&self.out, &self.stop, updates, self.batch_size)?;
        Ok(())
    }

    /// Sends one event, waiting while the channel is full.
    fn send(&self, event: SyncerEvent) -> Result<(), Interrupt> {
        emit::send(&self.out, &self.stop, event)?;
        Ok(())
    }

    /// Sleeps for `d`, waking early (with `Err`) on a stop request.
    fn sleep(&self, d: Duration) -> Result<(), ()> {
        let deadline = felix_actors::clock::real_now() + d;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Err(());
            }
            let now = felix_actors::clock::real_now();
            if now >= deadline {
                return Ok(());
            }
            std::thread::sleep((deadline - now).min(SLEEP_SLICE));
        }
    }
}

/// A listed key with its value decoded (by the fetcher thread).
struct DecodedKv {
    key: Arc<str>,
    mod_revision: i64,
    result: value::Entries,
}

/// Logs the merger's messages (model keys produced by several etcd keys).
fn log_messages(messages: Vec<String>) {
    for message in messages {
        tracing::error!("{message}");
    }
}

/// One listing page, decoded.
struct DecodedPage {
    /// The revision of the whole listing.
    revision: i64,
    kvs: Vec<DecodedKv>,
    /// Keys from this page's first to the end of its prefix (this page's included).
    remaining: usize,
}

/// The fetcher of a pipelined listing: reads every key under
/// [`keys::SYNC_PREFIXES`] page by page at the revision of the first page,
/// decodes the values (logging those that fail) and sends the pages to
/// `tx`.  With `prefetch`, the read of the next page is started before the
/// current one is decoded, so etcd serves it meanwhile.  Ends after the
/// last page, at the first error (which is sent), or when the receiver is
/// gone.
fn fetch_decoded(
    client: &EtcdClient,
    page_size: i64,
    prefetch: bool,
    tx: &SyncSender<Result<DecodedPage, EtcdError>>,
) {
    let mut revision = 0i64;
    let mut prefixes = keys::SYNC_PREFIXES.iter();
    let first = |p: &&str| (p.as_bytes().to_vec(), prefix_end(p.as_bytes()));
    // The next range to read (`start`, `end`), and its read once started.
    let mut next = prefixes.next().map(first);
    let mut pending = None;
    while let Some((start, end)) = next.take() {
        let started = match pending.take() {
            Some(p) => p,
            None => client.start_range(&start, &end, revision, page_size),
        };
        let page = match started.and_then(|p| client.finish_range_shared(p)) {
            Ok(p) => p,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        if revision == 0 {
            revision = page.revision;
        }
        // The following range: the rest of this prefix, or the next one.
        next = match page.kvs.last() {
            Some(last) if page.more => {
                let mut after = last.key.to_vec();
                after.push(0);
                Some((after, end))
            }
            _ => prefixes.next().map(first),
        };
        if prefetch {
            pending = next
                .as_ref()
                .map(|(s, e)| client.start_range(s, e, revision, page_size));
        }
        let remaining = usize::try_from(page.count).unwrap_or(0);
        let kvs = page.kvs.into_iter().filter_map(decode_kv).collect();
        if tx
            .send(Ok(DecodedPage {
                revision,
                kvs,
                remaining,
            }))
            .is_err()
        {
            return;
        }
    }
}

/// Decodes one listed key; `None` for keys outside the layout.
fn decode_kv(kv: pb::KeyValue) -> Option<DecodedKv> {
    let key = std::str::from_utf8(&kv.key).ok()?;
    let id = keys::parse_key(key)?;
    let result = value::decode(key, &id, &kv.value);
    if let Err(message) = &result {
        tracing::error!("{message}");
    }
    Some(DecodedKv {
        key: Arc::from(key),
        mod_revision: kv.mod_revision,
        result,
    })
}
