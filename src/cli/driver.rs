//! `felix dataplane-driver`: felix-rs's dataplane as an external driver (see
//! [`crate::daemon::driver`]). The binary also runs as the driver when invoked through a
//! link named `felix-dataplane-driver` with no arguments, as felix starts `DataplaneDriver`.

use std::path::PathBuf;

use clap::Args;

use super::CliError;
use crate::daemon::driver::{self, DriverOptions};
use crate::daemon::DaemonError;

/// The program name (`argv[0]`'s file name) that means `felix dataplane-driver`.
pub const DRIVER_PROGRAM_NAME: &str = "felix-dataplane-driver";

const DRIVER_LONG_ABOUT: &str = "\
Runs felix-rs's dataplane (iptables, nftables or eBPF, chosen by the configuration felix
sends) as an external dataplane driver, the child of felix with
UseInternalDataplaneDriver=false and DataplaneDriver naming this binary (or a link to it
named felix-dataplane-driver). Reads ToDataplane messages on file descriptor 3 and writes
FromDataplane reports on descriptor 4: each an 8-byte little-endian length, then the
protobuf message (proto/felixbackend.proto). The first message must be a ConfigUpdate.

Exit codes: 0 when felix closes the pipe or on SIGTERM/SIGINT (kernel state left in
place), 1 on a malformed message or a dataplane failure, 2 when descriptors 3/4 are not
open or the first message is not a ConfigUpdate.";

/// Arguments of `felix dataplane-driver`.
#[derive(Debug, Args, Default)]
#[command(after_help = DRIVER_LONG_ABOUT)]
pub struct DriverArgs {
    /// Unix socket of the driver's admin API (default: $FELIXRS_DRIVER_ADMIN_SOCKET, which
    /// felix sets to its own socket's path plus `.driver`, else
    /// /var/run/felix/driver.sock).
    #[arg(long, value_name = "PATH")]
    pub admin_socket: Option<PathBuf>,
}

/// Runs the driver.
pub fn run(args: DriverArgs) -> Result<(), CliError> {
    match driver::run(DriverOptions {
        admin_socket: args.admin_socket,
    }) {
        Ok(()) => Ok(()),
        Err(DaemonError::Input(m)) => Err(CliError::Input(m)),
        Err(DaemonError::Runtime(e)) => Err(CliError::Runtime(e.into())),
    }
}

/// Whether the process was invoked as the driver by its program name.
pub fn invoked_as_driver(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == DRIVER_PROGRAM_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_is_recognised_by_its_program_name() {
        assert!(invoked_as_driver(
            "/usr/bin/felix-dataplane-driver".as_ref()
        ));
        assert!(invoked_as_driver("felix-dataplane-driver".as_ref()));
        assert!(!invoked_as_driver("/usr/bin/felix".as_ref()));
        assert!(!invoked_as_driver("felix-dataplane-driver.sh".as_ref()));
    }
}
