//! A repository file named with terminal escape sequences (ESC, BEL, CR)
//! reaches no text output raw: diff (live and `--against`), sync and its
//! log lines, status, explain and validate print it quoted with C escapes,
//! as git prints such a path.

mod util;

use util::{Env, Run};

/// Retitles the terminal, clears it, and returns to the line's start.
const EVIL: &str = "evil\x1b]0;PWNED\x07\x1b[2J\r.txt";
/// The same name as git quotes it (`git ls-files` prints it so).
const ESCAPED: &str = r"evil\033]0;PWNED\a\033[2J\r.txt";
const ID: &str = r#""files/file/srv/evil\033]0;PWNED\a\033[2J\r.txt""#;

/// Both streams of `run`, after checking they hold no raw control byte
/// but the newline.
fn clean(what: &str, run: &Run) -> String {
    let all = format!("{}{}", run.stdout, run.stderr);
    for raw in ['\x1b', '\x07', '\r'] {
        assert!(!all.contains(raw), "{what}: raw {raw:?} in {all:?}");
    }
    all
}

#[test]
fn a_file_named_with_escape_sequences_is_printed_escaped_everywhere() {
    let env = Env::new();
    env.repo
        .write(
            "d.tend.yaml",
            "kind: directory\npath: srv\nsource: www/\nself_heal: false\n",
        )
        .write(&format!("www/{EVIL}"), "one\n");
    env.repo.commit("one");
    let listed = env.repo.git(&["ls-files", "www"]);
    assert!(listed.contains(ESCAPED), "git quotes it so: {listed}");

    let d = env.tend(&["diff", "--color", "never"]);
    assert_eq!(d.code, 1, "{d:?}");
    let out = clean("diff", &d);
    assert!(out.contains(&format!("{ID}: create")), "{out}");
    assert!(
        out.contains(&format!(r#"+++ "desired/files/file/srv/{ESCAPED}""#)),
        "{out}"
    );

    let s = env.tend(&["sync", "--log-level", "info", "--log-format", "text"]);
    assert_eq!(s.code, 0, "{s:?}");
    let out = clean("sync", &s);
    assert!(
        out.contains(&format!("id={ID}")),
        "a log line names it: {out}"
    );
    assert_eq!(env.read(&format!("srv/{EVIL}")), "one\n");

    env.repo.write(&format!("www/{EVIL}"), "two\n");
    env.repo.commit("two");
    let d = env.tend(&["diff", "--against", "HEAD~1", "--color", "never"]);
    assert_eq!(d.code, 1, "{d:?}");
    let out = clean("diff --against", &d);
    assert!(
        out.contains(&format!(r#"--- "live/files/file/srv/{ESCAPED}""#)) && out.contains("+two"),
        "{out}"
    );

    // Drift left alone (self_heal is off) lists the resource in status.
    assert_eq!(env.tend(&["sync"]).code, 0);
    std::fs::write(env.at(&format!("srv/{EVIL}")), "changed\n").unwrap();
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 3, "{s:?}");
    let out = clean("sync with drift", &s);
    assert!(out.contains(ID), "{out}");
    let st = env.tend(&["status"]);
    let out = clean("status", &st);
    assert!(out.contains(&format!("{ID}  Drifted")), "{out}");

    let x = env.tend(&["explain", &format!("srv/{EVIL}")]);
    assert_eq!(x.code, 0, "{x:?}");
    let out = clean("explain", &x);
    assert!(out.starts_with(&format!("{ID}\n")), "{out}");
    assert!(
        out.contains(&format!(r#"path       "srv/{ESCAPED}""#)),
        "{out}"
    );

    // A declaration file so named: its problems name it escaped.
    env.repo.write("bad\x1b[2J.tend.yaml", "kind: [\n");
    env.repo.commit("bad");
    let v = env.tend(&["validate"]);
    assert_eq!(v.code, 1, "{v:?}");
    let out = clean("validate", &v);
    assert!(out.contains(r#""bad\033[2J.tend.yaml":"#), "{out}");
}
