//! The command line as users and packagers meet it: each subcommand's
//! `--help` lists its own flags, shell completions parse in their shells,
//! the man pages are roff, and flags keep their environment variables.

mod util;

use std::process::Command;

use util::{tend_cmd, Env, Run};

fn tend(args: &[&str]) -> Run {
    let out = tend_cmd().args(args).output().expect("run tend");
    Run::from(out)
}

#[test]
fn each_help_lists_only_the_flags_of_its_command() {
    let diff = tend(&["diff", "--help"]);
    assert_eq!(diff.code, 0, "{diff:?}");
    assert!(diff.stdout.contains("--against <REV>"), "{diff:?}");
    for absent in ["--listen", "--dry-run", "--interval", "--allow-mass-prune"] {
        assert!(!diff.stdout.contains(absent), "{absent} in {diff:?}");
    }
    let run = tend(&["run", "--help"]);
    assert!(run.stdout.contains("--listen <ADDR>") && run.stdout.contains("--interval <DUR>"));
    assert!(!run.stdout.contains("--output"), "{run:?}");
    let status = tend(&["status", "--help"]);
    for absent in ["--repo", "--root", "--mirror", "--listen"] {
        assert!(!status.stdout.contains(absent), "{absent} in {status:?}");
    }
    assert!(status.stdout.contains("--state-dir <DIR>"), "{status:?}");
    // A flag a command does not take is refused, not ignored.
    let r = tend(&["diff", "--listen", "127.0.0.1:1"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("unexpected argument '--listen'"), "{r:?}");
    let r = tend(&["status", "-o", "markdown"]);
    assert_eq!(r.code, 2, "{r:?}");
}

/// The environment still sets what the flags set, per command.
#[test]
fn environment_variables_still_stand_for_the_flags() {
    let env = Env::new();
    env.repo
        .write("a.tend.yaml", "kind: file\npath: etc/motd\ncontent: hi\n");
    env.repo.commit("init");
    let state = env.state.path().to_str().unwrap();
    let out = tend_cmd()
        .args(["diff", "-o", "json"])
        .env("TEND_REPO", env.repo.url())
        .env("TEND_ROOT", env.root())
        .env("TEND_STATE_DIR", state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("files/file/etc/motd"));
    assert_eq!(env.tend(&["sync"]).code, 0);
    // Variables of flags a command does not take are not its business.
    let out = tend_cmd()
        .args(["status"])
        .env("TEND_LISTEN", "x")
        .env("TEND_REPO", "/nowhere")
        .env("TEND_STATE_DIR", state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

fn completion(shell: &str) -> tempfile::NamedTempFile {
    let r = tend(&["completions", shell]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("against"), "{shell}: {r:?}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &r.stdout).unwrap();
    file
}

#[test]
fn bash_completion_parses_and_completes_subcommands_and_flags() {
    let file = completion("bash");
    let check = Command::new("bash")
        .arg("-n")
        .arg(file.path())
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    // Loaded, it completes `tend di` to diff and `tend diff --aga` to --against.
    let script = format!(
        "source {}\nCOMP_WORDS=(tend di); COMP_CWORD=1; _tend tend di tend; echo \"${{COMPREPLY[@]}}\"\nCOMP_WORDS=(tend diff --aga); COMP_CWORD=2; _tend tend --aga diff; echo \"${{COMPREPLY[@]}}\"",
        file.path().display()
    );
    let out = Command::new("bash").arg("-c").arg(script).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(lines.first(), Some(&"diff"), "{text}");
    assert_eq!(lines.get(1), Some(&"--against"), "{text}");
}

#[test]
fn zsh_and_fish_completions_parse() {
    for (shell, check) in [("zsh", &["-n"][..]), ("fish", &["--no-execute"][..])] {
        let found = Command::new(shell).arg("--version").output().is_ok();
        if !util::can_run(found, &format!("{shell} is not installed")) {
            continue;
        }
        let file = completion(shell);
        let out = Command::new(shell)
            .args(check)
            .arg(file.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
    }
}

#[test]
fn man_pages_are_roff() {
    let r = tend(&["man"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with(".TH tend 1 "), "{r:?}");
    assert!(r.stdout.contains("diff"), "{r:?}");
    let dir = tempfile::tempdir().unwrap();
    let r = tend(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    for page in ["tend.1", "tend-diff.1", "tend-run.1", "tend-plugin-check.1"] {
        let text = std::fs::read_to_string(dir.path().join(page))
            .unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".TH "), "{page}: {text}");
    }
    let diff = std::fs::read_to_string(dir.path().join("tend-diff.1")).unwrap();
    assert!(diff.contains("against"), "{diff}");
    // Readable by man itself, when it is there.
    if let Ok(out) = Command::new("man")
        .arg("-l")
        .arg(dir.path().join("tend-diff.1"))
        .env("MANPAGER", "cat")
        .output()
    {
        if out.status.success() {
            assert!(String::from_utf8_lossy(&out.stdout).contains("against"));
        }
    }
}

#[test]
fn counts_agree_in_number() {
    let env = Env::new();
    env.repo
        .write("a.tend.yaml", "kind: file\npath: one\ncontent: x\n---\nkind: file\npath: two\nmode: \"0999\"\ncontent: y\n");
    env.repo.commit("one bad");
    let v = env.tend(&["validate"]);
    assert_eq!(v.code, 1, "{v:?}");
    assert!(
        v.stdout.contains("2 resources declared, 1 problem\n"),
        "{v:?}"
    );
    env.repo
        .write("a.tend.yaml", "kind: file\npath: one\ncontent: x\n");
    env.repo.commit("one good");
    let v = env.tend(&["validate"]);
    assert!(
        v.stdout.contains("1 resource declared, 0 problems\n"),
        "{v:?}"
    );
}

/// Issue 23: eight problems across sections, the blocks of three adapters
/// and unknown keys come out in one run, one a line with file, line and
/// key; `sync` refuses the same eight before touching anything.
#[test]
fn a_config_with_eight_problems_reports_all_eight_with_their_lines() {
    let env = Env::new();
    env.repo
        .write("a.tend.yaml", "kind: file\npath: etc/motd\ncontent: hi\n");
    env.repo.commit("init");
    let site = env.root().join("site");
    let cfg = env.config(&format!(
        "source:\n  interval: 1m\n  intervall: 5m\n\
         policy:\n  max_prune: lots\n\
         server:\n  max_connections: 0\n\
         log:\n  levl: debug\n\
         targets:\n  site:\n    type: files\n    root: {}\n    link: a/b\n    owner: root\n\
         \x20 app:\n    type: exec\n    command: [\"\"]\n\
         \x20 kv:\n    type: etcd\n    endpoints: [http://127.0.0.1:2379]\n    prefix: app\n",
        site.display()
    ));
    let cfg = cfg.to_str().unwrap();
    let want = [
        (3, "source.intervall", "unknown key"),
        (5, "policy.max_prune", "lots"),
        (7, "server.max_connections", "must be more than 0"),
        (9, "log.levl", "unknown key"),
        (14, "targets.site.link", "a/b"),
        (15, "targets.site.owner", "does not apply to type files"),
        (18, "targets.app.command", "needs a program"),
        (22, "targets.kv.prefix", "must start and end with `/`"),
    ];
    let (repo, state) = (env.repo.url(), env.state.path().to_str().unwrap());
    for command in ["validate", "sync"] {
        let r = env.raw(&[command, "-c", cfg, "--repo", &repo, "--state-dir", state]);
        assert_eq!(r.code, 2, "{command}: {r:?}");
        let lines: Vec<&str> = r
            .stderr
            .lines()
            .map(|l| l.strip_prefix("tend: ").unwrap_or(l))
            .collect();
        assert_eq!(lines.len(), want.len(), "{command}: {lines:#?}");
        for (line, key, says) in want {
            let head = format!("{cfg}:{line}: {key}: ");
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with(&head) && l.contains(says)),
                "{command}: no `{head}... {says}` in {lines:#?}"
            );
        }
    }
    assert!(!site.exists(), "a refused config wrote the target");
    assert!(!env.root().join("etc/motd").exists());
}
