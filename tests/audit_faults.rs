//! The audit log of a running `tend run` under faults (issue 13): a state
//! dir on a real tiny tmpfs that fills up while changes are applied, and
//! the log's rotation by size and age.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use util::http::{listening_addr, Served, QUIET};
use util::{tend_cmd, wait_until, Daemon, Env};

/// Files in each group; each round of hand deletions takes one group, so
/// no file is deleted again right after tend wrote it.
const GROUP: usize = 100;
const GROUPS: usize = 3;
const FILES: usize = GROUP * GROUPS;

/// `FILES` managed files, `etc/f0` .. , committed.
fn commit_files(env: &Env) {
    let mut decl = String::new();
    for i in 0..FILES {
        decl.push_str(&format!(
            "---\nkind: file\npath: etc/f{i}\ncontent: \"file {i}\\n\"\n"
        ));
    }
    env.repo.write("files.tend.yaml", decl);
    env.repo.commit("files");
}

/// A tmpfs mounted on `dir`, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(dir: &Path, size: &str) -> Option<Mount> {
        if !util::can_run(util::servers::is_root(), "mounting a tmpfs needs root") {
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        util::can_run(ok, "cannot mount a tmpfs here").then(|| Mount(dir.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Writes `path` until the file system refuses more.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

/// `tend run` on `state_dir` (not the Env's), logging to the Env's state
/// dir so that a full `state_dir` loses no log line.
fn serve_on(env: &Env, state_dir: &Path, extra: &str) -> Served {
    let cfg = env.config(&format!("{QUIET}{extra}"));
    let log_path = env.state.path().join("daemon.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .unwrap();
    let mut c = tend_cmd();
    c.args(["run", "--listen", "127.0.0.1:0", "--interval", "1h"])
        .arg("--repo")
        .arg(env.repo.url())
        .arg("--root")
        .arg(env.root())
        .arg("--state-dir")
        .arg(state_dir)
        .arg("-c")
        .arg(&cfg)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let daemon = Daemon {
        child: c.spawn().expect("start tend run"),
    };
    let mut addr = None;
    assert!(
        wait_until(30, || {
            addr = listening_addr(&env.daemon_log());
            addr.is_some()
        }),
        "no listening line:\n{}",
        env.daemon_log()
    );
    let s = Served {
        daemon,
        addr: addr.unwrap(),
    };
    assert!(s.ready(60), "never ready:\n{}", env.daemon_log());
    s
}

fn restored(env: &Env, group: usize) -> bool {
    (group * GROUP..(group + 1) * GROUP).all(|i| {
        std::fs::read_to_string(env.at(&format!("etc/f{i}")))
            .is_ok_and(|t| t == format!("file {i}\n"))
    })
}

/// Deletes one group of managed files by hand and waits until tend
/// restored them.
fn delete_and_wait(env: &Env, group: usize) {
    for i in group * GROUP..(group + 1) * GROUP {
        std::fs::remove_file(env.at(&format!("etc/f{i}"))).unwrap();
    }
    assert!(
        wait_until(60, || restored(env, group)),
        "group {group} not restored:\n{}",
        env.daemon_log()
    );
}

/// Every line of the log's files, each checked to be a JSON object.
fn audit_lines(state_dir: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(state_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("audit.jsonl"))
        .collect();
    names.sort();
    for name in names {
        let text = std::fs::read_to_string(state_dir.join(&name)).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{name} ends mid-line"
        );
        for (n, line) in text.lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{name}:{}: not a JSON line ({e}): {line:.120}", n + 1));
            assert!(v.is_object(), "{name}:{}: {line}", n + 1);
            out.push(v);
        }
    }
    out
}

/// Issue 13, item 3: a batch's audit lines cut short by ENOSPC, then the
/// next batch appended after the fragment, made an invalid line mid-file
/// and the page said the log cannot be read. Now the state dir (a real
/// tmpfs) fills while hand deletions are corrected, and once space is back
/// more corrections are logged: the log is whole JSON lines throughout and
/// the page shows the newest.
#[test]
fn a_full_state_dir_leaves_the_audit_log_whole_lines() {
    let env = Env::new();
    commit_files(&env);
    let state = env.state.path().join("small");
    let Some(_mount) = Mount::tmpfs(&state, "16m") else {
        return;
    };
    let s = serve_on(&env, &state, "");
    delete_and_wait(&env, 0);
    fill(&state.join("filler"));
    // Restoring files needs no backup and no fetch, and the ledger's
    // write-ahead log reuses its pages: the audit append is what fails.
    delete_and_wait(&env, 1);
    let full = format!(
        "{}: No space left on device",
        state.join("audit.jsonl").display()
    );
    assert!(
        env.daemon_log().contains(&full),
        "the audit append did not meet the full disk:\n{}",
        env.daemon_log()
    );
    std::fs::remove_file(state.join("filler")).unwrap();
    delete_and_wait(&env, 2);

    let lines = audit_lines(&state);
    let ids = |g: usize| {
        lines
            .iter()
            .filter(|v| {
                let n: usize = v["id"].as_str().unwrap()["files/file/etc/f".len()..]
                    .parse()
                    .unwrap();
                n / GROUP == g
            })
            .count()
    };
    // The first sync logged every file once; then each restoring round.
    assert_eq!(ids(0), 2 * GROUP, "the round before the disk filled");
    assert_eq!(ids(2), 2 * GROUP, "the round after space came back");
    let page = s.get("/").text();
    assert!(!page.contains("cannot be read"), "{page}");
    assert!(!page.contains("damaged line"), "{page}");
    let newest =
        (2 * GROUP..3 * GROUP).any(|i| page.contains(&format!(">files/file/etc/f{i}</a>")));
    assert!(newest, "the newest changes are not on the page:\n{page}");
}

/// The audit log rotates by size as `policy.audit_max` says: at most four
/// generations beside the current file, every one whole JSON lines, and
/// the page still shows the newest changes.
#[test]
fn the_audit_log_rotates_within_audit_max() {
    let env = Env::new();
    commit_files(&env);
    let s = env.serve("  audit_max: 48KiB\n", &[]);
    assert!(s.ready(60), "never ready:\n{}", env.daemon_log());
    for g in 0..GROUPS {
        delete_and_wait(&env, g);
    }
    let state = env.state.path();
    let lines = audit_lines(state);
    assert!(state.join("audit.jsonl.1").exists(), "no rotation");
    assert!(
        !state.join("audit.jsonl.5").exists(),
        "more than four generations"
    );
    let rotated: u64 = (1..=4)
        .filter_map(|n| std::fs::metadata(state.join(format!("audit.jsonl.{n}"))).ok())
        .map(|m| m.len())
        .sum();
    assert!(rotated <= 48 << 10, "rotated files hold {rotated} bytes");
    assert!(lines.len() < FILES * 2, "nothing was trimmed");
    let page = s.get("/").text();
    assert!(!page.contains("damaged line"), "{page}");
    let newest =
        (2 * GROUP..3 * GROUP).any(|i| page.contains(&format!(">files/file/etc/f{i}</a>")));
    assert!(newest, "the newest changes are not on the page:\n{page}");
}
