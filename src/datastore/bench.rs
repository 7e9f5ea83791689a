//! The datastore load benchmark (`felix bench load`).
//!
//! [`generate_dir`] writes a synthetic file datastore (workload endpoints
//! spread over 100 files, policies over 10); [`run_load_bench`] loads a
//! directory on the calling thread exactly as [`load_state`](super::load_state)
//! does (list, read, decode = parse + validate + convert, merge) and
//! reports the time spent in each phase, the throughput and the process's
//! peak resident set size.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::merge::{Merger, RelPath};
use super::{source, walk};

/// Number of files the workload endpoints are spread over.
const ENDPOINT_FILES: usize = 100;
/// Number of files the policies are spread over.
const POLICY_FILES: usize = 10;
/// Namespaces the synthetic resources live in.
const NAMESPACES: usize = 50;
/// Nodes the synthetic endpoints are spread over.
const NODES: usize = 100;

/// Writes a synthetic datastore under `dir` (created if needed):
/// `endpoints/wep-NNN.yaml` holding `endpoints` `WorkloadEndpoint`s and
/// `policies/pol-NN.yaml` holding `policies` policies (one in ten a
/// `GlobalNetworkPolicy`, the rest namespaced `NetworkPolicy`s).
pub fn generate_dir(dir: &Path, endpoints: usize, policies: usize) -> io::Result<()> {
    fs::create_dir_all(dir.join("endpoints"))?;
    fs::create_dir_all(dir.join("policies"))?;
    write_spread(
        dir,
        "endpoints/wep",
        3,
        ENDPOINT_FILES,
        endpoints,
        write_endpoint,
    )?;
    write_spread(dir, "policies/pol", 2, POLICY_FILES, policies, write_policy)?;
    Ok(())
}

/// Writes `count` resources round-robin into `files` files named
/// `<stem>-<index>.yaml`.
fn write_spread(
    dir: &Path,
    stem: &str,
    width: usize,
    files: usize,
    count: usize,
    write_one: fn(&mut String, usize),
) -> io::Result<()> {
    let files = files.min(count.max(1));
    let per_file = count.div_ceil(files);
    for f in 0..files {
        let start = f * per_file;
        let end = ((f + 1) * per_file).min(count);
        let mut text = String::with_capacity(per_file * 700);
        for i in start..end {
            write_one(&mut text, i);
        }
        let path = dir.join(format!("{stem}-{f:0width$}.yaml"));
        let mut file = io::BufWriter::new(fs::File::create(path)?);
        file.write_all(text.as_bytes())?;
        file.flush()?;
    }
    Ok(())
}

