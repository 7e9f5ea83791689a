//! `felix calc`: offline calculation-graph replay (INTERFACES.md §1).
//!
//! Each STATE is a complete datastore state (a YAML/JSON file or a
//! directory in the file-datastore layout).  States are applied in order
//! from an empty datastore: the difference between consecutive states is
//! fed as updates, the datastore's in-sync follows the first state, and the
//! graph is flushed after each state.  Every emitted message is applied to
//! a [`DataplaneView`], which checks the flush-order contract; a violation
//! is a runtime failure (exit 1).

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::calc::view::{payload_json, DataplaneView};
use crate::calc::{CalcGraph, GraphOptions};
use crate::datastore::snapshot::{ErrorClass, StateError, StateLoader};
use crate::datastore::stream::stream_state;
use crate::model::{Key, SyncStatus, Update, Value};
use felix_proto::to_dataplane::Payload;

use super::{node_name, CliError};

/// Arguments of `felix calc`.
#[derive(Debug, Args)]
pub struct CalcArgs {
    /// Node whose dataplane to compute (default: FELIX_FELIXHOSTNAME, then
    /// the hostname).
    #[arg(long)]
    pub node: Option<String>,
    /// Print every emitted ToDataplane message (proto3 JSON, one per line)
    /// and `{"endOfState": N}` after each state, instead of the view.
    #[arg(long)]
    pub stream: bool,
    /// Exit 2 (after printing everything) when any resource of any state was
    /// invalid and left out.
    #[arg(long)]
    pub strict: bool,
    /// Datastore states, applied in order (files or directories).
    #[arg(required = true, value_name = "STATE")]
    pub states: Vec<PathBuf>,
}

/// The updates that turn state `prev` into state `next`: deletions for
/// keys that vanished, then sets for new or changed values.
pub fn diff_states(prev: &BTreeMap<Key, Value>, next: &BTreeMap<Key, Value>) -> Vec<Update> {
    let mut out = Vec::new();
    for k in prev.keys() {
        if !next.contains_key(k) {
            out.push(Update::delete(k.clone()));
        }
    }
    for (k, v) in next {
        if prev.get(k) != Some(v) {
            out.push(Update::set(k.clone(), v.clone()));
        }
    }
    out
}

/// Datastore states as the updates between them, and how many resources were left out
/// as invalid.
pub struct LoadedStates {
    /// Each state's updates from the previous state (from nothing for the first).
    pub states: Vec<Vec<Update>>,
    /// Resources (or duplicates) left out, over all states.
    pub dropped: usize,
}

/// Loads each STATE (a file or a directory) as a complete datastore state,
/// kept as its difference from the state before (no state is held as a whole
/// model).  Every resource left out is reported on stderr, one line each, as
/// `felix run` logs it (file, line, what is wrong); a file that cannot be read
/// at all is an input error, before anything is computed.
pub fn load_states(paths: &[PathBuf]) -> Result<LoadedStates, CliError> {
    let mut loader = StateLoader::default();
    let mut states = Vec::with_capacity(paths.len());
    let mut dropped = 0;
    for path in paths {
        let state = loader
            .load(path)
            .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
        dropped += state.errors.len();
        report_problems(&state.errors)?;
        states.push(state.updates);
    }
    Ok(LoadedStates { states, dropped })
}

/// Replays `states` (each one's updates from the previous) through node
/// `node`'s calculation graph (see the module doc), applying every emitted
/// message to a [`DataplaneView`]; after each state, `each(i, view, messages
/// of that state)`.
pub fn replay(
    node: &str,
    paths: &[PathBuf],
    states: Vec<Vec<Update>>,
    each: impl FnMut(usize, &DataplaneView, &[Payload]) -> Result<(), CliError>,
) -> Result<DataplaneView, CliError> {
    replay_with(node, paths, states, Messages::Kept, each)
}

fn replay_with(
    node: &str,
    paths: &[PathBuf],
    states: Vec<Vec<Update>>,
    messages: Messages,
    each: impl FnMut(usize, &DataplaneView, &[Payload]) -> Result<(), CliError>,
) -> Result<DataplaneView, CliError> {
    let options = states
        .first()
        .map(|s| {
            graph_options(
                node,
                s.iter().filter_map(|u| Some((&u.key, u.value.as_ref()?))),
            )
        })
        .unwrap_or_default();
    let graph = CalcGraph::with_options(node, options);
    replay_built(graph, paths, states, messages, each)
}

