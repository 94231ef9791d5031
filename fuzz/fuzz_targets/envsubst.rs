//! The `${VAR}` engine on arbitrary bytes (as `conflux envsubst` reads stdin: invalid UTF-8
//! becomes U+FFFD), strict and not: no panic, and the modes agree with each other.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use conflux_postbuild_subst::envsubst::{Mode, eval, eval_bytes, undefined_variables};

fuzz_target!(|data: &[u8]| {
    let template = String::from_utf8_lossy(data);
    let vars: HashMap<String, String> = [("a", "héllo"), ("b", ""), ("n", "-3"), ("y", "${a}$$")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let lax = eval(&template, &vars, Mode::NonStrict);
    let lax_bytes = eval_bytes(&template, &vars, Mode::NonStrict);
    assert_eq!(
        lax.as_ref().ok(),
        lax_bytes
            .as_ref()
            .ok()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .as_ref()
    );
    let strict = eval(&template, &vars, Mode::Strict);
    let undefined = undefined_variables(&template, &vars);
    assert_eq!(
        strict.is_ok(),
        matches!(&undefined, Ok(found) if found.is_empty())
    );
    if let Ok(strict) = &strict {
        assert_eq!(Some(strict), lax.as_ref().ok());
    }
    assert_eq!(lax.is_ok(), undefined.is_ok());
});
