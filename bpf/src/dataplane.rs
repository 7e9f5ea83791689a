//! The loader: one [`BpfDataplane`] owns the pinned maps, loads the generic programs into the
//! jump maps, puts each endpoint's policy in its slot, and attaches one preamble per
//! interface and direction.
//!
//! # Design
//! * Jump maps come in one set per (attach mechanism, TC direction): the kernel refuses a
//!   program of another expected attach type in a `prog_array` (EINVAL). Each set is a
//!   generic programs map (`cali_progs_*`, fixed slots, debug at an offset) and a
//!   per-endpoint map (`cali_jump_*`, one policy slot per endpoint and direction, slot 0 the
//!   match-all log filter). Both are pinned: an unpinned `prog_array` is emptied when its
//!   last user closes it, and every tail call would then drop.
//! * A policy update rewrites only the endpoint's slot ([`BpfDataplane::set_policy`]); the
//!   generic programs and the preamble are untouched.
//! * The preamble carries the interface's [`TcGlobals`] in `.rodata`. It is re-loaded and
//!   re-attached only when the globals it would write differ from the recorded ones or the
//!   recorded attachment is gone. The record (mechanism, globals, program id) of each hook is
//!   kept in memory and rebuilt from the pins at start ([`BpfDataplane::start`]).
//! * Moving a hook to another mechanism removes the old attachment (a clsact filter left
//!   behind would run after, or instead of, the TCX program).
//! * Restart with the same layout (the common case): when `<mech>/cali_layout` holds this
//!   binary's [`layout_identity`] the jump maps an earlier run pinned are *adopted*: kept
//!   as they are, with the generic programs in them (re-loaded only if one of them uses a
//!   map that has been replaced since, see [`crate::identity`]), and every recorded hook
//!   whose preamble uses exactly these jump maps is taken as it runs: its next
//!   [`BpfDataplane::apply`] re-loads nothing unless its globals or mechanism differ or its
//!   attachment is gone. A restart therefore loads no program and attaches nothing.
//! * Restart across a layout change (or without an identity pin): the jump maps an earlier
//!   run pinned are set aside (their pins, the identity and the pinned interpreters moved to
//!   `<mech>/old/<n>/`) and fresh ones are created. The preambles the earlier run attached
//!   keep tail-calling through the set-aside maps, whose pins keep them populated (an
//!   unpinned `prog_array` is emptied when its last user reference goes). Every hook found at
//!   start is *stale*: its next [`BpfDataplane::apply`] re-loads and re-attaches its preamble
//!   against the fresh maps whatever its globals. Once no stale hook is left (each
//!   re-attached or removed) the set-aside pins are removed, which frees the old maps and
//!   programs. An old preamble therefore never tail-calls into maps of another layout.
//! * A hook found in an adopted directory whose preamble does not use the current jump maps
//!   (an earlier run stopped before re-attaching it after a set-aside) is stale too.
//! * The policy programs of a jump-map set are loaded once per run and shared by every slot;
//!   a slot already holding the wanted program is not rewritten (a resync costs a lookup per
//!   hook, not a program load).
//!
//! # Pins (under `root`, normally `/sys/fs/bpf/cali`)
//! `cali_iface4`; `<mech>/cali_progs_<dir>2`, `<mech>/cali_jump_<dir>2`, `<mech>/cali_layout`
//! (the layout identity), `<mech>/cali_polr_<dir>` (the policy interpreter, pinned by
//! [`crate::PolicyProgram::open_or_load`]);
//! `<mech>/hooks/if<ifindex>_<dir>/{prog,globals[,link]}` per attached hook;
//! `<mech>/old/<n>/` an earlier run's jump maps, while its preambles still use them.
//!
//! # Thread safety
//! Not shared: one driver owns it and calls it from its blocking apply step (every call
//! blocks on syscalls through the seam).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use libbpf_rs::libbpf_sys;
use libbpf_rs::{
    AsRawLibbpf, Link, MapCore, MapFlags, MapHandle, Object, ObjectBuilder, Program,
    ProgramAttachType, ProgramInput, TcHookBuilder, TC_EGRESS, TC_INGRESS,
};

use crate::attach::Mechanism;
use crate::conntrack::Conntrack;
use crate::identity::{
    layout_identity, pin_identity, pinned_identity, program_map_ids, program_name,
    uses_current_maps, PinnedMaps, LAYOUT_MAP,
};
use crate::layout::*;
use crate::maps::{
    ensure_bpffs, jump_map, progs_map, remove_old_versions, IfaceMap, JumpMap, SlotAllocator,
    IFACE_MAP,
};
use crate::ops::{op, BpfError, BpfOps};

/// The compiled objects, built by `build.rs` from `progs/`.
pub mod objects {
    /// The preamble (`tc_preamble.c`).
    pub const TC_PREAMBLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tc_preamble.o"));
    /// main, accepted, drop: fast path.
    pub const TC_MAIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tc_main.o"));
    /// main, accepted, drop: debug path.
    pub const TC_MAIN_DEBUG: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tc_main_debug.o"));
    /// Default allow / deny policies and the match-all log filter.
    pub const POLICY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/policy.o"));
    /// The same, logging (debug build).
    pub const POLICY_DEBUG: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/policy_debug.o"));
}

/// clsact filter handle of felix's preamble (how a filter is recognised as ours).
pub const TC_HANDLE: u32 = 0xca11;
/// clsact filter priority of felix's preamble.
pub const TC_PRIORITY: u32 = 1;
/// Per-endpoint map slot of the match-all log filter.
pub const LOG_FILTER_ALL_SLOT: u32 = 0;

/// A default policy program (part 1's policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Continue at `cb[0]` (allow).
    Allow,
    /// Continue at `cb[1]` (deny).
    Deny,
    /// The policy interpreter, installed by the caller's hook (see
    /// [`BpfDataplane::apply_with`]): the loader leaves the slot to it.
    Rules,
}

/// What an endpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointKind {
    /// A workload interface.
    Workload,
    /// A host endpoint.
    Host,
}

/// Where a loader keeps its pins.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where a bpffs must be mounted (mounted if not): `/sys/fs/bpf`.
    pub bpffs: PathBuf,
    /// felix's pin directory: `/sys/fs/bpf/cali`.
    pub root: PathBuf,
    /// `BPFLogLevel == debug`: load the debug path and the match-all log filter.
    pub debug: bool,
    /// `BPFMapSizeConntrack`: capacity of `cali_ct`.
    pub ct_capacity: u32,
}

/// `BPFMapSizeConntrack`'s default.
pub const DEFAULT_CT_CAPACITY: u32 = 512_000;

impl Default for Options {
    fn default() -> Self {
        Self {
            bpffs: PathBuf::from("/sys/fs/bpf"),
            root: PathBuf::from("/sys/fs/bpf/cali"),
            debug: false,
            ct_capacity: DEFAULT_CT_CAPACITY,
        }
    }
}

/// One hook to program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachPoint {
    /// Interface index.
    pub ifindex: u32,
    /// Interface name (for logs and `cali_iface`).
    pub name: String,
    /// TC direction.
    pub hook: Hook,
    /// Attach mechanism (see [`crate::attach::select_mechanism`]).
    pub mechanism: Mechanism,
    /// Workload or host endpoint.
    pub kind: EndpointKind,
    /// The endpoint's policy for this direction.
    pub policy: PolicyKind,
}

