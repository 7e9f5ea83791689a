//! `felix run`: the node daemon (INTERFACES.md §1). See [`crate::daemon`].

use std::path::PathBuf;

use clap::Args;

use super::CliError;
use crate::daemon::{self, DaemonError, RunOptions, Stop, DEFAULT_ADMIN_SOCKET};

const RUN_LONG_ABOUT: &str = "\
Runs the node daemon: reads the datastore, computes this node's desired dataplane
with the calculation graph and hands it to the dataplane supervisor. It programs
the network namespace it runs in (`ip netns exec NODE felix run ...` touches
nothing outside NODE).

Configuration uses upstream Felix parameter names. Precedence, lowest first:
built-in default < FelixConfiguration `default` < FelixConfiguration
`node.<NODE>` < --config file ([global] section, `Name = value`) < environment
FELIX_<NAME> (case-insensitive). An invalid value is logged once (parameter,
source, value) and the lower-precedence value is kept.

Without --config, /etc/calico/felix.cfg is read if it exists. Without
--datastore, the file datastore in /etc/calico/datastore is used, unless the
config file or environment sets DatastoreType=etcdv3.

A change to a parameter that needs a restart, a change of encapsulation, or the
datastore becoming unready makes the daemon stop cleanly and re-execute itself
with the same arguments (exit code 129 if re-executing fails).
SIGTERM/SIGINT stop it cleanly (exit 0), leaving kernel state in place.

Exit codes: 0 stopped by a signal, 1 runtime failure, 2 bad usage or input.";

/// Arguments of `felix run`.
#[derive(Debug, Args)]
#[command(after_help = RUN_LONG_ABOUT)]
pub struct RunArgs {
    /// This node's name (default: FelixHostname from FELIX_FELIXHOSTNAME, then
    /// from the config file, then the host name).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Datastore: file:DIR or etcdv3:http://HOST:PORT[,http://HOST:PORT...]
    /// (default: file:/etc/calico/datastore).
    #[arg(long, value_name = "SPEC")]
    pub datastore: Option<String>,
    /// Config file (INI, [global] section with `Name = value` lines).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Unix socket of the admin API (parent directory is created, a stale
    /// socket replaced).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_ADMIN_SOCKET)]
    pub admin_socket: PathBuf,
}

/// Runs `felix run`; on a needed restart, re-executes the binary.
pub fn run(args: RunArgs) -> Result<(), CliError> {
    let started = felix_actors::clock::real_now();
    let opts = RunOptions {
        node: args.node,
        datastore: args.datastore,
        config_file: args.config,
        admin_socket: args.admin_socket,
    };
    match daemon::run(opts) {
        Ok(Stop::Signal(_)) => Ok(()),
        Ok(Stop::Restart(reason)) => {
            tracing::warn!(%reason, "re-executing felix");
            let err = daemon::restart::reexec(started);
            tracing::error!("cannot re-execute felix: {err}; exiting for a restart");
            eprintln!("felix: restart needed ({reason}); re-exec failed: {err}");
            std::process::exit(i32::from(daemon::RESTART_EXIT_CODE));
        }
        Err(DaemonError::Input(m)) => Err(CliError::Input(m)),
        Err(DaemonError::Runtime(e)) => Err(CliError::Runtime(e.into())),
    }
}
