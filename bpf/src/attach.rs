//! Attach mechanisms: upstream's `BPFAttachType` option, the kernel probes and the per
//! attach point selection (netkit for netkit workload devices where the kernel has it, TCX
//! where the kernel has it, clsact otherwise).

use std::str::FromStr;

use crate::ops::{op, BpfError, BpfOps};

/// Upstream's `BPFAttachType` (values `TC`, `TCX`, `Netkit`; default `Netkit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BpfAttachType {
    /// clsact filters only.
    Tc,
    /// TCX where supported, else clsact; never netkit.
    Tcx,
    /// Netkit for netkit workload devices, TCX (else clsact) everywhere else.
    #[default]
    Netkit,
}

impl FromStr for BpfAttachType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "tc" => Ok(Self::Tc),
            "tcx" => Ok(Self::Tcx),
            "netkit" => Ok(Self::Netkit),
            _ => Err(format!("BPFAttachType {s:?}: expected TC, TCX or Netkit")),
        }
    }
}

/// How a program is attached to one hook. Each mechanism has its own jump-map set (a
/// `prog_array` refuses programs of another expected attach type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// A clsact qdisc filter (netlink).
    Tc,
    /// A TCX `bpf_link`, pinned.
    Tcx,
    /// A netkit `bpf_link` (netkit workload devices; not on this kernel).
    Netkit,
}

impl Mechanism {
    /// The pin sub-directory of this mechanism's jump maps and hooks.
    pub fn dir_name(self) -> &'static str {
        match self {
            Mechanism::Tc => "tc",
            Mechanism::Tcx => "tcx",
            Mechanism::Netkit => "netkit",
        }
    }
}

/// What the kernel supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelSupport {
    /// TCX links (kernel 6.6+).
    pub tcx: bool,
    /// Netkit devices and links (kernel 6.7+ with netkit built).
    pub netkit: bool,
}

/// The kind of device an attach point is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// Any device that is not netkit (veth, physical, tunnel).
    Other,
    /// A netkit device.
    Netkit,
}

/// Source of [`KernelSupport`]: the kernel ([`KernelProbe`]) or a fake in tests.
pub trait FeatureProbe {
    /// Probes the kernel.
    fn probe(&self) -> KernelSupport;
}

/// Probes the running kernel with `BPF_PROG_QUERY` on loopback (non-invasive): a kernel
/// without the attach type answers `EINVAL`.
#[derive(Debug, Clone, Default)]
pub struct KernelProbe {
    ops: BpfOps,
}

impl KernelProbe {
    /// A probe whose queries go through `ops`.
    pub fn new(ops: BpfOps) -> Self {
        Self { ops }
    }

    fn query(&self, attach: libbpf_rs::libbpf_sys::bpf_attach_type) -> bool {
        let r = self
            .ops
            .run(op::PROBE, format!("attach type {attach} on lo"), || {
                let mut opts = libbpf_rs::libbpf_sys::bpf_prog_query_opts {
                    sz: size_of::<libbpf_rs::libbpf_sys::bpf_prog_query_opts>() as _,
                    ..Default::default()
                };
                // SAFETY: `opts` is a zero-initialised, correctly sized options struct that
                // lives across the call; ifindex 1 is loopback.
                let rc =
                    unsafe { libbpf_rs::libbpf_sys::bpf_prog_query_opts(1, attach, &mut opts) };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::from_raw_os_error(-rc))
                }
            });
        match r {
            Ok(()) => true,
            // Netkit's query on a device that is not netkit: the attach type exists.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENXIO) | Some(libc::ENODEV)) => {
                attach != libbpf_rs::libbpf_sys::BPF_TCX_INGRESS
            }
            Err(_) => false,
        }
    }
}

impl FeatureProbe for KernelProbe {
    fn probe(&self) -> KernelSupport {
        KernelSupport {
            tcx: self.query(libbpf_rs::libbpf_sys::BPF_TCX_INGRESS),
            netkit: self.query(libbpf_rs::libbpf_sys::BPF_NETKIT_PRIMARY),
        }
    }
}