/// What [`BpfDataplane::apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachOutcome {
    /// Same globals, attachment present: nothing re-loaded.
    Unchanged,
    /// A preamble was loaded and attached.
    Attached,
}

/// What a hook was attached with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookRecord {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// The preamble's globals.
    pub globals: TcGlobals,
    /// The attached preamble's program id.
    pub prog_id: u32,
}

/// One set of jump maps (per mechanism and direction) and its slot allocator.
#[derive(Debug)]
struct JumpSet {
    progs: JumpMap,
    jump: JumpMap,
    /// The kernel ids of `progs` and `jump` (what an adopted preamble must use).
    ids: (u32, u32),
    /// Both maps were pinned by an earlier run of this layout and kept (see the module doc).
    adopted: bool,
    generic_loaded: bool,
    /// The policy programs, loaded once per run for this set (ids by program name).
    policy: Option<(Object, BTreeMap<&'static str, u32>)>,
}

/// The BPF loader and attacher (see the module doc).
#[derive(Debug)]
pub struct BpfDataplane {
    ops: BpfOps,
    opts: Options,
    iface: IfaceMap,
    ct: Conntrack,
    sets: BTreeMap<(Mechanism, Hook), JumpSet>,
    /// Per-endpoint slots per direction, shared by the mechanisms: a slot number names one
    /// endpoint's direction node-wide (the key of its per-endpoint state in other maps), and
    /// a hook moved to another mechanism keeps its slot.
    slots: BTreeMap<Hook, SlotAllocator>,
    hooks: BTreeMap<(u32, Hook), HookRecord>,
    /// Hooks attached by an earlier run, still using its set-aside jump maps.
    stale: std::collections::BTreeSet<(u32, Hook)>,
    /// Mechanisms whose directory held this layout's identity at start: their jump maps are
    /// adopted, not set aside.
    adopted: std::collections::BTreeSet<Mechanism>,
}

/// The directory of set-aside jump maps of one mechanism's directory.
const SET_ASIDE_DIR: &str = "old";

/// A loaded, unattached preamble (for `BPF_PROG_TEST_RUN`).
#[derive(Debug)]
pub struct Preamble {
    obj: Object,
}

/// The `__sk_buff` fields a test run sets and reads back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkbCtx {
    /// `skb->mark`.
    pub mark: u32,
    /// `skb->ifindex` (0: loopback of the caller's namespace).
    pub ifindex: u32,
    /// `skb->cb`.
    pub cb: [u32; 5],
}

/// The result of a test run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestRun {
    /// The chain's verdict (`TC_ACT_*`).
    pub verdict: i32,
    /// The context after the run.
    pub ctx: SkbCtx,
}

/// `TC_ACT_OK`.
pub const TC_ACT_OK: i32 = 0;
/// `TC_ACT_SHOT`.
pub const TC_ACT_SHOT: i32 = 2;
/// `TC_ACT_REDIRECT`.
pub const TC_ACT_REDIRECT: i32 = 7;

/// Size of `struct __sk_buff` (kernel 6.x) and the offsets of the fields a test run uses.
const SKB_SIZE: usize = 192;
const SKB_MARK: usize = 8;
const SKB_IFINDEX: usize = 40;
const SKB_CB: usize = 48;

impl SkbCtx {
    fn to_bytes(self) -> Vec<u8> {
        let mut b = vec![0u8; SKB_SIZE];
        let put =
            |b: &mut [u8], off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        put(&mut b, SKB_MARK, self.mark);
        put(&mut b, SKB_IFINDEX, self.ifindex);
        for (i, v) in self.cb.iter().enumerate() {
            put(&mut b, SKB_CB + 4 * i, *v);
        }
        b
    }

    fn from_bytes(b: &[u8]) -> Self {
        let get = |off: usize| {
            b.get(off..off + 4)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_ne_bytes)
                .unwrap_or(0)
        };
        let cb_off = SKB_CB;
        Self {
            mark: get(SKB_MARK),
            ifindex: get(SKB_IFINDEX),
            cb: [0, 1, 2, 3, 4].map(|i| get(cb_off + 4 * i)),
        }
    }
}

impl Preamble {
    /// Runs the whole chain on `packet` (an Ethernet frame) with `BPF_PROG_TEST_RUN`, in the
    /// calling thread's network namespace.
    pub fn test_run(
        &mut self,
        ops: &BpfOps,
        packet: &[u8],
        ctx: SkbCtx,
    ) -> Result<TestRun, BpfError> {
        let prog = self
            .obj
            .progs_mut()
            .find(|p| p.name() == "cali_tc_preamble")
            .ok_or_else(|| missing("cali_tc_preamble"))?;
        let mut ctx_in = ctx.to_bytes();
        let mut ctx_out = vec![0u8; SKB_SIZE];
        let mut data_out = vec![0u8; packet.len() + 256];
        let ret = ops.lib(op::TEST_RUN, "cali_tc_preamble", || {
            let input = ProgramInput {
                data_in: Some(packet),
                context_in: Some(&mut ctx_in),
                context_out: Some(&mut ctx_out),
                data_out: Some(&mut data_out),
                ..Default::default()
            };
            prog.test_run(input).map(|o| o.return_value)
        })?;
        Ok(TestRun {
            verdict: ret as i32,
            ctx: SkbCtx::from_bytes(&ctx_out),
        })
    }

    /// The preamble program.
    pub fn program(&self) -> Result<Program<'_>, BpfError> {
        find_prog(&self.obj, "cali_tc_preamble")
    }
}

fn missing(name: &str) -> BpfError {
    BpfError::Unexpected {
        op: op::PROG_LOAD,
        what: name.to_string(),
        reason: "program missing from its object".into(),
    }
}

fn find_prog<'o>(obj: &'o Object, name: &str) -> Result<Program<'o>, BpfError> {
    obj.progs()
        .find(|p| p.name() == name)
        .ok_or_else(|| missing(name))
}

fn expected_attach(mech: Mechanism, hook: Hook) -> Option<ProgramAttachType> {
    match (mech, hook) {
        (Mechanism::Tc, _) => None,
        (Mechanism::Tcx, Hook::Ingress) => Some(ProgramAttachType::TcxIngress),
        (Mechanism::Tcx, Hook::Egress) => Some(ProgramAttachType::TcxEgress),
        (Mechanism::Netkit, Hook::Ingress) => Some(ProgramAttachType::NetkitPeer),
        (Mechanism::Netkit, Hook::Egress) => Some(ProgramAttachType::NetkitPrimary),
    }
}

