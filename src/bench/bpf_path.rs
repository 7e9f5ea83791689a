//! Where the time of BPF mode's changed-policy path goes: its CPU parts timed in process,
//! without the kernel, on the same start of day as `felix bench dataplane --backend bpf`.
//!
//! The daemon path of one changed policy in BPF mode: `manager/bpf-endpoints` rebuilds its
//! whole desired state (`BpfEndpointManager::desired`, which clones the policy and profile
//! maps) and compares it with the published one; `driver/bpf` then resolves every desired
//! interface's ifindex through sysfs, skips the unchanged policies (`Arc` identity), compiles
//! and writes the changed one (`PolicyWriter::apply_policy`: compile, assemble, one batched
//! record write and one index swap), and compares each interface's endpoint with the one
//! written. Each part is timed here on its own, the median of [`ROUNDS`] (the sysfs reads
//! also beside the same lookups by `if_nametoindex`); the kernel writes go to a fake store
//! that only counts them, so what is printed is the CPU time of our code, to be read beside
//! the step's apply breakdown and BPF syscall time from the real run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use felix_actors::{ApplyCtx, DesiredInput, Manager};
use felix_bpf::attach::Mechanism;
use felix_bpf::policy::{EndpointKey, EndpointList, IpSetKey, Op, PolicyIndex};
use felix_bpf::{BpfAttachType, BpfError};
use felix_proto::to_dataplane::Payload;
use felix_proto::PolicyId;

use crate::dataplane::bpf::policy::{PolicyStore, PolicyWriter};
use crate::dataplane::bpf::{BpfDesired, BpfEndpointManager};

/// Repetitions of each timing; the median is reported.
pub const ROUNDS: usize = 5;

/// The CPU parts of one changed policy, each the median of [`ROUNDS`].
#[derive(Debug, Clone, Default)]
pub struct PolicyPath {
    /// `manager/bpf-endpoints`' whole pass after the change (`complete_deferred_work`:
    /// desired state rebuilt, compared, published).
    pub manager_pass: Duration,
    /// Of which `BpfEndpointManager::desired` (the rebuild, with its clones).
    pub desired: Duration,
    /// Of which the comparison of the rebuilt state with the published one (stops at the
    /// first difference: the changed policy, after the interfaces and endpoints).
    pub compare: Duration,
    /// Of which the publication: the rebuilt state replaces the published one (which is
    /// dropped).
    pub publish: Duration,
    /// `PolicyWriter::apply_policy` of the changed policy (compile, assemble, the writes to
    /// a counting fake store), with every policy and profile of the start of day written.
    pub writer: Duration,
    /// Records the changed policy's write carried.
    pub records: usize,
    /// Reading every desired interface's ifindex from sysfs, as `driver/bpf` does per apply.
    pub ifindex_reads: Duration,
    /// Interfaces read.
    pub interfaces: usize,
    /// The same lookups with `if_nametoindex` (one ioctl each, no file opened): what the
    /// sysfs reads would cost done that way.
    pub ifindex_ioctls: Duration,
    /// Comparing every interface's endpoint with the one last written, as `driver/bpf` does.
    pub endpoint_compare: Duration,
}

impl std::fmt::Display for PolicyPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "  bpf changed-policy CPU parts, in process (median of {ROUNDS}): manager pass {:.2} ms \
             (desired() {:.2} ms, compare {:.2} ms, publish {:.2} ms); writer apply_policy {:.3} ms \
             ({} records); ifindex reads {:.2} ms ({} interfaces; by if_nametoindex {:.2} ms); endpoint compares {:.3} ms",
            ms(self.manager_pass),
            ms(self.desired),
            ms(self.compare),
            ms(self.publish),
            ms(self.writer),
            self.records,
            ms(self.ifindex_reads),
            self.interfaces,
            ms(self.ifindex_ioctls),
            ms(self.endpoint_compare),
        )
    }
}

/// A policy store that only counts what it is asked to write.
#[derive(Debug, Default)]
struct CountingStore {
    records: Arc<AtomicUsize>,
}

impl PolicyStore for CountingStore {
    fn write_records(&mut self, _base: u32, records: &[Op]) -> Result<(), BpfError> {
        self.records.fetch_add(records.len(), Ordering::Relaxed);
        Ok(())
    }
    fn set_policy(&mut self, _handle: u32, _idx: &PolicyIndex) -> Result<(), BpfError> {
        Ok(())
    }
    fn delete_policy(&mut self, _handle: u32) -> Result<(), BpfError> {
        Ok(())
    }
    fn set_endpoint(
        &mut self,
        _mech: Mechanism,
        _key: EndpointKey,
        _list: &EndpointList,
    ) -> Result<(), BpfError> {
        Ok(())
    }
    fn delete_endpoint(&mut self, _mech: Mechanism, _key: EndpointKey) -> Result<(), BpfError> {
        Ok(())
    }
    fn add_member(&mut self, _key: &IpSetKey) -> Result<(), BpfError> {
        Ok(())
    }
    fn delete_member(&mut self, _key: &IpSetKey) -> Result<(), BpfError> {
        Ok(())
    }
}

