//! `driver/bpf-cleanup`: in iptables and nftables mode, removes what an eBPF-mode run left:
//! every preamble attachment (TCX link or clsact filter with felix's handle), the clsact
//! qdiscs felix attached through, and the pin root (`/sys/fs/bpf/cali`: `cali_iface`, the
//! jump maps, the hook pins), through `felix_bpf::teardown`.
//!
//! Nothing is done (and no bpffs is mounted) when the pin root does not exist: felix's BPF
//! objects are recognised by their pins (and the clsact filter handle `0xca11` on any
//! device while the root exists), so without the root there is nothing of felix's. The sweep
//! runs once per driver life; a failure keeps the driver dirty and is retried at the next
//! apply. Registered in the `Routes` phase, so a failing sweep never counts as a `*tables`
//! failure.

use std::path::PathBuf;

use felix_actors::{ActorSeam, Driver, DriverError};
use felix_bpf::ops::op;
use felix_bpf::{BpfError, BpfOps, Options};

use super::driver::driver_error;

/// See the module docs.
pub struct BpfCleanupDriver {
    ops: BpfOps,
    opts: Options,
    sysfs_net: PathBuf,
    done: bool,
}

impl BpfCleanupDriver {
    /// A sweeper of the pins under `opts.root`, its operations on `seam`.
    pub fn new(seam: &ActorSeam, opts: Options, sysfs_net: PathBuf) -> Self {
        Self {
            ops: BpfOps::new(seam.clone()),
            opts,
            sysfs_net,
            done: false,
        }
    }

    fn devices(&self) -> Result<Vec<u32>, BpfError> {
        let dir = &self.sysfs_net;
        self.ops.run(op::PROBE, dir.display(), || {
            let mut v = Vec::new();
            for e in std::fs::read_dir(dir)?.flatten() {
                if let Ok(t) = std::fs::read_to_string(e.path().join("ifindex")) {
                    if let Ok(i) = t.trim().parse::<u32>() {
                        v.push(i);
                    }
                }
            }
            Ok(v)
        })
    }

    fn sweep(&mut self) -> Result<(), BpfError> {
        if !self.opts.root.exists() {
            return Ok(());
        }
        let devices = self.devices()?;
        let t = felix_bpf::teardown(self.ops.clone(), self.opts.clone(), &devices)?;
        tracing::info!(
            hooks = t.hooks.len(),
            qdiscs = t.qdiscs.len(),
            "removed the BPF programs, links, filters and pins of an eBPF-mode run"
        );
        Ok(())
    }
}

impl Driver for BpfCleanupDriver {
    type Desired = ();

    fn apply(&mut self, _desired: &()) -> Result<(), DriverError> {
        if self.done {
            return Ok(());
        }
        self.sweep().map_err(driver_error)?;
        self.done = true;
        Ok(())
    }

    fn queue_resync(&mut self) {}

    fn is_dirty(&self) -> bool {
        !self.done
    }

    /// The pins an eBPF-mode run left (read only); a resync would tear them all down.
    fn read_back(&mut self, _desired: &()) -> Option<Result<felix_actors::ReadBack, DriverError>> {
        let root = &self.opts.root;
        let listed = self.ops.run(op::PROBE, root.display(), || {
            let mut names = Vec::new();
            if root.exists() {
                for e in std::fs::read_dir(root)? {
                    names.push(e?.file_name().to_string_lossy().into_owned());
                }
            }
            names.sort();
            Ok(names)
        });
        Some(listed.map_err(driver_error).map(|names| {
            let mut rb = felix_actors::ReadBack::default();
            if !names.is_empty() {
                rb.actual.push(felix_actors::RecordedOp {
                    op: op::PROBE.into(),
                    detail: format!("{}: {}", root.display(), names.join(" ")),
                });
                rb.changes.push(felix_actors::RecordedOp {
                    op: "teardown".into(),
                    detail: format!(
                        "remove the BPF programs, links, filters and pins under {}",
                        root.display()
                    ),
                });
            }
            rb
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_pin_root_nothing_is_done_and_the_driver_is_clean() {
        let base = std::env::temp_dir().join(format!("felix-bpf-clean-{}", std::process::id()));
        let opts = Options {
            bpffs: base.clone(),
            root: base.join("cali"),
            debug: false,
            ct_capacity: 1024,
        };
        let mut d = BpfCleanupDriver::new(&ActorSeam::default(), opts, base.join("net"));
        assert!(d.is_dirty());
        d.apply(&()).expect("nothing to do");
        assert!(!d.is_dirty());
        assert!(!base.exists(), "no bpffs mounted, nothing created");
    }
}