/// Opens `bytes` as object `name`, binds its maps named in `maps` to those fds, sets its
/// `.rodata` to `rodata`, gives every program `attach` as expected attach type and loads it.
fn load_object(
    ops: &BpfOps,
    pin_root: &Path,
    bytes: &[u8],
    name: &str,
    (mech, hook): (Mechanism, Hook),
    maps: &[(&str, BorrowedFd<'_>)],
    rodata: Option<&[u8]>,
) -> Result<Object, BpfError> {
    ops.lib(op::PROG_LOAD, name, || {
        let mut builder = ObjectBuilder::default();
        builder.name(name)?;
        // Maps pinned by name (the packet state `cali_state2`) live under felix's root.
        builder.pin_root_path(pin_root)?;
        let mut open = builder.open_memory(bytes)?;
        for mut m in open.maps_mut() {
            let mname = m.name().to_string_lossy().into_owned();
            if let Some((_, fd)) = maps.iter().find(|(n, _)| *n == mname) {
                m.reuse_fd(*fd)?;
            } else if mname.ends_with(".rodata") {
                if let Some(r) = rodata {
                    m.set_initial_value(r)?;
                }
            }
        }
        for mut p in open.progs_mut() {
            if let Some(t) = expected_attach(mech, hook) {
                p.set_attach_type(t);
            }
        }
        open.load()
    })
}

fn hook_dir(root: &Path, mech: Mechanism, ifindex: u32, hook: Hook) -> PathBuf {
    root.join(mech.dir_name())
        .join("hooks")
        .join(format!("if{ifindex}_{}", hook.suffix()))
}

fn parse_hook_dir(name: &str) -> Option<(u32, Hook)> {
    let rest = name.strip_prefix("if")?;
    let (idx, sfx) = rest.split_once('_')?;
    Some((idx.parse().ok()?, Hook::from_suffix(sfx)?))
}

/// Moves the pins `names` in `dir` (an earlier run's jump maps, its layout identity and its
/// interpreters) into a fresh `dir/old/<n>/`, `n` one above any generation already set aside
/// (a run that stopped before re-attaching everything leaves its own set-aside maps, still
/// used by some preambles).
fn set_aside_jump_maps(ops: &BpfOps, dir: &Path, names: &[String]) -> Result<(), BpfError> {
    let present: Vec<PathBuf> = names
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.exists())
        .collect();
    if present.is_empty() {
        return Ok(());
    }
    let old = dir.join(SET_ASIDE_DIR);
    let next = std::fs::read_dir(&old)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
                .max()
                .map_or(0, |n| n.saturating_add(1))
        })
        .unwrap_or(0);
    let gen = old.join(next.to_string());
    ops.run(op::SET_ASIDE, gen.display(), || {
        std::fs::create_dir_all(&gen)
    })?;
    for pin in present {
        let to = gen.join(pin.file_name().unwrap_or_default());
        ops.run(op::SET_ASIDE, pin.display(), || std::fs::rename(&pin, &to))?;
    }
    Ok(())
}

fn remove_file_if_exists(ops: &BpfOps, path: &Path) -> Result<(), BpfError> {
    if path.exists() {
        ops.run(op::UNPIN, path.display(), || std::fs::remove_file(path))?;
    }
    Ok(())
}

impl BpfDataplane {
    /// Start of day: mounts the bpffs if needed, removes old map versions, opens (or creates)
    /// `cali_iface` and rebuilds the hook records and slot allocators from the pins.
    pub fn start(ops: BpfOps, opts: Options) -> Result<Self, BpfError> {
        route_libbpf_logs();
        ensure_bpffs(&ops, &opts.bpffs)?;
        ops.run(op::MOUNT, opts.root.display(), || {
            std::fs::create_dir_all(&opts.root)
        })?;
        remove_old_versions(&ops, &opts.root, &[IFACE_MAP])?;
        let iface = IfaceMap::open_or_create(&ops, &opts.root)?;
        let ct = Conntrack::open(&ops, &opts.root, opts.ct_capacity)?;
        let mut dp = Self {
            ops,
            opts,
            iface,
            ct,
            sets: BTreeMap::new(),
            slots: Hook::ALL
                .iter()
                .map(|h| {
                    let mut s = SlotAllocator::new(JUMP_SLOTS);
                    s.mark_used(LOG_FILTER_ALL_SLOT);
                    (*h, s)
                })
                .collect(),
            hooks: BTreeMap::new(),
            stale: Default::default(),
            adopted: Default::default(),
        };
        let identity = layout_identity(dp.opts.debug);
        for mech in [Mechanism::Tc, Mechanism::Tcx] {
            let dir = dp.opts.root.join(mech.dir_name());
            let specs: Vec<_> = Hook::ALL
                .iter()
                .flat_map(|h| [progs_map(*h), jump_map(*h)])
                .chain([LAYOUT_MAP])
                .collect();
            remove_old_versions(&dp.ops, &dir, &specs)?;
            if pinned_identity(&dp.ops, &dir)? == Some(identity) {
                dp.adopted.insert(mech);
            } else {
                let names: Vec<String> = specs
                    .iter()
                    .map(|s| s.versioned_name())
                    .chain(
                        Hook::ALL
                            .iter()
                            .map(|h| crate::polmaps::interpreter_pin(*h)),
                    )
                    .collect();
                set_aside_jump_maps(&dp.ops, &dir, &names)?;
                // From here every jump map of this directory is of this layout.
                dp.ops
                    .run(op::MOUNT, dir.display(), || std::fs::create_dir_all(&dir))?;
                pin_identity(&dp.ops, &dir, identity)?;
            }
            dp.rebuild_records(mech)?;
        }
        // Nothing attached uses set-aside maps (e.g. every hook was removed while down).
        dp.retire_set_aside()?;
        Ok(dp)
    }

    /// Whether the jump maps of `mech` an earlier run left were adopted at start (same layout
    /// identity) rather than set aside.
    pub fn adopted(&self, mech: Mechanism) -> bool {
        self.adopted.contains(&mech)
    }

