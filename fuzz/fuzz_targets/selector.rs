//! Label selectors: `labels.Parse` on arbitrary text, and `LabelSelectorAsSelector` on arbitrary
//! JSON. No panic; the canonical form of a parsed selector parses to the same canonical form.
#![no_main]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use libfuzzer_sys::fuzz_target;
use conflux_watch_index::selector::{Selector, validate_label_selector};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(selector) = Selector::parse(text) {
        let canonical = selector.to_string();
        let again = Selector::parse(&canonical).map(|s| s.to_string());
        assert_eq!(again.as_deref(), Ok(canonical.as_str()));
        let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        let _ = selector.matches(&labels);
    }
    if let Ok(label_selector) = serde_json::from_str::<LabelSelector>(text) {
        let _ = validate_label_selector(&label_selector, "spec.selector");
        if let Ok(selector) = Selector::from_label_selector(&label_selector) {
            let _ = selector.to_string();
        }
    }
});
