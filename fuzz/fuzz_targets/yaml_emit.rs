//! `JSONToYAML` on arbitrary text (the lenient JSON reader, then the go-yaml v2 emitter): no
//! panic, and whatever is emitted parses back with `YAMLToJSON` (upstream's `<<` quirk aside).
#![no_main]

use libfuzzer_sys::fuzz_target;
use conflux_postbuild_subst::yaml::emit::json_text_to_yaml;
use conflux_postbuild_subst::yaml::parse::yaml_to_json_text;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(yaml) = json_text_to_yaml(text) {
        match yaml_to_json_text(&yaml) {
            Ok(_) => {}
            // Infinities and NaN are YAML, but not JSON.
            Err(e) if e.to_string().contains("json: unsupported value") => {}
            // go-yaml v2 writes a `<<` key plain and reads a plain `<<` back as a merge key
            // (upstream does not round-trip it either; a j2y conformance vector pins it).
            Err(e) if e.to_string().contains("map merge requires") => {}
            Err(e) => panic!("emitted {yaml:?} does not parse: {e}"),
        }
    }
});
