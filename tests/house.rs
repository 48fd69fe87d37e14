//! The rules of the house, read from the source: the pass has no async
//! runtime, the server cannot reach the writer, no module imports one
//! that imports it back (at the level of files and of folders alike),
//! every wait comes from the one retry rule, what it decides is opaque,
//! metrics are set where the architecture says, no source file grows
//! past the length of one concern, and no error is a bare string.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path under `src/` (`reconcile/apply`, `reconcile` for
/// `reconcile/mod.rs`), and whether the file is a folder's `mod.rs`.
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix("src").unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into()).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Test code is left out: it may reach anywhere.
fn is_test(file: &Path) -> bool {
    let s = file.to_string_lossy();
    s.contains("/tests/")
        || s.ends_with("tests.rs")
        || s.contains("/tests_")
        || s.contains("testkit")
}

/// The file's text up to its unit tests.
fn code_of(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// `use a::{b, c::d}` written out as `a::b a::c::d` (one level of braces).
fn flatten_groups(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(open) = rest.find("::{") {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let inner = &rest[open + 3..open + close];
        if inner.contains('{') {
            out.push_str(&rest[..open + 3]);
            rest = &rest[open + 3..];
            continue;
        }
        let head_start = rest[..open]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |i| i + 1);
        let head = &rest[head_start..open];
        out.push_str(&rest[..head_start]);
        for name in inner
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != "self")
        {
            out.push_str(&format!(" {head}::{name} "));
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

fn exists(module: &[String]) -> bool {
    let base = Path::new("src").join(module.join("/"));
    base.with_extension("rs").exists() || base.join("mod.rs").exists()
}

/// The modules each non-test file names through `crate::`, `super::` or
/// `self::` paths.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(Path::new("src"), &mut files);
    let mut graph = BTreeMap::new();
    for file in files.iter().filter(|f| !is_test(f)) {
        let me = module_of(file);
        let folder = file.ends_with("mod.rs");
        let code = flatten_groups(&code_of(file));
        let mut deps = BTreeSet::new();
        let words: Vec<&str> = code
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .filter(|w| {
                w.starts_with("crate::") || w.starts_with("super::") || w.starts_with("self::")
            })
            .collect();
        for word in words {
            let mut parts = word.split("::").filter(|p| !p.is_empty());
            let mut base: Vec<String> = match parts.next() {
                Some("crate") => Vec::new(),
                Some("super") => me[..me.len().saturating_sub(1)].to_vec(),
                // `self::` in a folder's mod.rs is the folder; elsewhere it
                // is the file's own (inline) modules.
                _ if folder => me.clone(),
                _ => continue,
            };
            let mut rest: Vec<&str> = parts.collect();
            while rest.first() == Some(&"super") {
                base.pop();
                rest.remove(0);
            }
            let target: Vec<String> = base
                .into_iter()
                .chain(rest.iter().map(|s| s.to_string()))
                .collect();
            let found = (1..=target.len())
                .rev()
                .map(|k| &target[..k])
                .find(|m| exists(m));
            if let Some(m) = found {
                // A module's own parents and children are not imports.
                if !me.starts_with(m) && !m.starts_with(&me[..]) {
                    deps.insert(m.join("/"));
                }
            }
        }
        graph.insert(me.join("/"), deps);
    }
    graph
}

fn ancestors(module: &str) -> Vec<String> {
    let parts: Vec<&str> = module.split('/').collect();
    (1..=parts.len()).map(|k| parts[..k].join("/")).collect()
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = imports();
    assert!(graph.len() > 50, "the source was not read: {}", graph.len());
    assert!(
        graph["reconcile/apply"].contains("reconcile/decide"),
        "the import reader misses grouped imports: {:?}",
        graph["reconcile/apply"]
    );
    // Every folder and file stands for what is inside it.
    let mut edges = BTreeSet::new();
    for (a, deps) in &graph {
        for b in deps {
            for x in ancestors(a) {
                for y in ancestors(b) {
                    let related = x == y
                        || x.starts_with(&format!("{y}/"))
                        || y.starts_with(&format!("{x}/"));
                    if !related {
                        edges.insert((x.clone(), y));
                    }
                }
            }
        }
    }
    let cycles: Vec<_> = edges
        .iter()
        .filter(|(x, y)| x < y && edges.contains(&(y.clone(), x.clone())))
        .collect();
    assert!(
        cycles.is_empty(),
        "modules that import each other: {cycles:?}"
    );
}

#[test]
fn the_pass_has_no_async_runtime_and_the_server_no_writer() {
    let mut files = Vec::new();
    sources(Path::new("src/reconcile"), &mut files);
    assert!(files.len() > 10);
    for f in &files {
        let code = std::fs::read_to_string(f).unwrap();
        assert!(!code.contains("tokio"), "{} uses tokio", f.display());
    }
    let mut files = Vec::new();
    sources(Path::new("src/server"), &mut files);
    for f in files.iter().filter(|f| !is_test(f)) {
        let code = code_of(f);
        for writer in ["Worker", "Recorder", "open_writer", "Ledger::open("] {
            assert!(
                !code.contains(writer),
                "{} reaches the writer ({writer})",
                f.display()
            );
        }
    }
}

/// Every file of tests, in `src/` and `tests/`.
fn test_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    sources(Path::new("src"), &mut files);
    files.retain(|f| is_test(f) || code_of(f).len() < std::fs::read_to_string(f).unwrap().len());
    sources(Path::new("tests"), &mut files);
    files
}

