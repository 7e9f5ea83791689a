//! Prints `docs/config.md`:
//! `cargo run -p felix-config --example gen-config-docs > docs/config.md`

fn main() {
    print!("{}", felix_config::render_markdown());
}