/// What a replay hands to its per-state callback besides the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Messages {
    /// Each state's emitted messages (`felix calc --stream`).
    Kept,
    /// None: each message goes into the view as the graph emits it, and the graph is dropped
    /// once the last state is flushed, so only the view is held while the callback writes it
    /// out.
    Dropped,
}

/// [`replay`] into an already built `graph` (which may hold updates of the first state
/// already).
fn replay_built(
    graph: CalcGraph,
    paths: &[PathBuf],
    states: Vec<Vec<Update>>,
    messages: Messages,
    mut each: impl FnMut(usize, &DataplaneView, &[Payload]) -> Result<(), CliError>,
) -> Result<DataplaneView, CliError> {
    let mut view = DataplaneView::new();
    let last = states.len().saturating_sub(1);
    let mut graph = Some(graph);
    for (i, updates) in states.into_iter().enumerate() {
        let Some(g) = graph.as_mut() else { break };
        g.on_updates(updates);
        if i == 0 {
            g.on_status(SyncStatus::InSync);
        }
        let context = || {
            let path = paths.get(i).map(|p| p.display().to_string());
            format!("state {i} ({})", path.unwrap_or_default())
        };
        match messages {
            Messages::Kept => {
                let flushed = g.flush();
                for p in &flushed {
                    view.apply(p).with_context(context)?;
                }
                each(i, &view, &flushed)?;
            }
            Messages::Dropped => {
                // Each message goes into the view as the graph emits it.
                let mut violation = None;
                g.flush_with(|p| {
                    if violation.is_none() {
                        violation = view.apply(&p).err();
                    }
                });
                if let Some(v) = violation {
                    return Err(anyhow::Error::new(v).context(context()).into());
                }
                if i == last {
                    graph = None;
                }
                each(i, &view, &[])?;
            }
        }
    }
    Ok(view)
}

/// The graph's construction-time options (`IstioAmbientMode`, the route
/// settings) as `felix run` would read them on node `node` of a state (its
/// keys and values): the state's FelixConfiguration `default` and
/// `node.<node>`, under this process's `FELIX_*` environment.
pub fn graph_options<'a>(
    node: &str,
    state: impl IntoIterator<Item = (&'a Key, &'a Value)>,
) -> crate::calc::GraphOptions {
    use felix_config::{Config, Source};
    let mut global = BTreeMap::new();
    let mut host = BTreeMap::new();
    for (k, v) in state {
        let Value::Config(text) = v else { continue };
        match k {
            Key::GlobalConfig(name) => {
                global.insert(name.clone(), text.clone());
            }
            Key::HostConfig { host: h, name } if h == node => {
                host.insert(name.clone(), text.clone());
            }
            _ => {}
        }
    }
    let layers = [
        (Source::DatastoreGlobal, global),
        (Source::DatastorePerHost, host),
        (Source::Environment, felix_config::process_env_overrides()),
    ];
    let (cfg, _) = Config::build(&layers);
    crate::calc::GraphOptions::from_config(&cfg)
}

/// Prints what a state left out (one `warning:` line each) and turns a file that could not
/// be read at all into an input error.
fn report_problems(errors: &[StateError]) -> Result<(), CliError> {
    for err in errors {
        eprintln!("warning: {err}");
    }
    match errors.iter().find(|e| e.class == ErrorClass::File) {
        Some(e) => Err(CliError::Input(e.message.clone())),
        None => Ok(()),
    }
}