/// Where a test skips for want of a tool, a server or a privilege, it asks
/// the one gate (tests/util/gate.rs), which fails it under CI or as root:
/// no other place reads `CI` or prints that it skipped.
fn skips_outside_the_gate(files: &[PathBuf]) -> Vec<String> {
    // The gate itself, and this file, which names what it looks for.
    let exempt = [Path::new("tests/util/gate.rs"), Path::new("tests/house.rs")];
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !exempt.contains(&f.as_path())) {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let skip_note =
                line.contains("eprintln!") && ["skip", "Skip"].iter().any(|w| line.contains(w));
            if line.contains("var_os(\"CI\")") || line.contains("var(\"CI\")") || skip_note {
                found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn every_test_skip_goes_through_the_one_gate() {
    let files = test_files();
    assert!(files.len() > 40, "{files:?}");
    let found = skips_outside_the_gate(&files);
    assert!(found.is_empty(), "skips outside the gate: {found:#?}");
    // The rule can fail: a planted skip is found.
    let planted = std::env::temp_dir().join(format!("house-plant-{}.rs", std::process::id()));
    std::fs::write(
        &planted,
        "fn t() {\n    if std::env::var_os(\"CI\").is_none() {\n        eprintln!(\"skipping\");\n        return;\n    }\n}\n",
    )
    .unwrap();
    let found = skips_outside_the_gate(std::slice::from_ref(&planted));
    std::fs::remove_file(&planted).unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
}

/// The source files outside tests, in `src/`.
fn code_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    sources(Path::new("src"), &mut files);
    files.retain(|f| !is_test(f));
    files
}

/// Where a wait is computed outside the one retry rule: the backoff's
/// arithmetic (src/backoff.rs) and the error policy
/// (src/reconcile/policy.rs) compute every "when next"; the rest ask them.
fn waits_outside_the_rule(files: &[PathBuf]) -> Vec<String> {
    let rule = [
        Path::new("src/backoff.rs"),
        Path::new("src/reconcile/policy.rs"),
    ];
    files
        .iter()
        .filter(|f| !rule.contains(&f.as_path()))
        .flat_map(|f| wait_arithmetic(f))
        .collect()
}

/// The lines of `file` that compute a wait: a backoff step, a jitter, a
/// doubling.
fn wait_arithmetic(file: &Path) -> Vec<String> {
    let arithmetic = [
        "backoff::jittered(",
        "backoff::delay(",
        "backoff::spread(",
        "mul_f64(",
        "random_range(",
        "1u32 <<",
        ".pow(",
    ];
    let mut found = Vec::new();
    for (n, line) in code_of(file).lines().enumerate() {
        if arithmetic.iter().any(|a| line.contains(a)) {
            found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
        }
    }
    found
}

#[test]
fn every_retry_and_backoff_is_computed_by_the_one_rule() {
    let files = code_files();
    assert!(files.len() > 100, "{}", files.len());
    let found = waits_outside_the_rule(&files);
    assert!(
        found.is_empty(),
        "waits computed outside the rule: {found:#?}"
    );
    // What it looks for is what the rule itself writes.
    let own = wait_arithmetic(Path::new("src/backoff.rs"));
    assert!(own.len() >= 2, "{own:?}");
    let planted = std::env::temp_dir().join(format!("house-wait-{}.rs", std::process::id()));
    std::fs::write(
        &planted,
        "fn next(n: u32) -> Duration {\n    (Duration::from_secs(1) * (1u32 << n)).min(MAX)\n}\nfn soon() -> Duration { backoff::jittered(3) }\n",
    )
    .unwrap();
    let found = waits_outside_the_rule(std::slice::from_ref(&planted));
    std::fs::remove_file(&planted).unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
}

/// The public fields of `pub struct NAME { ... }` in `code`.
fn public_fields(code: &str, name: &str) -> Vec<String> {
    let Some(start) = code.find(&format!("pub struct {name} {{")) else {
        return vec![format!("no `pub struct {name}`")];
    };
    let body = &code[start..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    body.lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| l.starts_with("pub"))
        .map(String::from)
        .collect()
}

#[test]
fn what_the_error_policy_decides_is_opaque() {
    let code = code_of(Path::new("src/reconcile/policy.rs"));
    let open = public_fields(&code, "NextStep");
    assert!(open.is_empty(), "NextStep has public fields: {open:?}");
    // Not an enum anyone can build a variant of.
    assert!(!code.contains("pub enum NextStep"));
    let planted =
        "pub struct NextStep {\n    pub kind: StepKind,\n    after: Option<Duration>,\n}\n";
    assert_eq!(public_fields(planted, "NextStep"), ["pub kind: StepKind,"]);
}

/// The metric setters of src/metrics.rs: its public methods but for
/// building and rendering.
fn metric_setters() -> Vec<String> {
    let code = code_of(Path::new("src/metrics.rs"));
    code.lines()
        .filter_map(|l| l.trim().strip_prefix("pub fn "))
        .filter_map(|l| l.split(['(', '<']).next())
        .filter(|name| !["new", "encode"].contains(name))
        .map(String::from)
        .collect()
}

/// The lines of `code`, a method call that rustfmt put on lines of its own
/// (`.metrics` and `.set_x(..)` below it) joined to the line it continues;
/// the index of each is that of its first line.
fn calls_joined(code: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for line in code.lines() {
        match lines.last_mut() {
            Some(last) if line.trim_start().starts_with('.') => last.push_str(line.trim()),
            _ => lines.push(line.to_string()),
        }
    }
    lines
}

/// Where a metric is set outside the daemon's publishing
/// (src/daemon/publish.rs) and the webhook count of the server.
fn metrics_set_elsewhere(files: &[PathBuf], setters: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for f in files {
        let allowed: &[&str] = match f.to_str().unwrap_or("") {
            "src/metrics.rs" | "src/daemon/publish.rs" => continue,
            "src/server/webhooks.rs" => &["webhook"],
            _ => &[],
        };
        for (n, line) in calls_joined(&code_of(f)).iter().enumerate() {
            let sets = setters
                .iter()
                .filter(|s| !allowed.contains(&s.as_str()))
                .any(|s| {
                    line.contains(&format!("metrics.{s}("))
                        || line.contains(&format!("metrics().{s}("))
                });
            if sets {
                found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn metrics_are_set_only_where_the_architecture_says() {
    let setters = metric_setters();
    assert!(setters.len() > 15, "{setters:?}");
    assert!(
        setters.contains(&"set_queue_depth".to_string()),
        "{setters:?}"
    );
    let found = metrics_set_elsewhere(&code_files(), &setters);
    assert!(
        found.is_empty(),
        "metrics set outside publish.rs: {found:#?}"
    );
    let planted = std::env::temp_dir().join(format!("house-metric-{}.rs", std::process::id()));
    std::fs::write(
        &planted,
        "fn f(s: &Shared) {\n    s.metrics.set_queue_depth(3);\n    state.metrics.webhook(\"github\", \"ok\");\n    self.shared\n        .metrics\n        .set_ha_leader(true);\n}\n",
    )
    .unwrap();
    let found = metrics_set_elsewhere(std::slice::from_ref(&planted), &setters);
    std::fs::remove_file(&planted).unwrap();
    assert_eq!(found.len(), 3, "{found:?}");
}

/// Lines of code (up to a file's unit tests) past which a source file
/// holds more than one concern: it is split along its seams.
const MAX_LINES: usize = 450;

/// The source files whose code runs past [`MAX_LINES`].
fn files_too_long(files: &[PathBuf]) -> Vec<String> {
    files
        .iter()
        .filter_map(|f| {
            let n = code_of(f).lines().count();
            (n > MAX_LINES).then(|| format!("{}: {n} lines", f.display()))
        })
        .collect()
}

#[test]
fn no_source_file_runs_past_the_length_of_one_concern() {
    let files = code_files();
    assert!(files.len() > 100, "{}", files.len());
    let found = files_too_long(&files);
    assert!(found.is_empty(), "files over {MAX_LINES} lines: {found:#?}");
    // A file one line too long is found; one whose unit tests make it
    // longer is not.
    let dir = std::env::temp_dir();
    let long = dir.join(format!("house-long-{}.rs", std::process::id()));
    let tested = dir.join(format!("house-tested-{}.rs", std::process::id()));
    std::fs::write(&long, "fn f() {}\n".repeat(MAX_LINES + 1)).unwrap();
    let tests = "#[cfg(test)]\nmod tests {\n".to_string() + &"fn t() {}\n".repeat(50) + "}\n";
    std::fs::write(&tested, "fn f() {}\n".repeat(MAX_LINES) + &tests).unwrap();
    let found = files_too_long(&[long.clone(), tested.clone()]);
    std::fs::remove_file(&long).unwrap();
    std::fs::remove_file(&tested).unwrap();
    assert_eq!(
        found,
        [format!("{}: {} lines", long.display(), MAX_LINES + 1)]
    );
}

/// The type arguments of the generic whose `<` is at `open` in `code`,
/// split at its top-level commas; `None` when it is not closed. An arrow's
/// `>` (`Fn() -> T`) closes nothing.
fn type_arguments(code: &str, open: usize) -> Option<Vec<String>> {
    let bytes = code.as_bytes();
    let (mut depth, mut args, mut current) = (0usize, Vec::new(), String::new());
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'<' | b'(' | b'[' => depth += 1,
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'>' | b')' | b']' => depth -= 1,
            b',' if depth == 1 => {
                args.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        match depth {
            0 => {
                args.push(current);
                return Some(args);
            }
            _ if i > open => current.push(b as char),
            _ => {}
        }
    }
    None
}

/// Where `file` gives an error as a bare `String`: a `Result` whose error
/// type is `String`, however it is spelled or spread over lines.
fn string_errors(file: &Path) -> Vec<String> {
    let code = code_of(file);
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find("Result").map(|i| at + i) {
        at = i + "Result".len();
        let word = i == 0 || {
            let before = code.as_bytes()[i - 1];
            !(before.is_ascii_alphanumeric() || before == b'_')
        };
        let rest = &code[at..];
        let open = at + (rest.len() - rest.trim_start().len());
        if !word || !code[open..].starts_with('<') {
            continue;
        }
        let Some(mut args) = type_arguments(&code, open) else {
            continue;
        };
        // A trailing comma leaves nothing after it.
        args.retain(|a| !a.trim().is_empty());
        let error = args
            .last()
            .map(|a| a.split_whitespace().collect::<String>());
        let bare = error.is_some_and(|e| e == "String" || e.ends_with("::String"));
        if args.len() == 2 && bare {
            let line = code[..i].matches('\n').count() + 1;
            let text = code[i..].lines().next().unwrap_or_default().trim();
            found.push(format!("{}:{line}: {text}", file.display()));
        }
    }
    found
}

#[test]
fn no_error_is_a_bare_string() {
    let files = code_files();
    assert!(files.len() > 100, "{}", files.len());
    let found: Vec<String> = files.iter().flat_map(|f| string_errors(f)).collect();
    assert!(
        found.is_empty(),
        "errors that are strings (give them a thiserror type): {found:#?}"
    );
    // The rule can fail: each spelling of a string error is found, and
    // strings that are no error are not.
    let planted = std::env::temp_dir().join(format!("house-string-{}.rs", std::process::id()));
    std::fs::write(
        &planted,
        "fn a() -> Result<(), String> {}\n\
         fn b(\n) -> Result<\n    Vec<u8>,\n    std::string::String,\n> {}\n\
         type Read = Box<dyn Fn() -> Result<Settings, String> + Send>;\n\
         fn c() -> Result<String, Error> {}\n\
         fn d() -> io::Result<String> {}\n\
         fn e() -> Result<HashMap<String, Vec<String>>, ParseError> {}\n\
         fn f() -> MyResult<u8, String> {}\n",
    )
    .unwrap();
    let found = string_errors(&planted);
    std::fs::remove_file(&planted).unwrap();
    let lines: Vec<&str> = found
        .iter()
        .map(|f| f.split(':').nth(1).unwrap_or_default())
        .collect();
    assert_eq!(lines, ["1", "3", "7"], "{found:#?}");
}
