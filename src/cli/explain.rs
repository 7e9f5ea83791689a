//! `felix explain`: which rule decides a flow (INTERFACES.md, "`felix
//! explain`"). Live, it asks the running daemon (`POST /explain` on the admin
//! socket); with STATE arguments it replays them as `felix calc` does and
//! explains the flow on the resulting view of `--node`.
//!
//! Exit codes: 0 with the JSON answer; 2 for a malformed flow or a flow with
//! neither end local (or a request the daemon refuses); 1 when the daemon is
//! unreachable or failing.

use std::path::PathBuf;

use clap::Args;

use super::{admin, calc, node_name, CliError};
use crate::daemon::DEFAULT_ADMIN_SOCKET;
use crate::explain::{explain, Flow, FlowSpec, Settings};

/// Arguments of `felix explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The daemon's admin socket (live mode, without STATE).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_ADMIN_SOCKET)]
    pub socket: PathBuf,
    /// Node whose dataplane to explain (offline mode; default as `felix calc`).
    #[arg(long)]
    pub node: Option<String>,
    /// Datastore states (offline mode), applied in order as `felix calc` does.
    #[arg(value_name = "STATE")]
    pub states: Vec<PathBuf>,
    /// The flow.
    #[command(flatten)]
    pub flow: FlowSpec,
}

/// Runs `felix explain`.
pub fn run(args: ExplainArgs) -> Result<(), CliError> {
    let flow = Flow::new(&args.flow).map_err(|e| CliError::Input(e.to_string()))?;
    if args.states.is_empty() {
        let body = serde_json::to_string(&args.flow)
            .map_err(|e| CliError::Runtime(anyhow::anyhow!("encoding the flow: {e}")))?;
        let answer = admin::call(&args.socket, "POST", "/explain", Some(&body))?;
        println!("{answer}");
        return Ok(());
    }
    let node = node_name::resolve(args.node.as_deref());
    let (view, _) = calc::replay_paths(&node, &args.states, calc::Messages::Dropped, |_, _, _| {
        Ok(())
    })?;
    let answer = explain(&view, &Settings::from_view(&view), &node, &flow)
        .map_err(|e| CliError::Input(e.to_string()))?;
    let text = serde_json::to_string(&answer)
        .map_err(|e| CliError::Runtime(anyhow::anyhow!("encoding the answer: {e}")))?;
    println!("{text}");
    Ok(())
}