/// [`replay`] of the states at `paths`, loading them as it goes; returns the final view and
/// how many resources were left out as invalid.
///
/// A single state (the usual case) is streamed: each file's resources go into the graph as
/// soon as the file is decoded and are not kept ([`stream_state`]), so the load costs no
/// memory beyond the graph's own.  The graph's construction-time options come from the
/// state's FelixConfiguration, known only once every file is read: the graph is built with
/// the options of the environment alone and, if the state's configuration calls for other
/// options, built again in a second pass with those.  Several states are loaded as their
/// differences ([`load_states`]) and replayed in order.
pub fn replay_paths(
    node: &str,
    paths: &[PathBuf],
    messages: Messages,
    each: impl FnMut(usize, &DataplaneView, &[Payload]) -> Result<(), CliError>,
) -> Result<(DataplaneView, usize), CliError> {
    let [path] = paths else {
        let loaded = load_states(paths)?;
        let view = replay_with(node, paths, loaded.states, messages, each)?;
        return Ok((view, loaded.dropped));
    };
    let pass = |options: GraphOptions| {
        let mut graph = CalcGraph::with_options(node, options);
        let mut config: BTreeMap<Key, Value> = BTreeMap::new();
        let state = stream_state(path, |updates| {
            for u in &updates {
                if let Some(v @ Value::Config(_)) = &u.value {
                    config.insert(u.key.clone(), v.clone());
                }
            }
            graph.on_updates(updates);
        })
        .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
        Ok::<_, CliError>((graph, state, config))
    };
    let assumed = graph_options(node, std::iter::empty::<(&Key, &Value)>());
    let (graph, state, config) = pass(assumed)?;
    report_problems(&state.errors)?;
    let options = graph_options(node, &config);
    let graph = if options == assumed {
        graph
    } else {
        drop(graph);
        pass(options)?.0
    };
    let view = replay_built(graph, paths, vec![Vec::new()], messages, each)?;
    Ok((view, state.errors.len()))
}

/// Runs `felix calc`.
pub fn run(args: CalcArgs) -> Result<(), CliError> {
    let node = node_name::resolve(args.node.as_deref());
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut seq: u64 = 0;
    let messages = if args.stream {
        Messages::Kept
    } else {
        Messages::Dropped
    };
    let (_, dropped) = replay_paths(&node, &args.states, messages, |i, view, flushed| {
        if args.stream {
            for p in flushed {
                seq += 1;
                writeln!(out, "{}", payload_json(seq, p)).context("writing output")?;
            }
            writeln!(out, "{{\"endOfState\": {i}}}").context("writing output")?;
        } else {
            serde_json::to_writer(&mut out, &view.json(i)).context("writing output")?;
            writeln!(out).context("writing output")?;
        }
        Ok(())
    })?;
    out.flush().context("writing output")?;
    if args.strict && dropped > 0 {
        return Err(CliError::Input(format!(
            "--strict: {} invalid resource(s) left out (listed above)",
            dropped
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPOOFING_WEP: &str = "apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node1-k8s-pod1-eth0
  namespace: default
spec:
  node: node1
  orchestrator: k8s
  pod: pod1
  endpoint: eth0
  interfaceName: cali1
  ipNetworks:
  - 10.0.0.1/32
  allowSpoofedSourcePrefixes:
  - 10.1.0.0/16
";

    const SPOOFING_ANY: &str = "apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata:
  name: default
spec:
  workloadSourceSpoofing: Any
";

    fn both_ways(dir: &std::path::Path) -> (DataplaneView, DataplaneView) {
        let paths = vec![dir.to_path_buf()];
        let (streamed, _) = replay_paths("node1", &paths, Messages::Dropped, |_, _, _| Ok(()))
            .expect("streamed replay");
        let loaded = load_states(&paths).expect("loaded");
        let merged = replay("node1", &paths, loaded.states, |_, _, _| Ok(())).expect("replay");
        (streamed, merged)
    }

    /// The streamed single state builds the graph with the environment's options first; a
    /// state whose FelixConfiguration asks for others (here `WorkloadSourceSpoofing: Any`,
    /// which keeps an endpoint with spoofed prefixes) is computed again with those, and the
    /// view is the merged load's.
    #[test]
    fn a_streamed_state_whose_configuration_changes_the_graph_options_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        // The configuration comes after the endpoint in reading order.
        std::fs::write(dir.path().join("a-endpoints.yaml"), SPOOFING_WEP).unwrap();
        let (streamed, merged) = both_ways(dir.path());
        assert!(
            streamed.workload_endpoints.is_empty(),
            "spoofing not allowed"
        );
        assert_eq!(streamed.to_json(0), merged.to_json(0));

        std::fs::write(dir.path().join("z-config.yaml"), SPOOFING_ANY).unwrap();
        let (streamed, merged) = both_ways(dir.path());
        assert_eq!(streamed.workload_endpoints.len(), 1, "spoofing allowed");
        assert_eq!(streamed.to_json(0), merged.to_json(0));
    }
}