fn write_endpoint(out: &mut String, i: usize) {
    let ns = i % NAMESPACES;
    let node = i % NODES;
    let app = i % 200;
    let (b, c, d) = ((i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
    out.push_str(&format!(
        "---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node{node}-k8s-pod{i}-eth0
  namespace: ns{ns}
  labels:
    app: app{app}
    tier: {tier}
    projectcalico.org/namespace: ns{ns}
    projectcalico.org/orchestrator: k8s
    projectcalico.org/serviceaccount: default
spec:
  orchestrator: k8s
  node: node{node}
  pod: pod{i}
  endpoint: eth0
  containerID: c{i:012x}
  interfaceName: cali{i:011x}
  mac: 'ee:ee:ee:{b:02x}:{c:02x}:{d:02x}'
  ipNetworks:
  - 10.{b}.{c}.{d}/32
  profiles:
  - kns.ns{ns}
  - ksa.ns{ns}.default
  ports:
  - name: http
    port: 8080
    protocol: TCP
",
        tier = if i.is_multiple_of(3) {
            "frontend"
        } else {
            "backend"
        },
    ));
}

fn write_policy(out: &mut String, i: usize) {
    let app = i % 200;
    if i.is_multiple_of(10) {
        out.push_str(&format!(
            "---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: gnp{i}
spec:
  order: {order}
  selector: app == 'app{app}'
  types:
  - Ingress
  - Egress
  ingress:
  - action: Allow
    protocol: TCP
    source:
      nets:
      - 192.168.{c}.0/24
    destination:
      ports:
      - 22
      - 443
  egress:
  - action: Deny
    destination:
      nets:
      - 169.254.0.0/16
",
            order = i % 1000,
            c = i % 256,
        ));
    } else {
        out.push_str(&format!(
            "---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata:
  name: np{i}
  namespace: ns{ns}
spec:
  order: {order}
  selector: app == 'app{app}' && tier == 'backend'
  types:
  - Ingress
  - Egress
  ingress:
  - action: Allow
    protocol: TCP
    source:
      selector: tier == 'frontend'
    destination:
      ports:
      - 8080
      - '9000:9100'
  egress:
  - action: Allow
    protocol: UDP
    destination:
      selector: app == 'dns'
      ports:
      - 53
",
            ns = i % NAMESPACES,
            order = i % 1000,
        ));
    }
}

/// Figures from one [`run_load_bench`].
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// Files listed.
    pub files: usize,
    /// Documents decoded (valid or not).
    pub resources: usize,
    /// Model keys after the duplicate rule.
    pub keys: usize,
    /// File-level, validation and duplicate errors.
    pub errors: usize,
    /// Bytes read.
    pub bytes: u64,
    /// Time to list the directory.
    pub list_time: Duration,
    /// Time spent reading files.
    pub read_time: Duration,
    /// Parse + validate + convert (`resources::decode_documents`).
    pub decode_time: Duration,
    /// This thread's CPU time in parse + validate + convert.
    pub decode_cpu: Duration,
    /// The same phase's user/kernel split and minor page faults (the kernel
    /// part is mostly zeroing newly touched memory).
    pub decode_usage: crate::cputime::ThreadUsage,
    /// Duplicate rule and per-key diff.
    pub merge_time: Duration,
    /// Wall-clock time of the whole load.
    pub wall: Duration,
    /// CPU time this thread spent in the load (equals `wall` on an idle
    /// machine; on a busy one it is the figure that says what one core does).
    pub cpu: Duration,
    /// Peak resident set size of the process (`VmHWM`), if known.
    pub peak_rss_kib: Option<u64>,
}

impl LoadReport {
    /// Resources per second of wall time.
    pub fn resources_per_sec(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.resources as f64 / secs
        } else {
            0.0
        }
    }

    /// Resources per second of this thread's CPU time in parse + validate +
    /// convert alone (the "parse + validate + convert rate").
    pub fn decode_per_cpu_sec(&self) -> f64 {
        let secs = self.decode_cpu.as_secs_f64();
        if secs > 0.0 {
            self.resources as f64 / secs
        } else {
            0.0
        }
    }

    /// Resources per second of this thread's CPU time.
    pub fn resources_per_cpu_sec(&self) -> f64 {
        let secs = self.cpu.as_secs_f64();
        if secs > 0.0 {
            self.resources as f64 / secs
        } else {
            0.0
        }
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        writeln!(
            f,
            "loaded {} resources ({} keys, {} errors) from {} files ({:.1} MiB) in {:.1} ms: {:.0} resources/s",
            self.resources,
            self.keys,
            self.errors,
            self.files,
            self.bytes as f64 / (1024.0 * 1024.0),
            ms(self.wall),
            self.resources_per_sec()
        )?;
        writeln!(
            f,
            "  cpu {:.1} ms on this thread: {:.0} resources per CPU-second",
            ms(self.cpu),
            self.resources_per_cpu_sec()
        )?;
        writeln!(
            f,
            "  list {:.1} ms, read {:.1} ms, decode (parse+validate+convert) {:.1} ms, merge {:.1} ms",
            ms(self.list_time),
            ms(self.read_time),
            ms(self.decode_time),
            ms(self.merge_time)
        )?;
        writeln!(
            f,
            "  parse+validate+convert: cpu {:.1} ms, {:.0} resources per CPU-second",
            ms(self.decode_cpu),
            self.decode_per_cpu_sec()
        )?;
        writeln!(
            f,
            "    of which user {:.1} ms, kernel {:.1} ms ({} minor page faults: zeroing fresh memory)",
            ms(self.decode_usage.user),
            ms(self.decode_usage.system),
            self.decode_usage.minor_faults
        )?;
        match self.peak_rss_kib {
            Some(kib) => write!(f, "  peak RSS {:.1} MiB", kib as f64 / 1024.0),
            None => write!(f, "  peak RSS unknown"),
        }
    }
}