/// The ids of the programs attached through TCX at `hook` of `ifindex` (felix's or anyone's),
/// in the order they run.
pub fn query_tcx(ops: &BpfOps, ifindex: u32, hook: crate::Hook) -> Result<Vec<u32>, BpfError> {
    let attach = match hook {
        crate::Hook::Ingress => libbpf_rs::libbpf_sys::BPF_TCX_INGRESS,
        crate::Hook::Egress => libbpf_rs::libbpf_sys::BPF_TCX_EGRESS,
    };
    let fd = i32::try_from(ifindex)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e));
    ops.run(
        op::PROBE,
        format!("tcx programs of ifindex {ifindex} {hook:?}"),
        || {
            let fd = fd?;
            let mut ids = [0u32; 64];
            let mut opts = libbpf_rs::libbpf_sys::bpf_prog_query_opts {
                sz: size_of::<libbpf_rs::libbpf_sys::bpf_prog_query_opts>() as _,
                prog_ids: ids.as_mut_ptr(),
                __bindgen_anon_1: libbpf_rs::libbpf_sys::bpf_prog_query_opts__bindgen_ty_1 {
                    count: ids.len() as u32,
                },
                ..Default::default()
            };
            // SAFETY: `opts` is a correctly sized options struct whose `prog_ids` points at
            // `ids`, which holds `count` entries and outlives the call.
            let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_query_opts(fd, attach, &mut opts) };
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(-rc));
            }
            // SAFETY: both members of the union are a `u32` count; the kernel wrote it.
            let n = (unsafe { opts.__bindgen_anon_1.count } as usize).min(ids.len());
            Ok(ids[..n].to_vec())
        },
    )
}

/// The mechanism of one attach point: netkit only for a netkit workload device with
/// `Netkit` configured and supported; otherwise TCX unless `TC` is configured or the kernel
/// lacks it; otherwise clsact.
pub fn select_mechanism(
    configured: BpfAttachType,
    support: KernelSupport,
    device: DeviceKind,
    workload: bool,
) -> Mechanism {
    if configured == BpfAttachType::Netkit
        && support.netkit
        && device == DeviceKind::Netkit
        && workload
    {
        return Mechanism::Netkit;
    }
    if configured != BpfAttachType::Tc && support.tcx {
        Mechanism::Tcx
    } else {
        Mechanism::Tc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(KernelSupport);
    impl FeatureProbe for Fake {
        fn probe(&self) -> KernelSupport {
            self.0
        }
    }

    #[test]
    fn attach_type_parses_upstream_values_and_defaults_to_netkit() {
        assert_eq!(BpfAttachType::default(), BpfAttachType::Netkit);
        assert_eq!("TCX".parse(), Ok(BpfAttachType::Tcx));
        assert_eq!("TC".parse(), Ok(BpfAttachType::Tc));
        assert_eq!("Netkit".parse(), Ok(BpfAttachType::Netkit));
        assert!("xdp".parse::<BpfAttachType>().is_err());
    }

    #[test]
    fn netkit_is_selected_only_for_netkit_workloads_on_a_kernel_with_netkit() {
        let all = Fake(KernelSupport {
            tcx: true,
            netkit: true,
        })
        .probe();
        let no_netkit = Fake(KernelSupport {
            tcx: true,
            netkit: false,
        })
        .probe();
        let old = Fake(KernelSupport {
            tcx: false,
            netkit: false,
        })
        .probe();
        use BpfAttachType as A;
        use DeviceKind as D;
        assert_eq!(
            select_mechanism(A::Netkit, all, D::Netkit, true),
            Mechanism::Netkit
        );
        assert_eq!(
            select_mechanism(A::Netkit, all, D::Netkit, false),
            Mechanism::Tcx
        );
        assert_eq!(
            select_mechanism(A::Netkit, all, D::Other, true),
            Mechanism::Tcx
        );
        assert_eq!(
            select_mechanism(A::Netkit, no_netkit, D::Netkit, true),
            Mechanism::Tcx
        );
        assert_eq!(
            select_mechanism(A::Tcx, all, D::Netkit, true),
            Mechanism::Tcx
        );
        assert_eq!(select_mechanism(A::Tc, all, D::Netkit, true), Mechanism::Tc);
        assert_eq!(
            select_mechanism(A::Netkit, old, D::Other, true),
            Mechanism::Tc
        );
        assert_eq!(select_mechanism(A::Tcx, old, D::Other, true), Mechanism::Tc);
    }
}
