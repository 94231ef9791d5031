//! `YAMLToJSON` (the go-yaml v2 parser) on arbitrary text: no panic, no stack overflow, the
//! text and value APIs agree, and what it accepts is JSON that `JSONToYAML` writes back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use conflux_postbuild_subst::yaml::emit::json_to_yaml;
use conflux_postbuild_subst::yaml::parse::{yaml_to_json, yaml_to_json_text};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let as_text = yaml_to_json_text(text);
    let as_value = yaml_to_json(text);
    match (&as_text, &as_value) {
        (Ok(json), Ok(value)) => {
            let reparsed: serde_json::Value =
                serde_json::from_str(json).expect("YAMLToJSON output is JSON");
            // Floats and integers may differ in type (`8.0` prints as `8`), not in presence.
            assert_eq!(reparsed.is_object(), value.is_object());
            assert_eq!(reparsed.is_array(), value.is_array());
            // Anything parsed can be written again (or is refused with an error).
            let _ = json_to_yaml(value);
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!("text API {a:?}, value API {b:?}"),
    }
});
