//! Reloader/wave annotations: the input is read as `key=value` lines of the workload's
//! annotations; opt-in parsing (regex `reload` lists included) and the decision never panic.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use conflux_reloader::opt_in::{OptIn, Options};
use conflux_watch_index::refs::ConfigKind;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let annotations: BTreeMap<String, String> = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let opt_in = OptIn::parse(Some(&annotations), Some(&annotations));
    let _ = opt_in.problems();
    for auto_reload_all in [false, true] {
        let options = Options { auto_reload_all };
        let _ = opt_in.is_enabled(options);
        for kind in [ConfigKind::ConfigMap, ConfigKind::Secret] {
            for name in ["a", "app-config", ""] {
                let _ = opt_in.watches(kind, name, Some(&annotations), true, options);
            }
        }
    }
});
