//! Command-line interface (clap).  `felix --help` lists the subcommands.

use clap::{Parser, Subcommand};

pub mod admin;
#[cfg(feature = "bench")]
pub mod bench;
pub mod calc;
pub mod datastore;
pub mod diags;
pub mod driver;
pub mod explain;
pub mod node_name;
pub mod run;

/// An error from a subcommand, carrying its exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage or bad input (exit 2).
    #[error("{0}")]
    Input(String),
    /// Runtime failure (exit 1).
    #[error(transparent)]
    Runtime(#[from] anyhow::Error),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) => 2,
            CliError::Runtime(_) => 1,
        }
    }
}

/// felix-rs: Calico's per-node agent.
#[derive(Debug, Parser)]
#[command(name = "felix", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Replay datastore states through the calculation graph offline and
    /// print the resulting dataplane view (or message stream).
    Calc(calc::CalcArgs),
    /// Print benchmark figures (calculation graph, datastore load, dataplane).
    #[cfg(feature = "bench")]
    Bench(bench::BenchArgs),
    /// Benchmarks: not in this build (build with `--features bench`).
    #[cfg(not(feature = "bench"))]
    Bench {
        /// Ignored.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
    /// Run the node daemon: datastore -> calculation graph -> dataplane.
    Run(run::RunArgs),
    /// Query or control a running daemon over its admin socket.
    Admin(admin::AdminArgs),
    /// Which rule decides a flow: live from the daemon, or offline from
    /// datastore states.
    Explain(explain::ExplainArgs),
    /// Load resources into an etcd datastore and list them (as calicoctl
    /// stores them).
    Datastore(datastore::DatastoreArgs),
    /// Run felix-rs's dataplane as an external dataplane driver (the child of felix with
    /// UseInternalDataplaneDriver=false; pipes on file descriptors 3 and 4).
    DataplaneDriver(driver::DriverArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Calc(a) => calc::run(a),
        #[cfg(feature = "bench")]
        Command::Bench(a) => bench::run(a),
        #[cfg(not(feature = "bench"))]
        Command::Bench { .. } => Err(CliError::Input(
            "this felix was built without benchmarks; build it with \
             `cargo build --release --features bench`"
                .into(),
        )),
        Command::Run(a) => run::run(a),
        Command::Admin(a) => admin::run(a),
        Command::Datastore(a) => datastore::run(a),
        Command::Explain(a) => explain::run(a),
        Command::DataplaneDriver(a) => driver::run(a),
    }
}
