//! `felix datastore`: load resources into an etcd datastore and list them,
//! for users without calicoctl.
//!
//! * `felix datastore apply -f PATH` validates every resource in PATH (a
//!   YAML/JSON file, or a directory in the file-datastore layout) and then
//!   writes each one under the key and with the JSON value calicoctl
//!   (etcdv3 mode) would write (see [`crate::datastore::etcd::apply`]).
//!   Any invalid resource rejects the whole input before anything is
//!   written.
//! * `felix datastore get KIND` prints what is stored for KIND as one
//!   `<Kind>List` object (YAML by default, `-o json` for JSON), which
//!   `apply` accepts again.  Values that would be treated as absent are
//!   reported on stderr.
//!
//! `--datastore etcdv3:URLS` (as `felix run` takes it) or its alias
//! `--endpoints` (or `ETCD_ENDPOINTS`, as calicoctl) names the etcd members;
//! for `https://` members `--ca-cert-file`, `--cert-file` and `--key-file`
//! (or calicoctl's `ETCD_CA_CERT_FILE`, `ETCD_CERT_FILE`, `ETCD_KEY_FILE`)
//! give the CA and the client certificate.
//! Exit codes: 0 ok, 1 etcd unreachable or failing, 2 bad usage or bad
//! input (the message names file, line and field).

use std::io::Write;
use std::path::PathBuf;

use anyhow::anyhow;
use clap::{Args, Subcommand, ValueEnum};

use crate::daemon::datastore_spec::DatastoreSpec;
use crate::datastore::etcd::{apply, keys, parse_endpoints, EtcdClient, EtcdConfig};

use super::CliError;

/// Arguments of `felix datastore`.
#[derive(Debug, Args)]
pub struct DatastoreArgs {
    /// The datastore, named as for `felix run`: `etcdv3:URL[,URL...]`
    /// (takes precedence over --endpoints, which stays as an alias).
    #[arg(long, global = true, value_name = "SPEC")]
    pub datastore: Option<String>,
    /// etcd endpoints, comma-separated http[s]://HOST:PORT URLs.
    #[arg(
        long,
        global = true,
        env = "ETCD_ENDPOINTS",
        default_value = "http://127.0.0.1:2379",
        value_name = "URLS"
    )]
    pub endpoints: String,
    /// CA certificate(s) (PEM) that sign the etcd server certificates.
    #[arg(long, global = true, env = "ETCD_CA_CERT_FILE", value_name = "FILE")]
    pub ca_cert_file: Option<PathBuf>,
    /// Client certificate (PEM) for etcd client-certificate auth.
    #[arg(long, global = true, env = "ETCD_CERT_FILE", value_name = "FILE")]
    pub cert_file: Option<PathBuf>,
    /// Private key (PEM) of --cert-file.
    #[arg(long, global = true, env = "ETCD_KEY_FILE", value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: DatastoreCommand,
}

/// `felix datastore` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum DatastoreCommand {
    /// Validate resources from a file or directory and store them in etcd
    /// as calicoctl would (create or replace).
    Apply {
        /// A YAML/JSON file, or a directory of them (searched recursively;
        /// hidden files and editor temporaries are skipped).
        #[arg(short = 'f', long = "filename", value_name = "PATH")]
        file: PathBuf,
    },
    /// List the stored resources of one kind.
    Get {
        /// Kind: e.g. GlobalNetworkPolicy, networkpolicies, gnp, wep,
        /// ippools, ipamblocks, namespaces.
        kind: String,
        /// Only this namespace (namespaced kinds).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Yaml)]
        output: Output,
    },
}

/// Output format of `get`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    Yaml,
    Json,
}

/// Runs `felix datastore`.
pub fn run(args: DatastoreArgs) -> Result<(), CliError> {
    let endpoints = match args.datastore.as_deref() {
        None => args.endpoints.clone(),
        Some(spec) => match DatastoreSpec::parse(spec)
            .map_err(|e| CliError::Input(format!("--datastore {spec}: {e}")))?
        {
            DatastoreSpec::Etcd(urls) => urls.join(","),
            DatastoreSpec::File(dir) => {
                return Err(CliError::Input(format!(
                    "--datastore {spec}: `felix datastore` writes to etcd; a file datastore is \
                     its files: copy them into {}",
                    dir.display()
                )))
            }
        },
    };
    let config = EtcdConfig {
        endpoints: parse_endpoints(&endpoints).map_err(|e| CliError::Input(e.to_string()))?,
        ca_file: args.ca_cert_file,
        cert_file: args.cert_file,
        key_file: args.key_file,
    };
    config
        .validate()
        .map_err(|e| CliError::Input(e.to_string()))?;
    let client = EtcdClient::from_config(&config, None).map_err(CliError::Input)?;
    match args.command {
        DatastoreCommand::Apply { file } => run_apply(&client, &file),
        DatastoreCommand::Get {
            kind,
            namespace,
            output,
        } => run_get(&client, &kind, namespace.as_deref(), output),
    }
}

fn run_apply(client: &EtcdClient, path: &std::path::Path) -> Result<(), CliError> {
    let resources = apply::load(path).map_err(|problems| {
        for p in problems.iter().skip(1) {
            eprintln!("felix: {p}");
        }
        CliError::Input(problems.first().cloned().unwrap_or_default())
    })?;
    let summary = apply::apply(client, &resources).map_err(|e| CliError::Runtime(anyhow!(e)))?;
    println!(
        "applied {} resource(s): {} created, {} updated, {} unchanged",
        resources.len(),
        summary.created,
        summary.updated,
        summary.unchanged
    );
    Ok(())
}

fn run_get(
    client: &EtcdClient,
    kind_name: &str,
    namespace: Option<&str>,
    output: Output,
) -> Result<(), CliError> {
    let kind = keys::kind_from_cli(kind_name)
        .ok_or_else(|| CliError::Input(format!("unknown resource kind {kind_name:?}")))?;
    let listed = apply::list(client, kind).map_err(|e| CliError::Runtime(anyhow!(e)))?;
    let mut items = Vec::new();
    for l in listed {
        if namespace.is_some() && l.id.namespace.as_deref() != namespace {
            continue;
        }
        if let Some(problem) = &l.problem {
            eprintln!("felix: warning: {problem}");
        }
        if let Some(object) = l.object {
            items.push(object);
        }
    }
    let list = apply::as_list(kind, items);
    let text = match output {
        Output::Json => serde_json::to_string_pretty(&list)
            .map(|mut s| {
                s.push('\n');
                s
            })
            .map_err(|e| CliError::Runtime(anyhow!(e)))?,
        Output::Yaml => {
            serde_yaml_ng::to_string(&list).map_err(|e| CliError::Runtime(anyhow!(e)))?
        }
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(|e| CliError::Runtime(anyhow!(e)))?;
    Ok(())
}