    /// Hooks attached by an earlier run that still tail-call through its set-aside jump maps
    /// (re-attached by their next [`BpfDataplane::apply`]).
    pub fn stale_hooks(&self) -> impl Iterator<Item = (u32, Hook)> + '_ {
        self.stale.iter().copied()
    }

    /// Whether an earlier run's jump maps are still set aside (pinned under `<mech>/old`).
    pub fn has_set_aside_maps(&self) -> bool {
        [Mechanism::Tc, Mechanism::Tcx].iter().any(|m| {
            self.opts
                .root
                .join(m.dir_name())
                .join(SET_ASIDE_DIR)
                .exists()
        })
    }

    /// Removes the set-aside jump maps once no stale hook uses them.
    fn retire_set_aside(&mut self) -> Result<(), BpfError> {
        if !self.stale.is_empty() {
            return Ok(());
        }
        for mech in [Mechanism::Tc, Mechanism::Tcx] {
            let old = self.opts.root.join(mech.dir_name()).join(SET_ASIDE_DIR);
            if old.exists() {
                tracing::debug!(dir = %old.display(), "removing set-aside jump maps");
                self.ops
                    .run(op::UNPIN, old.display(), || std::fs::remove_dir_all(&old))?;
            }
        }
        Ok(())
    }

    fn rebuild_records(&mut self, mech: Mechanism) -> Result<(), BpfError> {
        let dir = self.opts.root.join(mech.dir_name()).join("hooks");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((ifindex, hook)) = parse_hook_dir(&name) else {
                continue;
            };
            let path = entry.path();
            let globals_pin = path.join("globals");
            let prog_pin = path.join("prog");
            if !globals_pin.exists() || !prog_pin.exists() {
                continue;
            }
            let globals_map = self.ops.lib(op::PROG_OPEN, globals_pin.display(), || {
                MapHandle::from_pinned_path(&globals_pin)
            })?;
            let bytes = self.ops.lib(op::MAP_LOOKUP, globals_pin.display(), || {
                globals_map.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            })?;
            let Some(globals) = bytes.as_deref().and_then(TcGlobals::from_bytes) else {
                continue;
            };
            let prog_fd = self.ops.lib(op::PROG_OPEN, prog_pin.display(), || {
                Program::fd_from_pinned_path(&prog_pin)
            })?;
            let prog_id = self.ops.lib(op::PROG_OPEN, prog_pin.display(), || {
                Program::id_from_fd(prog_fd.as_fd())
            })?;
            let ids = self.set(mech, hook)?.ids;
            // Adopted only if its preamble tail-calls through the maps pinned now.
            let current = self.adopted.contains(&mech) && {
                let used = program_map_ids(&self.ops, prog_fd.as_fd())?;
                used.contains(&ids.0) && used.contains(&ids.1)
            };
            if !current {
                self.stale.insert((ifindex, hook));
            }
            for slot in [globals.policy_slot, globals.log_filter_slot] {
                self.slot_alloc(hook).mark_used(slot);
            }
            self.hooks.insert(
                (ifindex, hook),
                HookRecord {
                    mechanism: mech,
                    globals,
                    prog_id,
                },
            );
        }
        Ok(())
    }

    /// The seam this loader runs its operations through.
    pub fn ops(&self) -> &BpfOps {
        &self.ops
    }

    /// The options this loader was started with.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// The `cali_iface` map.
    pub fn iface_map(&self) -> &IfaceMap {
        &self.iface
    }

    /// The conntrack map.
    pub fn conntrack(&self) -> &Conntrack {
        &self.ct
    }

    /// The record of a hook, if it is attached (as far as this loader knows).
    pub fn record(&self, ifindex: u32, hook: Hook) -> Option<&HookRecord> {
        self.hooks.get(&(ifindex, hook))
    }

    /// Every hook record.
    pub fn records(&self) -> impl Iterator<Item = ((u32, Hook), &HookRecord)> {
        self.hooks.iter().map(|(k, v)| (*k, v))
    }

    fn set(&mut self, mech: Mechanism, hook: Hook) -> Result<&mut JumpSet, BpfError> {
        if !self.sets.contains_key(&(mech, hook)) {
            let dir = self.opts.root.join(mech.dir_name());
            self.ops
                .run(op::MOUNT, dir.display(), || std::fs::create_dir_all(&dir))?;
            let existed = [progs_map(hook), jump_map(hook)]
                .iter()
                .all(|s| dir.join(s.versioned_name()).exists());
            let progs = JumpMap::open_or_create(&self.ops, progs_map(hook), &dir)?;
            let jump = JumpMap::open_or_create(&self.ops, jump_map(hook), &dir)?;
            let ids = (progs.map().id(&self.ops)?, jump.map().id(&self.ops)?);
            self.sets.insert(
                (mech, hook),
                JumpSet {
                    progs,
                    jump,
                    ids,
                    adopted: existed && self.adopted.contains(&mech),
                    generic_loaded: false,
                    policy: None,
                },
            );
        }
        self.sets
            .get_mut(&(mech, hook))
            .ok_or_else(|| BpfError::Unexpected {
                op: op::MAP_OPEN,
                what: format!("{mech:?}/{hook:?} jump maps"),
                reason: "missing after insert".into(),
            })
    }

    /// Loads the generic programs (main, accepted, drop; the debug path too when debug is on,
    /// with the match-all log filter) into the generic map of `(mech, hook)`, once per run.
    pub fn ensure_generic(&mut self, mech: Mechanism, hook: Hook) -> Result<(), BpfError> {
        let debug = self.opts.debug;
        let root = self.opts.root.clone();
        let ops = self.ops.clone();
        let set = self.set(mech, hook)?;
        if set.generic_loaded {
            return Ok(());
        }
        if set.adopted && self.generic_in_place(mech, hook)? {
            if let Some(set) = self.sets.get_mut(&(mech, hook)) {
                set.generic_loaded = true;
            }
            return Ok(());
        }
        let iface_fd = self.iface.map().fd();
        let ct_fd = self.ct.map().fd();
        let set = self
            .sets
            .get(&(mech, hook))
            .ok_or_else(|| missing("jump maps"))?;
        let attach = (mech, hook);
        let maps = [
            ("cali_progs", set.progs.map().fd()),
            ("cali_jump", set.jump.map().fd()),
            ("cali_iface", iface_fd),
            ("cali_ct", ct_fd),
        ];
        let mut variants = vec![(objects::TC_MAIN, 0)];
        if debug {
            variants.push((objects::TC_MAIN_DEBUG, PROG_DEBUG_OFFSET));
        }
        for (bytes, offset) in variants {
            let obj = load_object(&ops, &root, bytes, "cali_main", attach, &maps, None)?;
            for (name, slot) in [
                ("cali_tc_main", PROG_INDEX_MAIN),
                ("cali_tc_accepted", PROG_INDEX_ALLOWED),
                ("cali_tc_drop", PROG_INDEX_DROP),
            ] {
                let prog = find_prog(&obj, name)?;
                set.progs.set(&ops, slot + offset, prog.as_fd())?;
            }
        }
        if debug {
            let obj = load_object(
                &ops,
                &root,
                objects::POLICY_DEBUG,
                "cali_pol",
                attach,
                &maps,
                None,
            )?;
            let prog = find_prog(&obj, "cali_log_all")?;
            set.jump.set(&ops, LOG_FILTER_ALL_SLOT, prog.as_fd())?;
        }
        if let Some(set) = self.sets.get_mut(&(mech, hook)) {
            set.generic_loaded = true;
        }
        Ok(())
    }

    /// Whether the adopted generic map of `(mech, hook)` holds every generic program this
    /// loader would load (and the match-all log filter when debug is on), each using only the
    /// maps pinned now.
    fn generic_in_place(&mut self, mech: Mechanism, hook: Hook) -> Result<bool, BpfError> {
        let ops = self.ops.clone();
        let pinned = PinnedMaps::scan(&ops, &self.opts.root, mech)?;
        // (in the generic map, slot)
        let fast = [PROG_INDEX_MAIN, PROG_INDEX_ALLOWED, PROG_INDEX_DROP];
        let mut wanted: Vec<(bool, u32)> = fast.iter().map(|s| (true, *s)).collect();
        if self.opts.debug {
            wanted.extend(fast.iter().map(|s| (true, debug_slot(*s))));
            wanted.push((false, LOG_FILTER_ALL_SLOT));
        }
        let set = self.set(mech, hook)?;
        for (generic, slot) in wanted {
            let map = if generic { &set.progs } else { &set.jump };
            let Some(id) = map.prog_id(&ops, slot)? else {
                return Ok(false);
            };
            let Ok(fd) = ops.lib(op::PROG_OPEN, format!("program id {id}"), || {
                Program::fd_from_id(id)
            }) else {
                return Ok(false);
            };
            if !uses_current_maps(&ops, fd.as_fd(), &pinned)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Puts the `kind` policy program into `slot` of `(mech, hook)`'s per-endpoint map. Only
    /// that slot changes; no generic program and no preamble is touched.
    pub fn set_policy(
        &mut self,
        mech: Mechanism,
        hook: Hook,
        slot: u32,
        kind: PolicyKind,
    ) -> Result<(), BpfError> {
        let ops = self.ops.clone();
        let root = self.opts.root.clone();
        let bytes = if self.opts.debug {
            objects::POLICY_DEBUG
        } else {
            objects::POLICY
        };
        let name = match kind {
            PolicyKind::Allow => "cali_pol_allow",
            PolicyKind::Deny => "cali_pol_deny",
            PolicyKind::Rules => return Ok(()),
        };
        let set = self.set(mech, hook)?;
        if set.policy.is_none() && set.adopted {
            // An adopted slot already holding this policy (loaded by an earlier run of this
            // layout) is kept: no load for a restart.
            if let Some(id) = set.jump.prog_id(&ops, slot)? {
                if let Ok(fd) = ops.lib(op::PROG_OPEN, format!("program id {id}"), || {
                    Program::fd_from_id(id)
                }) {
                    if program_name(&ops, fd.as_fd())? == name {
                        let pinned = PinnedMaps::scan(&ops, &root, mech)?;
                        if uses_current_maps(&ops, fd.as_fd(), &pinned)? {
                            return Ok(());
                        }
                    }
                }
            }
        }
        let set = self.set(mech, hook)?;
        if set.policy.is_none() {
            let maps = [
                ("cali_progs", set.progs.map().fd()),
                ("cali_jump", set.jump.map().fd()),
            ];
            let obj = load_object(&ops, &root, bytes, "cali_pol", (mech, hook), &maps, None)?;
            let mut ids = BTreeMap::new();
            for name in ["cali_pol_allow", "cali_pol_deny"] {
                let prog = find_prog(&obj, name)?;
                let id = ops.lib(op::PROG_OPEN, name, || Program::id_from_fd(prog.as_fd()))?;
                ids.insert(name, id);
            }
            set.policy = Some((obj, ids));
        }
        let Some((obj, ids)) = &set.policy else {
            return Err(missing(name));
        };
        if set.jump.prog_id(&ops, slot)? == ids.get(name).copied() {
            return Ok(());
        }
        let prog = find_prog(obj, name)?;
        set.jump.set(&ops, slot, prog.as_fd())
    }

    /// Allocates a per-endpoint slot of direction `hook` (shared by the mechanisms; `mech`'s
    /// jump maps are opened if needed).
    pub fn alloc_slot(&mut self, mech: Mechanism, hook: Hook) -> Result<u32, BpfError> {
        let path = self
            .set(mech, hook)?
            .jump
            .map()
            .path()
            .display()
            .to_string();
        self.slot_alloc(hook)
            .alloc()
            .ok_or_else(|| BpfError::Unexpected {
                op: op::MAP_UPDATE,
                what: path,
                reason: "no free per-endpoint slot".into(),
            })
    }

    fn slot_alloc(&mut self, hook: Hook) -> &mut SlotAllocator {
        self.slots.entry(hook).or_insert_with(|| {
            let mut s = SlotAllocator::new(JUMP_SLOTS);
            s.mark_used(LOG_FILTER_ALL_SLOT);
            s
        })
    }

    /// Writes the `cali_iface` entry of an endpoint: its kind, READY flags and the policy
    /// slots of its attached hooks. Call it with `ready` once both hooks are attached, so a
    /// forward to the interface is never approved before its programs run (the attach gap).
    pub fn set_iface(
        &self,
        ifindex: u32,
        name: &str,
        kind: EndpointKind,
        ready: bool,
    ) -> Result<(), BpfError> {
        let mut flags = match kind {
            EndpointKind::Workload => IFACE_STATE_WEP,
            EndpointKind::Host => IFACE_STATE_HEP,
        };
        if ready {
            flags |= IFACE_STATE_V4_READY | IFACE_STATE_V6_READY;
        }
        let mut state = IfaceState::new(flags, name);
        for hook in Hook::ALL {
            let slot = self.record(ifindex, hook).map(|r| r.globals.policy_slot);
            state.set_policy(hook, slot.filter(|s| *s != SLOT_NONE));
        }
        self.iface.set(&self.ops, ifindex, &state)
    }

    /// The per-endpoint slots of direction `hook` in use, whatever the mechanism (slot 0: the
    /// match-all log filter).
    pub fn slots_in_use(&mut self, _mech: Mechanism, hook: Hook) -> Result<Vec<u32>, BpfError> {
        Ok(self.slot_alloc(hook).used().collect())
    }

    /// Loads a preamble for `(mech, hook)` with `globals`, not attached.
    pub fn load_preamble(
        &mut self,
        mech: Mechanism,
        hook: Hook,
        globals: &TcGlobals,
    ) -> Result<Preamble, BpfError> {
        let ops = self.ops.clone();
        let root = self.opts.root.clone();
        let set = self.set(mech, hook)?;
        let maps = [
            ("cali_progs", set.progs.map().fd()),
            ("cali_jump", set.jump.map().fd()),
        ];
        let obj = load_object(
            &ops,
            &root,
            objects::TC_PREAMBLE,
            "cali_pre",
            (mech, hook),
            &maps,
            Some(&globals.to_bytes()),
        )?;
        Ok(Preamble { obj })
    }

    /// The globals `ap` would be attached with, given its policy slot.
    pub fn globals_for(&self, ap: &AttachPoint, policy_slot: u32) -> TcGlobals {
        let mut flags = match ap.kind {
            EndpointKind::Workload => GLOBALS_F_WEP,
            EndpointKind::Host => GLOBALS_F_HEP,
        };
        if ap.hook == Hook::Ingress {
            flags |= GLOBALS_F_INGRESS;
        }
        let mut g = TcGlobals::new(flags, policy_slot);
        if self.opts.debug {
            g.log_filter_slot = LOG_FILTER_ALL_SLOT;
        }
        g
    }

    /// Programs one hook: generic programs, the endpoint's policy in its slot, and the
    /// preamble (re-loaded and re-attached only if its globals differ or it is not attached).
    pub fn apply(&mut self, ap: &AttachPoint) -> Result<AttachOutcome, BpfError> {
        self.apply_with(ap, &mut |_| Ok(()))
    }

    /// [`BpfDataplane::apply`], calling `fill(slot)` once the hook's policy slot is known and
    /// before any preamble that uses it is attached: a [`PolicyKind::Rules`] caller installs
    /// the interpreter there, so a new or re-attached preamble never meets an empty slot.
    pub fn apply_with(
        &mut self,
        ap: &AttachPoint,
        fill: &mut dyn FnMut(u32) -> Result<(), BpfError>,
    ) -> Result<AttachOutcome, BpfError> {
        let out = self.apply_hook(ap, fill)?;
        if self.stale.remove(&(ap.ifindex, ap.hook)) {
            self.retire_set_aside()?;
        }
        Ok(out)
    }

    fn apply_hook(
        &mut self,
        ap: &AttachPoint,
        fill: &mut dyn FnMut(u32) -> Result<(), BpfError>,
    ) -> Result<AttachOutcome, BpfError> {
        self.ensure_generic(ap.mechanism, ap.hook)?;
        let old = self.hooks.get(&(ap.ifindex, ap.hook)).copied();
        // The endpoint keeps its slot, also across a mechanism move (slots are per direction).
        let kept =
            old.and_then(|r| (r.globals.policy_slot != SLOT_NONE).then_some(r.globals.policy_slot));
        let slot = match kept {
            Some(slot) => slot,
            None => self.alloc_slot(ap.mechanism, ap.hook)?,
        };
        let result = self.apply_with_slot(ap, old, slot, fill);
        if result.is_err() && kept.is_none() {
            // A slot allocated for an attempt that failed goes back to the pool.
            self.slot_alloc(ap.hook).free(slot);
        }
        result
    }

    fn apply_with_slot(
        &mut self,
        ap: &AttachPoint,
        old: Option<HookRecord>,
        slot: u32,
        fill: &mut dyn FnMut(u32) -> Result<(), BpfError>,
    ) -> Result<AttachOutcome, BpfError> {
        let key = (ap.ifindex, ap.hook);
        self.set_policy(ap.mechanism, ap.hook, slot, ap.policy)?;
        fill(slot)?;
        let globals = self.globals_for(ap, slot);
        let stale = self.stale.contains(&key);
        if let Some(r) = old {
            if !stale
                && r.mechanism == ap.mechanism
                && r.globals == globals
                && self.is_attached(ap.ifindex, ap.hook, &r)?
            {
                return Ok(AttachOutcome::Unchanged);
            }
        }
        let mut pre = self.load_preamble(ap.mechanism, ap.hook, &globals)?;
        let prog = pre.program()?;
        let dir = hook_dir(&self.opts.root, ap.mechanism, ap.ifindex, ap.hook);
        self.ops
            .run(op::MOUNT, dir.display(), || std::fs::create_dir_all(&dir))?;
        match ap.mechanism {
            Mechanism::Tc => self.tc_attach(&prog, ap.ifindex, ap.hook)?,
            Mechanism::Tcx => self.tcx_attach(&prog, ap.ifindex, &dir.join("link"))?,
            Mechanism::Netkit => {
                return Err(BpfError::Unexpected {
                    op: op::TCX_ATTACH,
                    what: ap.name.clone(),
                    reason: "netkit attachment is not implemented (no netkit on this kernel)"
                        .into(),
                })
            }
        }
        // Pins after the attachment: the record rebuilt after a restart describes what runs.
        let prog_pin = dir.join("prog");
        let globals_pin = dir.join("globals");
        remove_file_if_exists(&self.ops, &prog_pin)?;
        remove_file_if_exists(&self.ops, &globals_pin)?;
        let mut prog_mut = pre
            .obj
            .progs_mut()
            .find(|p| p.name() == "cali_tc_preamble")
            .ok_or_else(|| BpfError::Unexpected {
                op: op::PROG_PIN,
                what: ap.name.clone(),
                reason: "preamble missing".into(),
            })?;
        self.ops
            .lib(op::PROG_PIN, prog_pin.display(), || prog_mut.pin(&prog_pin))?;
        let prog_id = self.ops.lib(op::PROG_OPEN, prog_pin.display(), || {
            Program::id_from_fd(prog.as_fd())
        })?;
        let mut rodata = pre
            .obj
            .maps_mut()
            .find(|m| m.name().to_string_lossy().ends_with(".rodata"))
            .ok_or_else(|| BpfError::Unexpected {
                op: op::PROG_PIN,
                what: ap.name.clone(),
                reason: "preamble has no .rodata".into(),
            })?;
        self.ops.lib(op::PROG_PIN, globals_pin.display(), || {
            rodata.pin(&globals_pin)
        })?;
        self.hooks.insert(
            key,
            HookRecord {
                mechanism: ap.mechanism,
                globals,
                prog_id,
            },
        );
        // Only now that the new attachment runs does the old one go: for a moment both run
        // (TCX before clsact), with the same policy, rather than neither.
        if let Some(r) = old.filter(|r| r.mechanism != ap.mechanism) {
            self.detach_mechanism(r.mechanism, ap.ifindex, ap.hook)?;
            // The old mechanism's jump map forgets the slot; the slot itself is kept.
            let ops = self.ops.clone();
            if let Some(set) = self.sets.get_mut(&(r.mechanism, ap.hook)) {
                set.jump.clear(&ops, r.globals.policy_slot)?;
            }
        }
        // Whatever this loader does not remember: another mechanism's attachment goes too.
        for other in [Mechanism::Tc, Mechanism::Tcx] {
            if other != ap.mechanism {
                self.detach_mechanism(other, ap.ifindex, ap.hook)?;
            }
        }
        Ok(AttachOutcome::Attached)
    }

    /// Whether the recorded attachment is in place (the recorded program on the hook).
    pub fn is_attached(
        &self,
        ifindex: u32,
        hook: Hook,
        rec: &HookRecord,
    ) -> Result<bool, BpfError> {
        match rec.mechanism {
            Mechanism::Tc => Ok(self.tc_query(ifindex, hook)? == Some(rec.prog_id)),
            Mechanism::Tcx => {
                let pin = hook_dir(&self.opts.root, Mechanism::Tcx, ifindex, hook).join("link");
                if !pin.exists() {
                    return Ok(false);
                }
                let info = self.ops.lib(op::LINK_OPEN, pin.display(), || {
                    Link::open(&pin).and_then(|l| l.info())
                })?;
                let on_dev = matches!(&info.info,
                    libbpf_rs::query::LinkTypeInfo::Tcx(t) if t.ifindex == ifindex);
                Ok(on_dev && info.prog_id == rec.prog_id)
            }
            Mechanism::Netkit => Ok(false),
        }
    }

    fn tc_query(&self, ifindex: u32, hook: Hook) -> Result<Option<u32>, BpfError> {
        let fd = self.iface.map().fd();
        let mut h = tc_hook(fd, ifindex, hook);
        match self
            .ops
            .lib(op::TC_QUERY, format!("ifindex {ifindex} {hook:?}"), || {
                h.query()
            }) {
            Ok(id) => Ok(Some(id)),
            // No filter, no clsact qdisc, or no device: nothing of ours is attached.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT) | Some(libc::EINVAL) | Some(libc::ENODEV)
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn tc_attach(&self, prog: &Program<'_>, ifindex: u32, hook: Hook) -> Result<(), BpfError> {
        let what = format!("ifindex {ifindex} {hook:?}");
        let mut h = tc_hook(prog.as_fd(), ifindex, hook);
        match self.ops.lib(op::TC_QDISC, &what, || h.create()) {
            Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(e),
            _ => {}
        }
        self.ops
            .lib(op::TC_ATTACH, &what, || h.attach())
            .map(|_| ())
    }

    fn tcx_attach(&self, prog: &Program<'_>, ifindex: u32, pin: &Path) -> Result<(), BpfError> {
        // A live link of ours on this device: swap its program atomically.
        if pin.exists() {
            let opened = self.ops.lib(op::LINK_OPEN, pin.display(), || {
                let l = Link::open(pin)?;
                let info = l.info()?;
                Ok((l, info))
            });
            if let Ok((mut link, info)) = opened {
                let live = matches!(&info.info,
                    libbpf_rs::query::LinkTypeInfo::Tcx(t) if t.ifindex == ifindex);
                if live {
                    return self
                        .ops
                        .lib(op::LINK_UPDATE, pin.display(), || link.update_prog(prog));
                }
            }
            remove_file_if_exists(&self.ops, pin)?;
        }
        let mut link = self
            .ops
            .run(op::TCX_ATTACH, format!("ifindex {ifindex}"), || {
                let opts = libbpf_sys::bpf_tcx_opts {
                    sz: size_of::<libbpf_sys::bpf_tcx_opts>() as _,
                    ..Default::default()
                };
                let ifindex = i32::try_from(ifindex)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                // SAFETY: `prog` is a loaded program of a live object (the pointer is valid for
                // the call) and `opts` is a correctly sized options struct living across it.
                let ptr = unsafe {
                    libbpf_sys::bpf_program__attach_tcx(
                        prog.as_libbpf_object().as_ptr(),
                        ifindex,
                        &opts,
                    )
                };
                match NonNull::new(ptr) {
                    // SAFETY: a non-null pointer returned by libbpf is a valid link we now own.
                    Some(p) => Ok(unsafe { Link::from_ptr(p) }),
                    None => Err(io::Error::last_os_error()),
                }
            })?;
        self.ops
            .lib(op::LINK_PIN, pin.display(), || link.pin(pin))?;
        // Dropping `link` closes our fd (libbpf's "detach" of an fd-based link is a close);
        // the pin keeps the link attached. `Link::disconnect` would leak the fd instead, and
        // a leaked fd keeps the link attached after its pin is removed.
        drop(link);
        Ok(())
    }

    /// Removes `mech`'s attachment of felix from a hook, if any, and that hook's pins.
    fn detach_mechanism(&self, mech: Mechanism, ifindex: u32, hook: Hook) -> Result<(), BpfError> {
        let dir = hook_dir(&self.opts.root, mech, ifindex, hook);
        match mech {
            Mechanism::Tc => {
                if self.tc_query(ifindex, hook)?.is_some() {
                    let fd = self.iface.map().fd();
                    let mut h = tc_hook(fd, ifindex, hook);
                    match self
                        .ops
                        .lib(op::TC_DETACH, format!("ifindex {ifindex} {hook:?}"), || {
                            h.detach()
                        }) {
                        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => return Err(e),
                        _ => {}
                    }
                }
            }
            Mechanism::Tcx => {
                let pin = dir.join("link");
                if pin.exists() {
                    if let Ok(link) = self
                        .ops
                        .lib(op::LINK_OPEN, pin.display(), || Link::open(&pin))
                    {
                        // A defunct link (device gone) has nothing to detach.
                        match self
                            .ops
                            .lib(op::LINK_DETACH, pin.display(), || link.detach())
                        {
                            Err(e) if e.raw_os_error() != Some(libc::ENOLINK) => return Err(e),
                            _ => {}
                        }
                    }
                }
            }
            Mechanism::Netkit => {}
        }
        if dir.exists() {
            self.ops
                .run(op::UNPIN, dir.display(), || std::fs::remove_dir_all(&dir))?;
        }
        Ok(())
    }

    /// Detaches felix from a hook (either mechanism), empties its policy slot and forgets it.
    pub fn remove(&mut self, ifindex: u32, hook: Hook) -> Result<(), BpfError> {
        for mech in [Mechanism::Tc, Mechanism::Tcx] {
            self.detach_mechanism(mech, ifindex, hook)?;
        }
        if self.stale.remove(&(ifindex, hook)) {
            self.retire_set_aside()?;
        }
        if let Some(r) = self.hooks.remove(&(ifindex, hook)) {
            let ops = self.ops.clone();
            let set = self.set(r.mechanism, hook)?;
            if r.globals.policy_slot != SLOT_NONE {
                set.jump.clear(&ops, r.globals.policy_slot)?;
                self.slot_alloc(hook).free(r.globals.policy_slot);
            }
        }
        Ok(())
    }

    /// The program id in `slot` of `(mech, hook)`'s generic (`generic = true`) or
    /// per-endpoint map.
    pub fn slot_prog_id(
        &mut self,
        mech: Mechanism,
        hook: Hook,
        generic: bool,
        slot: u32,
    ) -> Result<Option<u32>, BpfError> {
        let ops = self.ops.clone();
        let set = self.set(mech, hook)?;
        let map = if generic { &set.progs } else { &set.jump };
        map.prog_id(&ops, slot)
    }
}

/// What [`teardown`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Teardown {
    /// Hooks detached, as `(ifindex, hook)`.
    pub hooks: Vec<(u32, Hook)>,
    /// Devices whose clsact qdisc felix had attached through and which was deleted.
    pub qdiscs: Vec<u32>,
    /// Whether the pin root was removed (maps, jump maps, hook pins).
    pub root_removed: bool,
}

/// Removes every BPF object felix made (leaving eBPF mode): each recorded hook's attachment
/// (TCX link or clsact filter) and pins, felix's clsact filter (handle [`TC_HANDLE`]) on any
/// other device of `devices`, the clsact qdisc of the devices felix attached to through
/// clsact, and the whole pin root (which frees the maps once no program uses them). A missing
/// pin root means there is nothing of felix's: nothing is done, no bpffs is mounted.
pub fn teardown(ops: BpfOps, opts: Options, devices: &[u32]) -> Result<Teardown, BpfError> {
    let mut out = Teardown::default();
    if !opts.root.exists() {
        return Ok(out);
    }
    let root = opts.root.clone();
    // Open the conntrack map at the size it has: it is removed, never migrated, here.
    let mut opts = opts;
    if let Some(n) = pinned_capacity(&root.join(crate::conntrack::ct_map(1).versioned_name())) {
        opts.ct_capacity = n;
    }
    let mut dp = BpfDataplane::start(ops, opts)?;
    let recorded: Vec<((u32, Hook), Mechanism)> =
        dp.records().map(|(k, r)| (k, r.mechanism)).collect();
    let mut clsact: Vec<u32> = Vec::new();
    for ((ifindex, hook), mech) in &recorded {
        dp.remove(*ifindex, *hook)?;
        out.hooks.push((*ifindex, *hook));
        if *mech == Mechanism::Tc && !clsact.contains(ifindex) {
            clsact.push(*ifindex);
        }
    }
    // Filters of ours whose pins are gone.
    for ifindex in devices {
        for hook in Hook::ALL {
            if dp.tc_query(*ifindex, hook)?.is_some() {
                dp.detach_mechanism(Mechanism::Tc, *ifindex, hook)?;
                out.hooks.push((*ifindex, hook));
                if !clsact.contains(ifindex) {
                    clsact.push(*ifindex);
                }
            }
        }
    }
    for ifindex in clsact {
        // Another program's filters share the qdisc: it stays.
        if clsact_in_use(&dp.ops, ifindex)? {
            tracing::info!(ifindex, "clsact qdisc has other filters: left in place");
            continue;
        }
        let fd = dp.iface.map().fd();
        let mut h = TcHookBuilder::new(fd);
        h.ifindex(ifindex as i32);
        let mut h = h.hook(TC_INGRESS | TC_EGRESS);
        match dp
            .ops
            .lib(op::TC_QDISC, format!("ifindex {ifindex} clsact"), || {
                h.destroy()
            }) {
            Ok(()) => out.qdiscs.push(ifindex),
            // The device or its qdisc is gone already.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::EINVAL)
                ) => {}
            Err(e) => return Err(e),
        }
    }
    let ops = dp.ops.clone();
    drop(dp);
    ops.run(op::UNPIN, root.display(), || std::fs::remove_dir_all(&root))?;
    out.root_removed = true;
    Ok(out)
}

/// The capacity of the map pinned at `pin`, if one is.
fn pinned_capacity(pin: &Path) -> Option<u32> {
    let h = MapHandle::from_pinned_path(pin).ok()?;
    Some(h.info().ok()?.info.max_entries)
}

/// Whether the clsact qdisc of `ifindex` still carries any filter (felix's are gone by now):
/// `tc filter show` of both hooks, in the calling thread's network namespace. A device that is
/// gone carries nothing.
fn clsact_in_use(ops: &BpfOps, ifindex: u32) -> Result<bool, BpfError> {
    let Some(name) = ifname(ifindex) else {
        return Ok(false);
    };
    for hook in ["ingress", "egress"] {
        let out = ops.run(op::TC_LIST, format!("{name} {hook}"), || {
            std::process::Command::new("tc")
                .args(["filter", "show", "dev", &name, hook])
                .output()
        })?;
        if !out.status.success() {
            // No such device or no clsact qdisc any more.
            return Ok(false);
        }
        if out.stdout.iter().any(|b| !b.is_ascii_whitespace()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The name of interface `ifindex` in the calling thread's network namespace.
fn ifname(ifindex: u32) -> Option<String> {
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: `buf` is IF_NAMESIZE bytes, the size `if_indextoname` writes at most (with its
    // NUL); the pointer is valid for the call.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr().cast()) };
    if p.is_null() {
        return None;
    }
    let len = buf.iter().position(|b| *b == 0)?;
    String::from_utf8(buf[..len].to_vec()).ok()
}

/// Sends libbpf's own messages to `tracing` at debug level: the failures they explain
/// reach the caller as [`BpfError`]s, and some are expected (a query of a device without a
/// clsact qdisc).
fn route_libbpf_logs() {
    fn forward(level: libbpf_rs::PrintLevel, msg: String) {
        tracing::debug!(target: "libbpf", ?level, "{}", msg.trim_end());
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, forward)));
    });
}

fn tc_hook(fd: BorrowedFd<'_>, ifindex: u32, hook: Hook) -> libbpf_rs::TcHook {
    let mut b = TcHookBuilder::new(fd);
    b.ifindex(ifindex as i32)
        .replace(true)
        .handle(TC_HANDLE)
        .priority(TC_PRIORITY);
    b.hook(match hook {
        Hook::Ingress => TC_INGRESS,
        Hook::Egress => TC_EGRESS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_dirs_round_trip() {
        let d = hook_dir(Path::new("/r"), Mechanism::Tcx, 42, Hook::Egress);
        assert_eq!(d, Path::new("/r/tcx/hooks/if42_egr"));
        let name = d.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        assert_eq!(parse_hook_dir(name), Some((42, Hook::Egress)));
        assert_eq!(parse_hook_dir("if42"), None);
        assert_eq!(parse_hook_dir("ifx_ing"), None);
    }

    #[test]
    fn a_jump_map_refuses_a_program_of_another_expected_attach_type() {
        felix_netns::require!(netns["ip"]);
        struct Cleanup(PathBuf);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let root = PathBuf::from(format!("/sys/fs/bpf/felix-unit-{}", std::process::id()));
        let _cleanup = Cleanup(root.clone());
        let opts = Options {
            root: root.clone(),
            ..Options::default()
        };
        let mut dp = BpfDataplane::start(BpfOps::default(), opts).expect("start");
        let ops = dp.ops().clone();
        let mut refused = Vec::new();
        for (loaded_for, map_of) in [
            (
                (Mechanism::Tcx, Hook::Ingress),
                (Mechanism::Tc, Hook::Ingress),
            ),
            (
                (Mechanism::Tcx, Hook::Ingress),
                (Mechanism::Tcx, Hook::Egress),
            ),
            (
                (Mechanism::Tc, Hook::Egress),
                (Mechanism::Tcx, Hook::Egress),
            ),
        ] {
            // The kernel fixes a prog_array's owner (program type and expected attach type)
            // with the first program that uses it; an empty, unowned map takes anything.
            dp.ensure_generic(map_of.0, map_of.1).expect("owner");
            dp.set(loaded_for.0, loaded_for.1).expect("maps");
            let own = &dp.sets[&loaded_for];
            let (p, j) = (own.progs.map().fd(), own.jump.map().fd());
            let root = dp.options().root.clone();
            let obj = load_object(
                &ops,
                &root,
                objects::POLICY,
                "cali_pol",
                loaded_for,
                &[("cali_progs", p), ("cali_jump", j)],
                None,
            )
            .expect("load");
            let prog = find_prog(&obj, "cali_pol_allow").expect("prog");
            let err = dp.sets[&map_of]
                .jump
                .set(&ops, 5, prog.as_fd())
                .expect_err("kernel refuses mixing attach types");
            refused.push(err.raw_os_error());
            // Its own set takes it.
            dp.sets[&loaded_for]
                .jump
                .set(&ops, 5, prog.as_fd())
                .expect("same type");
        }
        assert_eq!(refused, vec![Some(libc::EINVAL); 3]);
    }

    #[test]
    fn every_map_an_object_would_create_is_named_cali() {
        for (bytes, name) in [
            (objects::TC_PREAMBLE, "cali_pre"),
            (objects::TC_MAIN, "cali_main"),
            (objects::TC_MAIN_DEBUG, "cali_main"),
            (objects::POLICY, "cali_pol"),
            (objects::POLICY_DEBUG, "cali_pol"),
        ] {
            let mut builder = ObjectBuilder::default();
            builder.name(name).expect("name");
            let open = builder.open_memory(bytes).expect("objects parse");
            for m in open.maps() {
                let n = m.name().to_string_lossy().into_owned();
                assert!(n.starts_with("cali_"), "{name}: map {n}");
            }
            assert!(open
                .progs()
                .all(|p| p.name().to_string_lossy().starts_with("cali_")));
        }
    }

    #[test]
    fn skb_ctx_round_trips_through_the_sk_buff_layout() {
        let c = SkbCtx {
            mark: 5,
            ifindex: 3,
            cb: [1, 2, 3, 4, 5],
        };
        assert_eq!(SkbCtx::from_bytes(&c.to_bytes()), c);
    }
}
