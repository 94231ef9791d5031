//! `docs/flags.md` is generated from the clap definition of `conflux run`; this test fails when
//! it is stale. Regenerate it with `CONFLUX_UPDATE_DOCS=1 cargo test -p conflux-operator --test flags_doc`.

use clap::{Args, Command};
use conflux_operator::run::RunArgs;

fn render() -> String {
    let command = RunArgs::augment_args(Command::new("run"));
    let mut out = String::from(
        "# `conflux run` flags\n\n\
         Generated from the command-line definition (`crates/operator-bin/src/run.rs`) by\n\
         `CONFLUX_UPDATE_DOCS=1 cargo test -p conflux-operator --test flags_doc`; a test fails when this\n\
         file is stale. Names follow Flux's controllers where Flux has the flag.\n\n\
         | flag | default | environment | description |\n|---|---|---|---|\n",
    );
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = match defaults.join(",") {
            d if d.is_empty() => "`\"\"`".to_owned(),
            d => format!("`{d}`"),
        };
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string().replace('\n', " ").replace('|', "\\|"))
            .unwrap_or_default();
        out.push_str(&format!("| `--{long}` | {default} | {env} | {help} |\n"));
    }
    out
}

#[test]
fn flags_reference_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/flags.md");
    let want = render();
    if std::env::var_os("CONFLUX_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).expect("write docs/flags.md");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/flags.md is stale: run `CONFLUX_UPDATE_DOCS=1 cargo test -p conflux-operator --test flags_doc`"
    );
}
