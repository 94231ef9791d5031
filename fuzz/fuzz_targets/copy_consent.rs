//! `fluxcd.controlplane.io/copyFrom` values, the consent annotation's namespace globs and kopy
//! selectors. The input is split at the first two NUL bytes: copyFrom value / consent list /
//! target namespace.
#![no_main]

use std::collections::BTreeMap;

use conflux_copy_core::consent::{ALLOWED_NAMESPACES_ANNOTATION, allows, check};
use conflux_copy_core::copy_from::{COPY_FROM_ANNOTATION, CopyFrom, copy_source};
use conflux_copy_core::fan_out::KOPY_SYNC_ANNOTATION;
use conflux_watch_index::glob::glob_match;
use conflux_copy_core::{FanOut, SourceKind, SourceRef};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(3, '\0');
    let copy_from = parts.next().unwrap_or_default();
    let list = parts.next().unwrap_or_default();
    let namespace = parts.next().unwrap_or_default();

    if let Ok(parsed) = CopyFrom::parse(copy_from) {
        assert_eq!(format!("{}/{}", parsed.namespace, parsed.name), copy_from);
    }
    let annotations = BTreeMap::from([
        (COPY_FROM_ANNOTATION.to_owned(), copy_from.to_owned()),
        (ALLOWED_NAMESPACES_ANNOTATION.to_owned(), list.to_owned()),
        (KOPY_SYNC_ANNOTATION.to_owned(), list.to_owned()),
    ]);
    let _ = copy_source("v1", "Secret", Some(&annotations));
    let source = SourceRef::new(SourceKind::Secret, "src", "token");
    assert_eq!(
        check(&source, Some(&annotations), namespace).is_ok(),
        namespace == "src" || allows(list, namespace)
    );
    let _ = glob_match(list, namespace);
    if let Ok(Some(fan_out)) = FanOut::from_kopy(&source, Some(&annotations), ["src"]) {
        let _ = fan_out.selects(conflux_copy_core::NamespaceView::new(namespace));
    }
});
