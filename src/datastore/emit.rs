//! Sending a syncer's events to its consumer: the one back-pressure loop
//! shared by the file and etcd syncers.
//!
//! Invariants: an event is never dropped or reordered; while the bounded
//! channel is full the sender waits (1 ms doubling to 50 ms, no busy loop)
//! and checks the stop flag between attempts; updates go out in batches of
//! at most `batch_size`, in the order given.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::Duration;

use crate::model::{SyncerEvent, Update};

/// The consumer is gone or a stop was requested: the syncer thread ends.
#[derive(Debug)]
pub(crate) struct Stopped;

/// Sends one event, waiting while the channel is full.
pub(crate) fn send(
    out: &SyncSender<SyncerEvent>,
    stop: &AtomicBool,
    event: SyncerEvent,
) -> Result<(), Stopped> {
    let mut event = event;
    let mut backoff = Duration::from_millis(1);
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err(Stopped);
        }
        match out.try_send(event) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Disconnected(_)) => return Err(Stopped),
            Err(TrySendError::Full(back)) => {
                event = back;
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
        }
    }
}

/// Sends `updates` in order, in batches of at most `batch_size` (at least
/// one per batch).  Nothing is sent for an empty list.
pub(crate) fn send_updates(
    out: &SyncSender<SyncerEvent>,
    stop: &AtomicBool,
    updates: Vec<Update>,
    batch_size: usize,
) -> Result<(), Stopped> {
    let batch_size = batch_size.max(1);
    let mut rest = updates.into_iter().peekable();
    while rest.peek().is_some() {
        let batch: Vec<Update> = rest.by_ref().take(batch_size).collect();
        send(out, stop, SyncerEvent::Updates(batch))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::sync_channel;

    use super::*;
    use crate::model::Key;

    fn updates(n: usize) -> Vec<Update> {
        (0..n)
            .map(|i| Update::delete(Key::Tier(format!("t{i}"))))
            .collect()
    }

    #[test]
    fn batches_keep_order_and_size() {
        let (tx, rx) = sync_channel(10);
        let stop = AtomicBool::new(false);
        send_updates(&tx, &stop, updates(7), 3).unwrap();
        send_updates(&tx, &stop, Vec::new(), 3).unwrap();
        drop(tx);
        let sizes_and_keys: Vec<(usize, Vec<Key>)> = rx
            .iter()
            .map(|e| match e {
                SyncerEvent::Updates(b) => (b.len(), b.into_iter().map(|u| u.key).collect()),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        let sizes: Vec<usize> = sizes_and_keys.iter().map(|(n, _)| *n).collect();
        assert_eq!(sizes, [3, 3, 1]);
        let keys: Vec<Key> = sizes_and_keys.into_iter().flat_map(|(_, k)| k).collect();
        let expected: Vec<Key> = updates(7).into_iter().map(|u| u.key).collect();
        assert_eq!(keys, expected);
    }

    #[test]
    fn a_full_channel_yields_to_a_stop_request() {
        let (tx, _rx) = sync_channel(0);
        let stop = AtomicBool::new(true);
        assert!(send(&tx, &stop, SyncerEvent::Updates(updates(1))).is_err());
    }

    #[test]
    fn a_dropped_receiver_stops_the_sender() {
        let (tx, rx) = sync_channel(1);
        drop(rx);
        let stop = AtomicBool::new(false);
        assert!(send(&tx, &stop, SyncerEvent::Updates(updates(1))).is_err());
    }
}
