//! The apply's lanes (`DriverSpec::in_lane`): within a lane IP sets come before tables and
//! tables before IP-set deletions; lanes run side by side, and one failing lane holds only
//! its own tables. A driver without a lane puts every IP-set and *tables driver in one lane.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use felix_actors::*;
use parking_lot::Mutex;

const SETS4: &str = "driver/ipsets-v4";
const TABLES4: &str = "driver/filter-v4";
const SETS6: &str = "driver/ipsets-v6";
const TABLES6: &str = "driver/filter-v6";

/// How long the IPv4 IP-set driver waits for the IPv6 tables before giving up.
const MEET_WITHIN: Duration = Duration::from_secs(3);

#[derive(Default)]
struct World {
    /// (driver, call) in the order the calls ran.
    log: Mutex<Vec<(&'static str, &'static str)>>,
    /// The IPv6 tables driver has applied.
    tables6_applied: AtomicBool,
    /// The IPv4 IP-set driver saw the IPv6 tables applied while it was still running.
    met: AtomicBool,
}

struct LaneDriver {
    name: &'static str,
    /// Whether `apply` fails.
    fails: bool,
    world: Arc<World>,
}

impl Driver for LaneDriver {
    type Desired = ();

    fn apply(&mut self, _: &()) -> Result<(), DriverError> {
        self.world.log.lock().push((self.name, "apply"));
        if self.fails {
            return Err(DriverError::op(
                "create",
                FailureKind::Refused,
                "the kernel refused",
            ));
        }
        match self.name {
            // Stays in its IP-set step until the IPv6 tables are in (or the wait runs out).
            SETS4 => {
                let start = clock::real_now();
                while start.elapsed() < MEET_WITHIN {
                    if self.world.tables6_applied.load(Ordering::SeqCst) {
                        self.world.met.store(true, Ordering::SeqCst);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            TABLES6 => self.world.tables6_applied.store(true, Ordering::SeqCst),
            _ => {}
        }
        Ok(())
    }

    fn apply_deletions(&mut self, _: &()) -> Result<(), DriverError> {
        self.world.log.lock().push((self.name, "deletions"));
        Ok(())
    }

    fn queue_resync(&mut self) {}

    fn is_dirty(&self) -> bool {
        false
    }
}

/// Starts a supervisor with the four drivers, each in its IP version's lane except those
/// named in `laneless`, the drivers named in `failing` failing every apply.
fn start(world: &Arc<World>, laneless: &[&str], failing: &[&str]) -> SupervisorHandle<()> {
    let cfg = SupervisorConfig {
        apply_rate_per_sec: 200,
        retry_interval: Duration::from_secs(3600),
        retry_backoff: Duration::from_secs(3600),
        retry_backoff_max: Duration::from_secs(3600),
        route_refresh_interval: None,
        ipsets_refresh_interval: None,
        tables_refresh_interval: None,
        summary_interval: Duration::from_secs(3600),
        ..SupervisorConfig::default()
    };
    let mut b = SupervisorBuilder::new(cfg, |_: &()| StateKey::Transient);
    for (name, phase, lane) in [
        (SETS4, Phase::IpSets, 4),
        (TABLES4, Phase::Tables, 4),
        (SETS6, Phase::IpSets, 6),
        (TABLES6, Phase::Tables, 6),
    ] {
        let (w, fails) = (world.clone(), failing.contains(&name));
        let mut spec = DriverSpec::new(name, phase, DesiredInput::new(()), move |_: &ActorSeam| {
            LaneDriver {
                name,
                fails,
                world: w.clone(),
            }
        });
        if !laneless.contains(&name) {
            spec = spec.in_lane(lane);
        }
        b = b.driver(spec);
    }
    b.start().unwrap()
}

async fn first_apply(h: &SupervisorHandle<()>) -> StatusSnapshot {
    h.addr.do_send(InSync);
    let start = clock::real_now();
    loop {
        let s = h.addr.send(GetStatus).await.unwrap();
        if s.applies >= 1 {
            return s;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no apply: {s:?}");
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

fn position(log: &[(&str, &str)], entry: (&str, &str)) -> Option<usize> {
    log.iter().position(|e| *e == entry)
}

/// Within each lane: sets, then tables, then deletions.
fn assert_lane_order(log: &[(&str, &str)]) {
    for (sets, tables) in [(SETS4, TABLES4), (SETS6, TABLES6)] {
        let s = position(log, (sets, "apply")).expect("sets applied");
        let t = position(log, (tables, "apply")).expect("tables applied");
        let d = position(log, (sets, "deletions")).expect("deletions applied");
        assert!(s < t && t < d, "{sets} / {tables} out of order: {log:?}");
    }
}

#[actix_rt::test]
async fn each_lane_programs_its_tables_without_waiting_for_another_lanes_sets() {
    let world = Arc::new(World::default());
    let h = start(&world, &[], &[]);
    let s = first_apply(&h).await;
    assert!(s.last_apply.as_ref().is_some_and(|l| l.ok), "{s:?}");
    assert!(
        world.met.load(Ordering::SeqCst),
        "the IPv6 tables waited for the IPv4 IP sets: {:?}",
        world.log.lock()
    );
    assert_lane_order(&world.log.lock());
}

#[actix_rt::test]
async fn a_failing_ip_set_driver_holds_only_the_tables_of_its_own_lane() {
    let world = Arc::new(World::default());
    let h = start(&world, &[], &[SETS4]);
    let s = first_apply(&h).await;
    assert!(s.last_apply.as_ref().is_some_and(|l| !l.ok), "{s:?}");
    let log = world.log.lock().clone();
    assert_eq!(position(&log, (TABLES4, "apply")), None, "{log:?}");
    assert_eq!(position(&log, (SETS4, "deletions")), None, "{log:?}");
    let (s6, t6, d6) = (
        position(&log, (SETS6, "apply")),
        position(&log, (TABLES6, "apply")),
        position(&log, (SETS6, "deletions")),
    );
    assert!(
        s6 < t6 && t6 < d6 && s6.is_some(),
        "the IPv6 lane ran in order: {log:?}"
    );
}

#[actix_rt::test]
async fn a_driver_without_a_lane_puts_every_set_before_every_table() {
    let world = Arc::new(World::default());
    let h = start(&world, &[TABLES6], &[]);
    let s = first_apply(&h).await;
    assert!(s.last_apply.as_ref().is_some_and(|l| l.ok), "{s:?}");
    assert!(
        !world.met.load(Ordering::SeqCst),
        "a lane-less tables driver ran before every IP set was in"
    );
    let log = world.log.lock().clone();
    assert_lane_order(&log);
    let last_sets = [SETS4, SETS6]
        .iter()
        .filter_map(|s| position(&log, (s, "apply")))
        .max();
    let first_tables = [TABLES4, TABLES6]
        .iter()
        .filter_map(|t| position(&log, (t, "apply")))
        .min();
    assert!(last_sets < first_tables, "{log:?}");
}
