//! `docs/config.md` must equal `render_markdown()`.

#[test]
fn docs_config_md_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md");
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        on_disk == felix_config::render_markdown(),
        "docs/config.md is stale or missing; regenerate it from the workspace root with:\n  \
         cargo run -p felix-config --example gen-config-docs > docs/config.md"
    );
}

#[test]
fn docs_list_every_parameter_with_env_name() {
    let md = felix_config::render_markdown();
    for spec in felix_config::PARAMS {
        assert!(
            md.contains(&format!("| `{}` | `{}` |", spec.name, spec.env_name())),
            "{}",
            spec.name
        );
    }
}
