//! Labelled metric families any component can feed by name ([`crate::Metrics::set_gauge`],
//! [`crate::Metrics::add_counter`], [`crate::Metrics::observe_summary`]), rendered once per
//! family whoever feeds it: several drivers reporting into one family (one per table and IP
//! version) share one `# HELP`/`# TYPE` header.
//!
//! Summaries follow upstream Felix's (a Prometheus summary with the 0.5, 0.9 and 0.99
//! quantiles, `_sum` and `_count`): the quantiles are computed over the latest
//! [`SUMMARY_WINDOW`] observations, `_sum` and `_count` over all of them.
//!
//! Invariants: a family renders with one header and every series it was fed
//! (`a_family_fed_by_several_components_has_one_header`); quantiles are order statistics of
//! the window (`summary_quantiles_are_order_statistics_of_the_window`).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

/// Observations a summary's quantiles are computed over.
pub const SUMMARY_WINDOW: usize = 1024;

/// The quantiles a summary reports (upstream's defaults).
pub const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// `{labels}`, or nothing for an unlabelled series.
fn braced(labels: &str) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    }
}

/// A Prometheus summary.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    window: VecDeque<f64>,
    sum: f64,
    count: u64,
}

impl Summary {
    /// Records one observation.
    pub fn observe(&mut self, v: f64) {
        if self.window.len() == SUMMARY_WINDOW {
            self.window.pop_front();
        }
        self.window.push_back(v);
        self.sum += v;
        self.count += 1;
    }

    /// The `q` quantile of the window (`NaN` when empty, as Prometheus clients report it).
    pub fn quantile(&self, q: f64) -> f64 {
        if self.window.is_empty() {
            return f64::NAN;
        }
        let mut v: Vec<f64> = self.window.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    /// Renders the series of this summary under `name` with extra `labels` (may be empty).
    pub fn render_series(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for q in QUANTILES {
            let _ = writeln!(
                out,
                "{name}{{{labels}{sep}quantile=\"{q}\"}} {}",
                self.quantile(q)
            );
        }
        let _ = writeln!(out, "{name}_sum{} {}", braced(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braced(labels), self.count);
    }

    /// Renders a whole unlabelled summary family.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
        self.render_series(out, name, "");
    }
}

#[derive(Debug, Clone)]
enum Series {
    Gauge(BTreeMap<String, f64>),
    Counter(BTreeMap<String, f64>),
    Summary(BTreeMap<String, Summary>),
}

/// The families fed by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Families {
    by_name: BTreeMap<&'static str, (&'static str, Series)>,
}

impl Families {
    pub(crate) fn set_gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &str,
        v: f64,
    ) {
        if let Series::Gauge(s) = &mut self
            .by_name
            .entry(name)
            .or_insert_with(|| (help, Series::Gauge(BTreeMap::new())))
            .1
        {
            s.insert(labels.to_string(), v);
        }
    }

    pub(crate) fn add_counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &str,
        delta: f64,
    ) {
        if let Series::Counter(s) = &mut self
            .by_name
            .entry(name)
            .or_insert_with(|| (help, Series::Counter(BTreeMap::new())))
            .1
        {
            *s.entry(labels.to_string()).or_default() += delta;
        }
    }

    pub(crate) fn observe_summary(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &str,
        v: f64,
    ) {
        if let Series::Summary(s) = &mut self
            .by_name
            .entry(name)
            .or_insert_with(|| (help, Series::Summary(BTreeMap::new())))
            .1
        {
            s.entry(labels.to_string()).or_default().observe(v);
        }
    }

    /// Makes unlabelled summary `name` exist (rendered with no observations: quantiles
    /// `NaN`, `_sum` and `_count` 0) until it is observed.
    pub(crate) fn declare_summary(&mut self, name: &'static str, help: &'static str) {
        if let Series::Summary(s) = &mut self
            .by_name
            .entry(name)
            .or_insert_with(|| (help, Series::Summary(BTreeMap::new())))
            .1
        {
            s.entry(String::new()).or_default();
        }
    }

    pub(crate) fn render(&self, out: &mut String) {
        for (name, (help, series)) in &self.by_name {
            let kind = match series {
                Series::Gauge(_) => "gauge",
                Series::Counter(_) => "counter",
                Series::Summary(_) => "summary",
            };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            match series {
                Series::Gauge(s) | Series::Counter(s) => {
                    for (labels, v) in s {
                        let _ = writeln!(out, "{name}{} {v}", braced(labels));
                    }
                }
                Series::Summary(s) => {
                    for (labels, sum) in s {
                        sum.render_series(out, name, labels);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_quantiles_are_order_statistics_of_the_window() {
        let mut s = Summary::default();
        assert!(s.quantile(0.5).is_nan());
        for v in (1..=100).rev() {
            s.observe(f64::from(v));
        }
        assert_eq!(s.quantile(0.5), 50.0);
        assert_eq!(s.quantile(0.9), 90.0);
        assert_eq!(s.quantile(0.99), 99.0);
        for _ in 0..SUMMARY_WINDOW {
            s.observe(1000.0);
        }
        assert_eq!(s.quantile(0.5), 1000.0, "old observations left the window");
        let mut out = String::new();
        s.render(&mut out, "x", "help");
        assert!(out.contains("# TYPE x summary\nx{quantile=\"0.5\"} 1000\n"));
        assert!(out.contains(&format!("x_count {}", 100 + SUMMARY_WINDOW)));
    }

    #[test]
    fn a_family_fed_by_several_components_has_one_header() {
        let mut f = Families::default();
        f.set_gauge("g", "a gauge", "table=\"filter\"", 3.0);
        f.set_gauge("g", "a gauge", "table=\"nat\"", 4.0);
        f.set_gauge("g", "a gauge", "table=\"filter\"", 5.0);
        f.add_counter("c", "a counter", "", 2.0);
        f.add_counter("c", "a counter", "", 1.0);
        f.observe_summary("s", "a summary", "", 7.0);
        let mut out = String::new();
        f.render(&mut out);
        assert_eq!(out.matches("# TYPE g gauge").count(), 1);
        assert!(out.contains("g{table=\"filter\"} 5\ng{table=\"nat\"} 4\n"));
        assert!(out.contains("# TYPE c counter\nc 3\n"));
        assert!(out.contains("# TYPE s summary\ns{quantile=\"0.5\"} 7\n"));
    }
}
