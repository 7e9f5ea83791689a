//! `felix bench`: prints benchmark figures (never asserts them).

use std::path::PathBuf;
use std::process::Command;

use clap::{Args, Subcommand};

use super::CliError;
use crate::bench;

/// Arguments of `felix bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub(crate) what: BenchWhat,
}

#[derive(Debug, Subcommand)]
pub(crate) enum BenchWhat {
    /// Calculation-graph workloads modelled on upstream's benchmarks:
    /// a, a-delete, b1k, b10k, c1k, c10k, c100k, d (churn).  Without
    /// --workload, runs each in its own child process (so peak RSS is the
    /// workload's own).
    Calc {
        /// One workload to run in this process.
        #[arg(long)]
        workload: Option<String>,
    },
    /// Parse + validate + convert a generated file datastore of N workload
    /// endpoints and M policies (one thread); prints resources/s and peak
    /// RSS.
    Load {
        /// Number of workload endpoints.
        #[arg(long, default_value_t = 100_000)]
        endpoints: usize,
        /// Number of policies.
        #[arg(long, default_value_t = 10_000)]
        policies: usize,
        /// Directory to generate into (default: a temporary directory,
        /// removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// The Linux dataplane at scale (issue 5): start-of-day convergence,
    /// one changed policy and one added endpoint, each beside the raw tool
    /// (`iptables-restore` + `ipset restore`, or `nft -f`) on the same
    /// ruleset or delta (eBPF: beside the other backends and the BPF map
    /// writes), plus RSS. Runs in throwaway network namespaces
    /// (needs root, `ip`, and the backend's tools).
    Dataplane {
        /// Backend to measure (default: all three, one after the other, then a summary
        /// table of them side by side).
        #[arg(long, value_enum)]
        backend: Option<bench::dataplane::Backend>,
        /// Internal: run one backend in this process (already inside its
        /// namespace), replaying raw tools into `--replay-netns`.
        #[arg(long, hide = true, requires_all = ["backend", "replay_netns"])]
        inner: bool,
        /// Internal: the namespace raw-tool replays go to.
        #[arg(long, hide = true)]
        replay_netns: Option<String>,
        /// Also measure each backend through the external driver protocol (a
        /// `felix-dataplane-driver` child fed over its descriptor 3), beside the in-process
        /// figures of the same run.
        #[arg(long)]
        pipe: bool,
        /// Internal: with --inner, drive the dataplane through the pipe.
        #[arg(long, hide = true)]
        through_pipe: bool,
        #[command(flatten)]
        sizes: bench::dataplane::Sizes,
    },
    /// Routing between nodes at scale (issue 20): start of day of N remote nodes (one block
    /// and one VTEP each) plus local workloads, beside `ip -batch`/`bridge -batch` on the same
    /// objects; one node added and removed; a restart with no memory; RSS. Runs in throwaway
    /// network namespaces (needs root, `ip`, `bridge`).
    Routes {
        #[command(flatten)]
        sizes: bench::routes::Sizes,
    },
    /// What policy costs real traffic (issue 22): TCP throughput and connection rate between
    /// two workloads through N policies in each dataplane mode, beside no felix at all, in
    /// one run. Runs in throwaway network namespaces (needs root, `ip`, the modes' tools).
    Traffic {
        /// Mode to measure (repeatable; default: none, iptables, nftables, bpf).
        #[arg(long, value_enum)]
        mode: Vec<bench::traffic::Mode>,
        /// Internal: run one mode in this process (already inside its namespace).
        #[arg(long, hide = true)]
        inner: bool,
        #[command(flatten)]
        sizes: bench::traffic::TrafficSizes,
    },
    /// The whole pipeline from resource files to the kernel (issue 25), as a user runs
    /// felix, beside its stages alone: `felix calc` of upstream's 250,000-endpoint workload
    /// written in each document style (wall, peak RSS); `felix run` start of day from process
    /// start to a settled dataplane, beside the raw tools loading the same ruleset; one
    /// changed policy from the file's rename to the kernel. Needs root, `ip` and the modes'
    /// tools for the `felix run` part.
    Pipeline {
        /// Document style of the `felix calc` figure (repeatable; default: all three).
        #[arg(long, value_enum)]
        style: Vec<bench::v3files::Style>,
        /// Skip the `felix calc` figure.
        #[arg(long)]
        no_calc: bool,
        /// Dataplane mode of the `felix run` figures (repeatable; default: nftables and
        /// iptables-nft).
        #[arg(long, value_enum)]
        mode: Vec<bench::pipeline::Mode>,
        /// Skip the `felix run` figures.
        #[arg(long)]
        no_run: bool,
        /// Policy changes timed per mode.
        #[arg(long, default_value_t = 9)]
        changes: usize,
        /// Skip the stage-alone benchmarks (`bench calc --workload a`, `bench dataplane`).
        #[arg(long)]
        no_stages: bool,
        /// Write the workload files and felix's logs under this directory and keep them
        /// (default: a temporary directory, removed at the end).
        #[arg(long, value_name = "DIR")]
        keep: Option<std::path::PathBuf>,
        #[command(flatten)]
        sizes: bench::dataplane::Sizes,
    },
}

/// Runs `felix bench`.
pub fn run(args: BenchArgs) -> Result<(), CliError> {
    match args.what {
        BenchWhat::Calc { workload: Some(w) } => {
            let r = bench::calc::run(&w).map_err(|e| CliError::Input(e.to_string()))?;
            println!("{r}");
            Ok(())
        }
        BenchWhat::Calc { workload: None } => {
            let exe = std::env::current_exe().map_err(anyhow::Error::from)?;
            for w in bench::calc::WORKLOADS {
                let out = Command::new(&exe)
                    .args(["bench", "calc", "--workload", w])
                    .output()
                    .map_err(anyhow::Error::from)?;
                if !out.status.success() {
                    return Err(CliError::Runtime(anyhow::anyhow!(
                        "workload {w} failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    )));
                }
                print!("{}", String::from_utf8_lossy(&out.stdout));
            }
            Ok(())
        }
        BenchWhat::Load {
            endpoints,
            policies,
            dir,
        } => {
            let tmp;
            let dir = match dir {
                Some(d) => d,
                None => {
                    tmp = tempdir()?;
                    tmp.0.clone()
                }
            };
            crate::datastore::bench::generate_dir(&dir, endpoints, policies)
                .map_err(anyhow::Error::from)?;
            let r = crate::datastore::bench::run_load_bench(&dir)?;
            println!("{r}");
            Ok(())
        }
        BenchWhat::Pipeline {
            style,
            no_calc,
            mode,
            no_run,
            changes,
            no_stages,
            keep,
            sizes,
        } => {
            use bench::pipeline::{Mode, Options};
            use bench::v3files::Style;
            let styles = match (no_calc, style.is_empty()) {
                (true, _) => Vec::new(),
                (false, true) => vec![Style::Yaml, Style::JsonDocs, Style::JsonList],
                (false, false) => style,
            };
            let modes = match (no_run, mode.is_empty()) {
                (true, _) => Vec::new(),
                (false, true) => vec![Mode::Nftables, Mode::IptablesNft],
                (false, false) => mode,
            };
            let opts = Options {
                styles,
                modes,
                sizes,
                changes,
                stages: !no_stages,
                keep,
            };
            bench::pipeline::run(&opts).map_err(CliError::Runtime)
        }
        BenchWhat::Routes { sizes } => {
            let r = bench::routes::run(&sizes).map_err(CliError::Runtime)?;
            print!("{r}");
            Ok(())
        }
        BenchWhat::Traffic { mode, inner, sizes } => {
            if inner {
                let [m] = mode.as_slice() else {
                    return Err(CliError::Input("--inner needs one --mode".to_string()));
                };
                init_stderr_logs();
                let f = bench::traffic::run_inner(*m, &sizes)
                    .map_err(|e| CliError::Runtime(e.into()))?;
                bench::traffic::print_line(*m, &f);
                return Ok(());
            }
            let modes = if mode.is_empty() {
                use bench::traffic::Mode;
                vec![Mode::None, Mode::Iptables, Mode::Nftables, Mode::Bpf]
            } else {
                mode
            };
            bench::traffic::run_outer(&modes, &sizes).map_err(CliError::Runtime)
        }
        BenchWhat::Dataplane {
            backend,
            inner,
            replay_netns,
            pipe,
            through_pipe,
            sizes,
        } => match (inner, backend, replay_netns) {
            (true, Some(b), Some(ns)) => {
                init_stderr_logs();
                let r = bench::dataplane::run_inner(b, &ns, &sizes, through_pipe)
                    .map_err(|e| CliError::Runtime(e.into()))?;
                print!("{r}");
                println!("{}", r.summary_line());
                Ok(())
            }
            (true, _, _) => Err(CliError::Input(
                "--inner needs --backend and --replay-netns".to_string(),
            )),
            (false, b, _) => {
                let all = bench::dataplane::Backend::ALL;
                let backends = b.map(|b| vec![b]).unwrap_or_else(|| all.to_vec());
                bench::dataplane::run_outer(&backends, &sizes, pipe).map_err(CliError::Runtime)
            }
        },
    }
}

/// Driver warnings (failed applies, retries) of an inner benchmark run go to stderr.
fn init_stderr_logs() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> Result<TempDir, CliError> {
    let p = std::env::temp_dir().join(format!("felix-bench-{}", std::process::id()));
    std::fs::create_dir_all(&p).map_err(anyhow::Error::from)?;
    Ok(TempDir(p))
}
