//! The soak's clock and memory of what happened when: chaos events (kills,
//! restarts, faults), the intervals in which felix was up and free to
//! program (recovered after a start, no fault holding its applies), and the
//! deadline a datastore change must be in the kernel by.
//!
//! Invariants: intervals are recorded in time order and never overlap; an
//! interval is closed *before* the action that ends it is taken (a kill, an
//! armed fault), so a judgement made after the fact never credits felix
//! with time it did not have.

use std::time::{Duration, Instant};

/// One chaos event, for reports.
#[derive(Clone, Debug)]
pub struct Event {
    /// When it happened.
    pub at: Instant,
    /// What happened (`SIGKILL pid 123 (mid-apply)`, ...).
    pub what: String,
}

/// Events and up intervals of one soak.
#[derive(Debug)]
pub struct Timeline {
    start: Instant,
    events: Vec<Event>,
    /// `[from, to)`; `to` is `None` while felix is up now.
    up: Vec<(Instant, Option<Instant>)>,
}

impl Timeline {
    /// A timeline starting now, felix down.
    pub fn new() -> Timeline {
        Timeline {
            start: felix_actors::clock::real_now(),
            events: Vec::new(),
            up: Vec::new(),
        }
    }

    /// The soak's start.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// `t` as seconds since the start, for reports (`+12.345s`).
    pub fn rel(&self, t: Instant) -> String {
        format!(
            "+{:.3}s",
            t.saturating_duration_since(self.start).as_secs_f64()
        )
    }

    /// Records an event now; returns its instant.
    pub fn event(&mut self, what: impl Into<String>) -> Instant {
        let at = felix_actors::clock::real_now();
        self.events.push(Event {
            at,
            what: what.into(),
        });
        at
    }

    /// Every event so far.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// felix is up (recovered, nothing holding its applies) from `at`.
    pub fn up_from(&mut self, at: Instant) {
        if self.is_up() {
            return;
        }
        self.up.push((at, None));
    }

    /// felix stops being free to program now (about to be killed, a fault
    /// about to be armed).
    pub fn down_now(&mut self) {
        let now = felix_actors::clock::real_now();
        if let Some((_, to @ None)) = self.up.last_mut() {
            *to = Some(now);
        }
    }

    /// Whether felix is in an up interval now.
    pub fn is_up(&self) -> bool {
        matches!(self.up.last(), Some((_, None)))
    }

    /// Whether felix was in an up interval at `t`.
    pub fn up_at(&self, t: Instant) -> bool {
        self.up
            .iter()
            .any(|&(from, to)| from <= t && to.is_none_or(|to| t < to))
    }

    /// The instant by which a change made at `changed` must be in the
    /// kernel: `bound` after felix first had it while up, counting only an
    /// up interval that lasts that long (an interval cut short before the
    /// deadline moves it to the next one). `None` when no interval has
    /// given felix `bound` yet (the change is not due).
    pub fn due(&self, changed: Instant, bound: Duration) -> Option<Instant> {
        for &(from, to) in &self.up {
            if to.is_some_and(|to| to <= changed) {
                continue;
            }
            let deadline = from.max(changed) + bound;
            match to {
                None => return Some(deadline),
                Some(to) if deadline <= to => return Some(deadline),
                Some(_) => {}
            }
        }
        None
    }

    /// The chaos events around `t` (the last one before it and the next
    /// one after it), described relative to `t`.
    pub fn around(&self, t: Instant) -> String {
        let before = self.events.iter().rev().find(|e| e.at <= t);
        let after = self.events.iter().find(|e| e.at > t);
        let mut parts = Vec::new();
        if let Some(e) = before {
            parts.push(format!(
                "{} ms after '{}' ({})",
                t.duration_since(e.at).as_millis(),
                e.what,
                self.rel(e.at)
            ));
        }
        if let Some(e) = after {
            parts.push(format!(
                "{} ms before '{}' ({})",
                e.at.duration_since(t).as_millis(),
                e.what,
                self.rel(e.at)
            ));
        }
        if parts.is_empty() {
            "no chaos event yet".into()
        } else {
            parts.join("; ")
        }
    }
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_skips_intervals_too_short_for_the_bound() {
        let mut t = Timeline::new();
        let s = t.start();
        let ms = Duration::from_millis;
        t.up.push((s + ms(100), Some(s + ms(500))));
        t.up.push((s + ms(800), Some(s + ms(3000))));
        // Changed while up, but killed 100 ms later: due in the next interval.
        assert_eq!(t.due(s + ms(400), ms(1000)), Some(s + ms(1800)));
        // Changed while down: due `bound` after the next start.
        assert_eq!(t.due(s + ms(600), ms(1000)), Some(s + ms(1800)));
        // Changed in the second interval with time to spare.
        assert_eq!(t.due(s + ms(1000), ms(1000)), Some(s + ms(2000)));
        // Changed too late in the last closed interval: not due yet.
        assert_eq!(t.due(s + ms(2500), ms(1000)), None);
        t.up.push((s + ms(4000), None));
        assert_eq!(t.due(s + ms(2500), ms(1000)), Some(s + ms(5000)));
    }
}
