//! `felix admin`: command-line client of the admin socket (INTERFACES.md
//! §4). Prints the JSON (or, for metrics, text) body of the answer.
//!
//! Exit codes: 0 on a 2xx answer; 1 if the daemon is unreachable or answers
//! with a server error; 2 on bad usage or when the daemon rejects the
//! request as bad input (4xx).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::CliError;
use crate::daemon::DEFAULT_ADMIN_SOCKET;

/// Arguments of `felix admin`.
#[derive(Debug, Args)]
#[command(
    after_help = "Talks to a running `felix run` over its admin socket and prints the answer.\n\n\
Exit codes: 0 ok, 1 daemon unreachable or failing, 2 bad usage or a request the daemon rejected."
)]
pub struct AdminArgs {
    /// The daemon's admin socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_ADMIN_SOCKET)]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub(crate) command: AdminCommand,
}

/// `felix admin` requests.
#[derive(Debug, Subcommand)]
pub(crate) enum AdminCommand {
    /// GET /status: in-sync, dataplane mode, applies, actors.
    Status,
    /// GET /dataplane: the desired dataplane view (as one `felix calc` line).
    Dataplane,
    /// GET /faults: the armed faults.
    Faults,
    /// GET /metrics: Prometheus text.
    Metrics,
    /// GET /drops: the latest denied packets with the rule that denied them
    /// (`DropAttributionEnabled`).
    Drops {
        /// Keep printing new drops (one JSON object per line) until interrupted.
        #[arg(long)]
        follow: bool,
    },
    /// GET /drift: per driver, what a resync would change in the kernel now
    /// (`inSync` when nothing).
    Drift,
    /// Writes a diagnostics bundle (a directory): status, configuration with
    /// sources, desired view, each driver's read-back and drift, apply
    /// timings, metrics, faults, drops and recent logs.
    Diags {
        /// The directory to create (default `felix-diags-<UTC time>` here).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Arm or clear injected faults.
    Fault {
        #[command(subcommand)]
        command: FaultCommand,
    },
}

/// `felix admin fault` requests.
#[derive(Debug, Subcommand)]
pub enum FaultCommand {
    /// POST /faults: the next N matching operations of an actor fail, panic
    /// or stall.
    Add(FaultAddArgs),
    /// DELETE /faults: disarm all faults.
    Clear,
    /// GET /faults/targets: every actor and the operations a fault can target.
    Targets,
}

/// What an armed fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FaultActionArg {
    /// The operation fails.
    Error,
    /// The actor panics (exercises restart).
    Panic,
    /// The operation stalls for --delay-ms first.
    Delay,
}

impl FaultActionArg {
    fn as_str(self) -> &'static str {
        match self {
            FaultActionArg::Error => "error",
            FaultActionArg::Panic => "panic",
            FaultActionArg::Delay => "delay",
        }
    }
}

/// Arguments of `felix admin fault add`.
#[derive(Debug, Args)]
pub struct FaultAddArgs {
    /// Actor name, e.g. driver/iptables-filter-v4, manager/endpoints-v4,
    /// supervisor.
    #[arg(long, value_name = "ACTOR")]
    pub target: String,
    /// Operation of that actor (`*` for every operation).
    #[arg(long, value_name = "OP")]
    pub op: String,
    /// Effect on each matching operation.
    #[arg(long, value_enum)]
    pub action: FaultActionArg,
    /// Number of matching operations affected.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    /// Stall length for --action delay, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub delay_ms: u64,
}

/// The HTTP request for a command: (method, path, body).
pub(crate) fn request_for(cmd: &AdminCommand) -> (&'static str, &'static str, Option<String>) {
    match cmd {
        AdminCommand::Status => ("GET", "/status", None),
        AdminCommand::Dataplane => ("GET", "/dataplane", None),
        AdminCommand::Faults => ("GET", "/faults", None),
        AdminCommand::Metrics => ("GET", "/metrics", None),
        AdminCommand::Drops { .. } => ("GET", "/drops", None),
        AdminCommand::Drift => ("GET", "/drift", None),
        AdminCommand::Diags { .. } => ("GET", "/status", None),
        AdminCommand::Fault {
            command: FaultCommand::Clear,
        } => ("DELETE", "/faults", None),
        AdminCommand::Fault {
            command: FaultCommand::Targets,
        } => ("GET", "/faults/targets", None),
        AdminCommand::Fault {
            command: FaultCommand::Add(a),
        } => {
            let body = serde_json::json!({
                "target": a.target,
                "op": a.op,
                "action": a.action.as_str(),
                "count": a.count,
                "delayMs": a.delay_ms,
            });
            ("POST", "/faults", Some(body.to_string()))
        }
    }
}

/// Sends one request to the daemon at `socket`; the body of a 2xx answer.
/// Exit codes as the module doc says.
pub(crate) fn call(
    socket: &std::path::Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<String, CliError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(anyhow::anyhow!("cannot start a runtime: {e}")))?;
    let answer = rt.block_on(felix_actors::admin_request(socket, method, path, body));
    let (status, body) = answer.map_err(|e| {
        CliError::Runtime(anyhow::anyhow!(
            "daemon unreachable at {}: {e}",
            socket.display()
        ))
    })?;
    let body = body.trim_end();
    match status {
        200..=299 => Ok(body.to_string()),
        400..=499 => Err(CliError::Input(format!(
            "{method} {path}: {status}: {body}"
        ))),
        _ => Err(CliError::Runtime(anyhow::anyhow!(
            "{method} {path}: {status}: {body}"
        ))),
    }
}

/// Runs `felix admin`.
pub fn run(args: AdminArgs) -> Result<(), CliError> {
    if let AdminCommand::Drops { follow: true } = args.command {
        return follow_drops(&args.socket);
    }
    if let AdminCommand::Diags { out } = &args.command {
        let dir = super::diags::write_bundle(&args.socket, out.as_deref())?;
        println!("{}", dir.display());
        return Ok(());
    }
    let (method, path, body) = request_for(&args.command);
    let body = call(&args.socket, method, path, body.as_deref())?;
    println!("{body}");
    Ok(())
}

/// `felix admin drops --follow`: polls `GET /drops` and prints each new
/// record once, as one JSON line, until interrupted or the daemon goes away.
fn follow_drops(socket: &std::path::Path) -> Result<(), CliError> {
    let mut last = 0u64;
    loop {
        let body = call(socket, "GET", "/drops", None)?;
        let list: Vec<serde_json::Value> = serde_json::from_str(&body)
            .map_err(|e| CliError::Runtime(anyhow::anyhow!("GET /drops: {e}")))?;
        for r in list {
            let seq = r["seq"].as_u64().unwrap_or(0);
            if seq > last {
                println!("{r}");
                last = seq;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}