/// Loads the datastore directory `dir` on this thread and measures it.
pub fn run_load_bench(dir: &Path) -> anyhow::Result<LoadReport> {
    let start = felix_actors::clock::real_now();
    let cpu_start = crate::cputime::thread_cpu_time();
    let listing = walk::list(dir).with_context(|| format!("listing {}", dir.display()))?;
    let list_time = start.elapsed();
    let mut report = LoadReport {
        files: listing.files.len(),
        resources: 0,
        keys: 0,
        errors: listing.unreadable.len(),
        bytes: 0,
        list_time,
        read_time: Duration::ZERO,
        decode_time: Duration::ZERO,
        decode_cpu: Duration::ZERO,
        decode_usage: Default::default(),
        merge_time: Duration::ZERO,
        wall: Duration::ZERO,
        cpu: Duration::ZERO,
        peak_rss_kib: None,
    };
    let mut merger = Merger::new(dir);
    for (rel, _) in &listing.files {
        let abs = dir.join(rel);
        let t = felix_actors::clock::real_now();
        let bytes = fs::read(&abs).with_context(|| format!("reading {}", abs.display()))?;
        report.read_time += t.elapsed();
        report.bytes += bytes.len() as u64;

        let t = felix_actors::clock::real_now();
        let c = crate::cputime::thread_cpu_time();
        let u = crate::cputime::thread_usage();
        let decoded = source::decode(&bytes, &abs.display().to_string(), walk::format_for(rel));
        report.decode_cpu += crate::cputime::thread_cpu_time().saturating_sub(c);
        report
            .decode_usage
            .add(&crate::cputime::thread_usage().since(&u));
        report.decode_time += t.elapsed();
        let decoded = match decoded {
            Ok(d) => d,
            Err(_) => {
                report.errors += 1;
                continue;
            }
        };
        report.resources += decoded.docs.len();
        report.errors += decoded.invalid.len();

        let t = felix_actors::clock::real_now();
        report.errors += merger
            .replace_file(&RelPath::new(rel), Some(decoded.docs))
            .len();
        report.merge_time += t.elapsed();
    }
    let t = felix_actors::clock::real_now();
    report.keys = merger.take_updates().len();
    report.merge_time += t.elapsed();
    report.wall = start.elapsed();
    report.cpu = crate::cputime::thread_cpu_time().saturating_sub(cpu_start);
    report.peak_rss_kib = peak_rss_kib();
    Ok(report)
}

/// `VmHWM` of this process, in KiB.
fn peak_rss_kib() -> Option<u64> {
    crate::bench::read_status_kib("VmHWM:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_datastore_loads_without_errors() {
        let dir = tempfile::tempdir().unwrap();
        generate_dir(dir.path(), 250, 30).unwrap();
        let report = run_load_bench(dir.path()).unwrap();
        assert_eq!(report.resources, 280, "{report}");
        assert_eq!(report.errors, 0, "{report}");
        assert_eq!(report.keys, 280, "{report}");
        assert_eq!(report.files, 100 + 10);
        let snapshot = crate::datastore::load_state(dir.path()).unwrap();
        assert!(snapshot.errors.is_empty(), "{:?}", snapshot.errors);
        assert_eq!(snapshot.values.len(), report.keys);
    }

    /// `cargo test --release -p felix --lib datastore::bench -- --ignored --nocapture`
    #[test]
    #[ignore = "benchmark: run in release mode with --nocapture"]
    fn load_bench_100k_endpoints_10k_policies() {
        let dir = tempfile::tempdir().unwrap();
        generate_dir(dir.path(), 100_000, 10_000).unwrap();
        let report = run_load_bench(dir.path()).unwrap();
        println!("{report}");
        assert_eq!(report.resources, 110_000);
        assert_eq!(report.errors, 0);
    }
}