/// The ifindex of interface `name` (0 if there is none).
fn if_nametoindex(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call, which only
    // reads it.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = felix_actors::clock::real_now();
    let r = f();
    (r, t.elapsed())
}

/// Times the parts. `start` is the start-of-day batch, `changes` alternating versions of
/// one policy's update (each differs from the one before), `sysfs_net` where interfaces
/// are looked up (`/sys/class/net`; a missing one counts as read).
pub fn measure(
    start: &[Payload],
    changes: &[Payload; 2],
    sysfs_net: &std::path::Path,
) -> PolicyPath {
    let mut out = PolicyPath::default();

    // manager/bpf-endpoints.
    let cell = DesiredInput::new(BpfDesired::default());
    let mut m = BpfEndpointManager::new(cell.clone(), BpfAttachType::Tcx);
    for p in start.iter().filter(|p| BpfEndpointManager::wants(p)) {
        m.on_update(p);
    }
    let mut seq = 1;
    let mut pass = |m: &mut BpfEndpointManager| {
        seq += 1;
        let mut ctx = ApplyCtx::new("manager/bpf-endpoints", false, seq);
        timed(|| m.complete_deferred_work(&mut ctx)).1
    };
    pass(&mut m);
    let mut passes = vec![];
    for i in 0..ROUNDS {
        m.on_update(&changes[i % 2]);
        passes.push(pass(&mut m));
    }
    // The pass's parts on their own, in the order it runs them.
    let (mut desireds, mut compares, mut writes) = (vec![], vec![], vec![]);
    for i in 0..ROUNDS {
        m.on_update(&changes[(i + 1) % 2]);
        let (want, t) = timed(|| m.desired());
        desireds.push(t);
        let (differs, t) = timed(|| cell.read(|d| *d != want));
        compares.push(t);
        if differs {
            writes.push(timed(|| cell.write(|d| *d = want)).1);
        }
        // Clears the manager's dirty flag (rebuilds, finds nothing new).
        pass(&mut m);
    }
    out.manager_pass = median(passes);
    out.desired = median(desireds);
    out.compare = median(compares);
    out.publish = median(writes);

    // The writer, loaded with the start of day's policies and profiles.
    let desired = cell.read(Clone::clone);
    let records = Arc::new(AtomicUsize::new(0));
    let mut w = PolicyWriter::new(CountingStore {
        records: records.clone(),
    });
    for ((name, namespace, kind), p) in &desired.policies {
        let id = PolicyId {
            name: name.clone(),
            namespace: namespace.clone(),
            kind: kind.clone(),
        };
        let _ = w.apply_policy(&id, p);
    }
    for (name, p) in &desired.profiles {
        let _ = w.apply_profile(name, p);
    }
    let mut writes = vec![];
    for i in 0..ROUNDS {
        let Payload::ActivePolicyUpdate(u) = &changes[i % 2] else {
            continue;
        };
        let (Some(id), Some(p)) = (&u.id, &u.policy) else {
            continue;
        };
        let before = records.load(Ordering::Relaxed);
        writes.push(timed(|| w.apply_policy(id, p)).1);
        out.records = records.load(Ordering::Relaxed) - before;
    }
    out.writer = median(writes);

    // driver/bpf's per-apply interface lookups and endpoint comparisons.
    let names: Vec<&String> = desired.ifaces.keys().collect();
    out.interfaces = names.len();
    let mut reads = vec![];
    let mut ioctls = vec![];
    let mut cmps = vec![];
    // The driver keeps the Arcs of the endpoints it wrote, which are the desired ones.
    let written: Vec<Option<Arc<felix_proto::WorkloadEndpoint>>> = names
        .iter()
        .map(|n| desired.endpoints.get(*n).cloned())
        .collect();
    for _ in 0..ROUNDS {
        reads.push(
            timed(|| {
                names
                    .iter()
                    .filter_map(|n| std::fs::read_to_string(sysfs_net.join(n).join("ifindex")).ok())
                    .count()
            })
            .1,
        );
        ioctls.push(
            timed(|| {
                names
                    .iter()
                    .filter(|n| if_nametoindex(n.as_str()) != 0)
                    .count()
            })
            .1,
        );
        cmps.push(
            timed(|| {
                names
                    .iter()
                    .zip(&written)
                    .filter(|(n, w)| **w == desired.endpoints.get(**n).cloned())
                    .count()
            })
            .1,
        );
    }
    out.ifindex_reads = median(reads);
    out.ifindex_ioctls = median(ioctls);
    out.endpoint_compare = median(cmps);
    out
}
