//! Resolution of this node's name: `--node`, else `FELIX_FELIXHOSTNAME`
//! (case-insensitive, as every `FELIX_` variable), else the hostname.

/// The node name to use.
pub fn resolve(flag: Option<&str>) -> String {
    if let Some(n) = flag {
        return n.to_string();
    }
    for (k, v) in std::env::vars() {
        if k.eq_ignore_ascii_case("FELIX_FELIXHOSTNAME") && !v.is_empty() {
            return v;
        }
    }
    hostname()
}

/// The kernel's host name (`HOSTNAME`, then `localhost`, if unreadable).
pub fn hostname() -> String {
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let h = h.trim();
        if !h.is_empty() {
            return h.to_string();
        }
    }
    std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_string())
}
