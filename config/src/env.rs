//! `FELIX_<NAME>` environment overrides.

use std::collections::BTreeMap;

const PREFIX: &str = "FELIX_";

/// Picks the `FELIX_`-prefixed variables (prefix matched ignoring case) and
/// returns `NAME -> value` with the prefix removed. Names keep the case they
/// were given; [`crate::Config::build`] matches them ignoring case.
/// A bare `FELIX_` (empty name) is skipped.
pub fn env_overrides<I, K, V>(vars: I) -> BTreeMap<String, String>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut out = BTreeMap::new();
    for (k, v) in vars {
        let k = k.as_ref();
        let Some(head) = k.get(..PREFIX.len()) else {
            continue;
        };
        if !head.eq_ignore_ascii_case(PREFIX) {
            continue;
        }
        let name = &k[PREFIX.len()..];
        if name.is_empty() {
            continue;
        }
        out.insert(name.to_string(), v.as_ref().to_string());
    }
    out
}

/// [`env_overrides`] over this process's environment (variables whose name
/// or value is not valid UTF-8 are skipped).
pub fn process_env_overrides() -> BTreeMap<String, String> {
    env_overrides(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    )
}
