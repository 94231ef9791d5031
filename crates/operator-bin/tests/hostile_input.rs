//! Hostile input (issue 11) through the real `conflux` binary: deeply nested documents and
//! templates, and random bytes on stdin, end in exit status 0 or 1 with a message, never in a
//! panic or a signal (a stack overflow is SIGSEGV/SIGABRT); usage errors are exit status 2.
//!
//! Random inputs come from a seeded generator; each test prints its seeds past libtest's capture
//! (`stdin <name>: <bytes> bytes, seed <n>`), so a failure repeats.

use std::io::Write;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Output, Stdio};

/// Writes a line straight to stderr, past libtest's output capture (as the conformance tests do).
macro_rules! summary {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Runs `conflux args…` with `stdin` (written from another thread, so a large input cannot
/// deadlock against a full stdout pipe) and no ambient variables that could change the result.
fn conflux(args: &[&str], stdin: Vec<u8>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_conflux"))
        .args(args)
        .env_remove("X")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("conflux starts");
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let writer = std::thread::spawn(move || {
        // The command may exit before reading everything (a usage error): a broken pipe is fine.
        let _ = pipe.write_all(&stdin);
    });
    let out = child.wait_with_output().expect("conflux finishes");
    let _ = writer.join();
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The process exited on its own (no signal: no stack overflow, no abort), with one of
/// `allowed`, without a panic message, and with a message when it failed.
fn assert_exit(out: &Output, allowed: &[i32], what: &str) -> i32 {
    let stderr = text(&out.stderr);
    let head: String = stderr.chars().take(600).collect();
    assert!(
        out.status.signal().is_none(),
        "{what}: killed by signal {:?}; stderr: {head}",
        out.status.signal()
    );
    assert!(!stderr.contains("panicked"), "{what}: panicked: {head}");
    let code = out.status.code().unwrap_or(-1);
    assert!(
        allowed.contains(&code),
        "{what}: exit status {code}, expected one of {allowed:?}; stderr: {head}"
    );
    if code != 0 {
        // `conflux plan` reports findings on stdout; everything else says why on stderr.
        assert!(
            !stderr.trim().is_empty() || !out.stdout.is_empty(),
            "{what}: exit {code} without a message"
        );
    }
    code
}

// ---------------------------------------------------------------------------------------------
// Deep nesting
// ---------------------------------------------------------------------------------------------

#[test]
fn build_refuses_200k_open_brackets() {
    let out = conflux(&["build"], "[".repeat(200_000).into_bytes());
    assert_exit(&out, &[1], "build [×200k");
    assert!(
        text(&out.stderr).contains("parsing stdin"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn envsubst_refuses_100k_nested_expressions() {
    let out = conflux(&["envsubst"], "${".repeat(100_000).into_bytes());
    assert_exit(&out, &[1], "envsubst ${×100k");
    assert_eq!(text(&out.stderr).trim(), "unable to parse variable name");
    let out = conflux(&["envsubst", "--strict"], "${".repeat(100_000).into_bytes());
    assert_exit(&out, &[1], "envsubst --strict ${×100k");
    // Closed, the same depth evaluates (an explicit stack, no recursion).
    let closed = format!("{}deep{}", "${X:=".repeat(100_000), "}".repeat(100_000));
    let out = conflux(&["envsubst"], closed.into_bytes());
    assert_exit(&out, &[0], "envsubst ${X:=×100k closed");
    assert_eq!(text(&out.stdout), "deep");
}

#[test]
fn deep_yaml_in_every_shape_exits_1() {
    let n = 200_000;
    let mut block = String::new();
    for i in 0..3_000 {
        block.push_str(&" ".repeat(i));
        block.push_str("- \n");
    }
    let shapes = [
        ("{ x200k", "{".repeat(n)),
        (
            "[ x200k closed",
            format!("{}{}", "[".repeat(n), "]".repeat(n)),
        ),
        ("- - - - x200k", "- ".repeat(n)),
        ("{a: x100k", "{a: ".repeat(n / 2)),
        ("[{a: x100k", "[{a: ".repeat(n / 2)),
        ("? ? ? ? x200k", "? ".repeat(n)),
        ("a: a: a: x200k", "a: ".repeat(n)),
        ("&a [ x100k", "&a [".repeat(n / 2)),
        ("indented block sequences x3000", block),
    ];
    for (shape, input) in shapes {
        for args in [&["build"][..], &["plan", "-"][..]] {
            let out = conflux(args, input.clone().into_bytes());
            assert_exit(&out, &[1], &format!("{} on {shape}", args.join(" ")));
            assert!(
                text(&out.stderr).contains("stdin"),
                "{} on {shape}: {}",
                args.join(" "),
                text(&out.stderr)
            );
        }
    }
}

/// A variable can inject structure into the YAML that Flux parses after substitution: nesting
/// beyond go-yaml's 10,000 levels is an error with the resource's name, not a crash.
#[test]
fn build_refuses_deeply_nested_substituted_values() {
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: ${v}\n";
    for value in [
        "[".repeat(20_000),
        format!("{}{}", "[".repeat(12_000), "]".repeat(12_000)),
        "{a: ".repeat(12_000),
    ] {
        let flag = format!("v={value}");
        let out = conflux(&["build", "--substitute", &flag], manifest.into());
        assert_exit(&out, &[1], "build with a nested value");
        assert!(
            text(&out.stderr).contains("post build failed for 'ConfigMap.v1.[noGrp]/c'"),
            "{}",
            text(&out.stderr)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Random bytes on stdin
// ---------------------------------------------------------------------------------------------

/// SplitMix64: a tiny, seeded, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        // n is small; the modulo bias does not matter for test inputs.
        usize::try_from(self.next() % n as u64).unwrap_or(0)
    }
}

/// `len` random bytes.
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(seed);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// About `len` bytes of random UTF-8: ASCII (controls included), Latin-1, BMP and astral
/// characters, NUL, BOM and line separators.
fn random_utf8(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut out = String::with_capacity(len + 4);
    while out.len() < len {
        let c = match rng.below(8) {
            0..=3 => Some(char::from(rng.below(128) as u8)),
            4 => char::from_u32(0x80 + rng.below(0x780) as u32),
            5 => char::from_u32(0x800 + rng.below(0xF800) as u32),
            6 => char::from_u32(0x10000 + rng.below(0x100000) as u32),
            _ => Some(['\0', '\u{FEFF}', '\u{2028}', '\u{85}', '\u{FFFE}'][rng.below(5)]),
        };
        out.extend(c);
    }
    out.into_bytes()
}

/// About `len` bytes of random tokens of YAML and `${…}` syntax, which get much further into
/// the parsers than uniform noise.
fn random_tokens(seed: u64, len: usize) -> Vec<u8> {
    const TOKENS: &[&str] = &[
        "- ",
        "? ",
        ": ",
        "[",
        "]",
        "{",
        "}",
        ", ",
        "\n",
        "\n  ",
        "\n    ",
        "---\n",
        "...\n",
        "# c\n",
        "&a ",
        "*a ",
        "!!str ",
        "!!binary ",
        "|\n",
        ">-\n",
        "'",
        "\"",
        "\\",
        "${",
        "}",
        "$$",
        ":=",
        ":-",
        "${X:-",
        "#",
        "%",
        "/",
        "apiVersion: v1\n",
        "kind: ConfigMap\n",
        "kind: Secret\n",
        "metadata:\n  name: c\n  namespace: n\n",
        "data:\n  k: ",
        "name",
        "yes",
        "0755",
        "1e3",
        "~",
        "\t",
        "\u{FEFF}",
        "é",
        "😀",
        "\0",
    ];
    let mut rng = Rng(seed);
    let mut out = String::with_capacity(len + 64);
    while out.len() < len {
        out.push_str(TOKENS[rng.below(TOKENS.len())]);
    }
    out.into_bytes()
}

/// A multi-document stream of well-formed manifests (ConfigMaps, Secrets, workloads, Flux
/// objects) whose values are random tokens in single-quoted scalars: it parses, so the input
/// reaches substitution, emission and every audit of `conflux plan`.
fn random_manifests(seed: u64, documents: usize) -> Vec<u8> {
    const KINDS: &[(&str, &str)] = &[
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Namespace"),
        ("apps/v1", "Deployment"),
        ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
        ("copy.conflux.dev/v1alpha1", "ConfigSync"),
    ];
    const KEYS: &[&str] = &[
        "fluxcd.controlplane.io/copyFrom",
        "copy.conflux.dev/allowed-namespaces",
        "kopy.kot-labs.com/sync",
        "reloader.stakater.com/auto",
        "configmap.reloader.stakater.com/reload",
        "kustomize.toolkit.fluxcd.io/substitute",
    ];
    let mut rng = Rng(seed);
    let value = |rng: &mut Rng| {
        // One line, no tabs: quoted scalars spanning lines would need indentation.
        let tokens = String::from_utf8_lossy(&random_tokens(rng.next(), rng.below(40)))
            .replace(['\0', '\n', '\r', '\t'], " ")
            .replace('\'', "''");
        let picks = [
            "a/b",
            "*",
            "true",
            "${X}",
            "app in (a)",
            "disabled",
            ".*",
            &tokens,
        ];
        picks[rng.below(picks.len())].to_owned()
    };
    let mut out = String::new();
    for _ in 0..documents {
        let (api_version, kind) = KINDS[rng.below(KINDS.len())];
        let (ns, name) = (["a", "b"][rng.below(2)], ["x", "y"][rng.below(2)]);
        out.push_str(&format!(
            "---\napiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations:\n"
        ));
        let first = rng.below(KEYS.len());
        for key in KEYS.iter().cycle().skip(first).take(rng.below(4)) {
            out.push_str(&format!("    {key}: '{}'\n", value(&mut rng)));
        }
        match kind {
            "ConfigMap" => out.push_str(&format!("data:\n  k: '{}'\n", value(&mut rng))),
            "Secret" => out.push_str("data:\n  k: djE=\n"),
            "Deployment" => out.push_str(&format!(
                "spec:\n  selector: {{}}\n  template:\n    spec:\n      containers:\n      - name: c\n        envFrom:\n        - configMapRef: {{name: '{}'}}\n",
                value(&mut rng)
            )),
            "Kustomization" => out.push_str(&format!(
                "spec:\n  postBuild:\n    substitute: {{X: '{}'}}\n    substituteFrom:\n    - {{kind: ConfigMap, name: '{}'}}\n",
                value(&mut rng),
                value(&mut rng)
            )),
            "ConfigSync" => out.push_str(&format!(
                "spec:\n  source: {{kind: ConfigMap, namespace: a, name: x}}\n  target:\n    namespaces: ['{}']\n",
                value(&mut rng)
            )),
            _ => {}
        }
    }
    out.into_bytes()
}

/// The subcommands that read stdin, with flag variations.
const STDIN_COMMANDS: &[&[&str]] = &[
    &["envsubst"],
    &["envsubst", "--strict"],
    &["build"],
    &[
        "build",
        "--always",
        "--typed",
        "--lint",
        "--substitute",
        "X=y",
    ],
    &["build", "--strict", "--substitute", "X=${X}"],
    &["plan", "-"],
    &["plan", "-", "--output=json", "--fail-on=warning"],
];

fn random_stdin_never_panics(kind: &str, generate: fn(u64, usize) -> Vec<u8>, seed: u64) {
    let len = 256 * 1024;
    for (i, args) in STDIN_COMMANDS.iter().enumerate() {
        let seed = seed + i as u64;
        summary!("stdin {kind} {}: {len} bytes, seed {seed}", args.join(" "));
        let out = conflux(args, generate(seed, len));
        assert_exit(
            &out,
            &[0, 1],
            &format!("{} on {kind} (seed {seed})", args.join(" ")),
        );
    }
}

#[test]
fn random_bytes_on_stdin() {
    random_stdin_never_panics("random bytes", random_bytes, 0xb17e_5000);
}

#[test]
fn random_utf8_on_stdin() {
    random_stdin_never_panics("random UTF-8", random_utf8, 0x07f8_5000);
}

#[test]
fn random_tokens_on_stdin() {
    random_stdin_never_panics("random YAML/envsubst tokens", random_tokens, 0x70ce_5000);
}

/// Many small inputs: random token soups, and well-formed manifests with random values, which
/// get through the YAML parser to substitution, emission and the audits.
#[test]
fn small_random_documents_on_stdin() {
    let seed = 0x5a11_5000;
    let runs = 40;
    summary!("stdin small documents: {runs} inputs per command, seed {seed}");
    for args in STDIN_COMMANDS {
        for i in 0..runs {
            let input = if i % 2 == 0 {
                random_tokens(seed + i, 200)
            } else {
                random_manifests(seed + i, 6)
            };
            let out = conflux(args, input.clone());
            assert_exit(
                &out,
                &[0, 1],
                &format!("{} on {:?}", args.join(" "), text(&input)),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exit codes
// ---------------------------------------------------------------------------------------------

#[test]
fn usage_errors_exit_2() {
    let cases: &[&[&str]] = &[
        &[],
        &["teleport"],
        &["--nope"],
        &["envsubst", "--nope"],
        &["envsubst", "extra"],
        &["build", "--strict=3"],
        &["build", "--substitute"],
        &["build", "a.yaml", "b.yaml"],
        &["plan"],
        &["plan", "-", "--output=xml"],
        &["plan", "-", "--fail-on=never"],
        &["crd", "extra"],
        &["install"],
        &["install", "--export", "--controllers=teleport"],
        &["run", "--controllers=teleport"],
        &["run", "--metrics-addr"],
    ];
    for args in cases {
        let out = conflux(args, b"a: 1\n".to_vec());
        assert_exit(&out, &[2], &format!("conflux {}", args.join(" ")));
        assert!(
            out.stdout.is_empty(),
            "conflux {}: wrote stdout",
            args.join(" ")
        );
    }
}

#[test]
fn success_exits_0() {
    let cases: &[(&[&str], &str)] = &[
        (&["--help"], ""),
        (&["--version"], ""),
        (&["envsubst"], "a: ${X:=1}\n"),
        (&["envsubst", "--strict"], "plain text, no variables\n"),
        (&["build"], ""),
        (
            &["build", "--substitute", "X=1"],
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: ${X}\n",
        ),
        (
            &["plan", "-"],
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: n\n",
        ),
        (&["crd"], ""),
        (&["install", "--export"], ""),
    ];
    for (args, stdin) in cases {
        let out = conflux(args, stdin.as_bytes().to_vec());
        assert_exit(&out, &[0], &format!("conflux {}", args.join(" ")));
    }
}

#[test]
fn problems_in_the_input_exit_1() {
    let cases: &[(&[&str], &str)] = &[
        (&["envsubst"], "${"),
        (&["envsubst", "--strict"], "${X}"),
        (&["build"], "a: [\n"),
        (
            &["build", "--strict", "--substitute", "Y=1"],
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: ${X}\n",
        ),
        (&["build", "/nonexistent/conflux-input.yaml"], ""),
        (&["plan", "-"], "a: [\n"),
        (&["plan", "/nonexistent/conflux-fleet"], ""),
    ];
    for (args, stdin) in cases {
        let out = conflux(args, stdin.as_bytes().to_vec());
        assert_exit(&out, &[1], &format!("conflux {}", args.join(" ")));
    }
    // Bytes that are not UTF-8: envsubst replaces them (as documented), build and plan refuse.
    let invalid = b"a: \xff\xfe\n".to_vec();
    assert_exit(
        &conflux(&["envsubst"], invalid.clone()),
        &[0],
        "envsubst on invalid UTF-8",
    );
    assert_exit(
        &conflux(&["build"], invalid.clone()),
        &[1],
        "build on invalid UTF-8",
    );
    assert_exit(
        &conflux(&["plan", "-"], invalid),
        &[1],
        "plan on invalid UTF-8",
    );
}
