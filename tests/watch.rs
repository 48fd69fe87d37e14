//! Reacting in milliseconds: with the poll interval and the resync timer at
//! one hour, only the file-system watcher can explain a fast correction.
//! Also: tend's own writes do not feed back, hooks run once per pass and
//! survive kill -9, systemd hears READY/EXTEND/WATCHDOG/STOPPING, and a full
//! disk leaves no partial files.

mod util;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use util::{wait_until, Env};

fn slow_timers(env: &Env) -> String {
    env.config("policy:\n  resync: 1h\n")
        .to_str()
        .unwrap()
        .to_string()
}

fn watching(env: &Env) -> bool {
    env.status()["watcher"]
        .as_str()
        .is_some_and(|w| w.starts_with("watching"))
}

/// Edits the managed file `rel` by hand, waits until tend has put it back
/// (the first keyed pass that applied a change has ended), and returns the
/// `pass done` lines (debug level) logged up to and including that pass.
/// Events are handled in the order they came, so a pass set off by anything
/// before the edit is among them, or is that pass, then looking at more
/// than one file.
fn passes_until_corrected(env: &Env, rel: &str) -> Vec<String> {
    let want = std::fs::read(env.at(rel)).unwrap();
    std::fs::write(env.at(rel), "edited by hand\n").unwrap();
    let mut passes = Vec::new();
    let corrected = wait_until(30, || {
        let log = env.daemon_log();
        let lines: Vec<&str> = log.lines().collect();
        let ended = lines.iter().position(|l| {
            l.contains("pass ended") && l.contains("full=false") && l.contains(" applied=1 ")
        });
        let Some(i) = ended else { return false };
        passes = lines[..i]
            .iter()
            .filter(|l| l.contains("pass done"))
            .map(|l| l.to_string())
            .collect();
        true
    });
    assert!(corrected, "{}", env.daemon_log());
    assert_eq!(std::fs::read(env.at(rel)).unwrap(), want);
    passes
}

fn site(env: &Env) {
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/app/a.conf\ncontent: \"a\\n\"\n---\nkind: file\npath: etc/app/b.conf\ncontent: \"b\\n\"\n---\nkind: file\npath: etc/c.conf\ncontent: \"c\\n\"\n",
    );
    env.repo.commit("init");
}

#[test]
fn edits_deletions_and_symlink_swaps_are_undone_by_the_watcher() {
    let env = Env::new();
    site(&env);
    let cfg = slow_timers(&env);
    let _d = env.daemon(&["--interval", "1h", "-c", &cfg]);
    assert!(
        wait_until(20, || env.status()["counts"]["InSync"] == 3),
        "{}",
        env.daemon_log()
    );
    // The watches are in place once the first pass has ended, and status says so.
    assert!(wait_until(30, || env.status()["watcher"]
        .as_str()
        .is_some_and(|w| w.starts_with("watching"))));

    std::fs::write(env.at("etc/app/a.conf"), "edited\n").unwrap();
    assert!(
        wait_until(30, || env.read("etc/app/a.conf") == "a\n"),
        "{}",
        env.daemon_log()
    );

    std::fs::remove_file(env.at("etc/c.conf")).unwrap();
    assert!(
        wait_until(30, || env.at("etc/c.conf").exists()),
        "{}",
        env.daemon_log()
    );

    std::fs::remove_file(env.at("etc/app/b.conf")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", env.at("etc/app/b.conf")).unwrap();
    assert!(wait_until(30, || {
        std::fs::symlink_metadata(env.at("etc/app/b.conf")).is_ok_and(|m| m.is_file())
    }));
    assert_eq!(env.read("etc/app/b.conf"), "b\n");

    // A whole managed directory taken away (in one step, so tend cannot
    // race the removal) comes back too.
    std::fs::rename(env.at("etc/app"), env.at("etc/app-moved")).unwrap();
    assert!(wait_until(30, || env.at("etc/app/a.conf").exists()
        && env.at("etc/app/b.conf").exists()));
}

#[test]
fn convergence_after_a_deletion_is_well_inside_sixty_seconds() {
    let env = Env::new();
    site(&env);
    let cfg = slow_timers(&env);
    let _d = env.daemon(&["--interval", "1h", "-c", &cfg]);
    assert!(wait_until(20, || env.status()["counts"]["InSync"] == 3));
    assert!(wait_until(30, || watching(&env)), "{}", env.daemon_log());
    let started = Instant::now();
    std::fs::remove_file(env.at("etc/c.conf")).unwrap();
    assert!(wait_until(60, || env.at("etc/c.conf").exists()));
    let took = started.elapsed();
    // The required bound is 60 s; with a watcher it is far less (the
    // benchmark measures it), so a generous fraction is asserted here.
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[test]
fn its_own_writes_do_not_make_it_reconcile_itself_in_a_loop() {
    let env = Env::new();
    env.repo.write(
        "site.tend.yaml",
        "kind: directory\npath: site\nsource: content\n",
    );
    for i in 0..2000 {
        env.repo
            .write(&format!("content/d{}/f{i}", i % 20), format!("{i}\n"));
    }
    env.repo.commit("many");
    let cfg = slow_timers(&env);
    let _d = env.daemon(&["--interval", "1h", "-c", &cfg, "--log-level", "debug"]);
    assert!(
        wait_until(120, || env.status()["counts"]["InSync"] == 2000
            && watching(&env)),
        "{}",
        env.daemon_log()
    );
    // A hand edit after the first pass: the events of tend's own writes
    // came before it, so any pass they set off has run by the time the
    // edit is put back, or was that pass.
    let passes = passes_until_corrected(&env, "site/d7/f7");
    assert_eq!(
        passes.len(),
        2,
        "only the first pass and the edit's; its own writes must not trigger more:\n{}",
        env.daemon_log()
    );
    assert!(
        passes[1].ends_with("resources=1"),
        "the edit's pass looks at the edited file alone: {}",
        passes[1]
    );
}

#[test]
fn reading_managed_files_and_listing_their_folders_is_not_drift() {
    let env = Env::new();
    site(&env);
    let cfg = slow_timers(&env);
    let _d = env.daemon(&["--interval", "1h", "-c", &cfg, "--log-level", "debug"]);
    assert!(
        wait_until(60, || env.status()["counts"]["InSync"] == 3
            && watching(&env)),
        "{}",
        env.daemon_log()
    );
    for _ in 0..5 {
        for f in ["etc/app/a.conf", "etc/app/b.conf", "etc/c.conf"] {
            assert!(!std::fs::read(env.root().join(f)).unwrap().is_empty());
        }
        for d in ["etc", "etc/app"] {
            assert!(std::fs::read_dir(env.root().join(d)).unwrap().count() > 0);
        }
    }
    // The watcher still sees a real edit, and the events of the reads,
    // which came before it, started no pass of their own and added nothing
    // to the edit's.
    let passes = passes_until_corrected(&env, "etc/c.conf");
    assert_eq!(
        passes.len(),
        2,
        "reads and listings start no pass:\n{}",
        env.daemon_log()
    );
    assert!(
        passes[1].ends_with("resources=1"),
        "reads and listings add to no pass: {}",
        passes[1]
    );
}

#[test]
fn a_hook_runs_once_per_pass_however_many_files_changed() {
    let env = Env::new();
    let log = env.state.path().join("hook.log");
    env.repo.write(
        "site.tend.yaml",
        "kind: directory\npath: site\nsource: content\non_change: reload\n",
    );
    for i in 0..5 {
        env.repo.write(&format!("content/f{i}"), "v1\n");
    }
    env.repo.commit("v1");
    let cfg = env.config(&format!(
        "policy:\n  resync: 1h\nhooks:\n  reload: {{run: [sh, -c, \"echo ran >> {}\"], timeout: 10s}}\n",
        log.display()
    ));
    let r = env.tend(&["sync", "-c", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ran\n");
    for i in 0..5 {
        env.repo.write(&format!("content/f{i}"), "v2\n");
    }
    env.repo.commit("v2");
    assert_eq!(env.tend(&["sync", "-c", cfg.to_str().unwrap()]).code, 0);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ran\nran\n");
    // Nothing changed: no hook.
    assert_eq!(env.tend(&["sync", "-c", cfg.to_str().unwrap()]).code, 0);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ran\nran\n");
}

/// Started with systemd's soft limit of 1024 open files, tend raises its
/// own toward the hard limit (its batches hold many files open) and starts
/// hooks with the limit it was given.
#[test]
fn tend_raises_its_open_files_limit_and_hooks_get_the_one_it_was_given() {
    let env = Env::new();
    let log = env.state.path().join("limits.log");
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/app.conf\ncontent: \"v1\\n\"\non_change: reload\n",
    );
    env.repo.commit("v1");
    let script = format!(
        "ulimit -Sn > {0}; grep 'open files' /proc/$PPID/limits >> {0}",
        log.display()
    );
    let cfg = env.config(&format!(
        "hooks:\n  reload: {{run: [sh, -c, {script:?}], timeout: 30s}}\n"
    ));
    let sync = env.cmd(&["sync", "-c", cfg.to_str().unwrap()]);
    let out = std::process::Command::new("prlimit")
        .arg("--nofile=1024:8192")
        .arg(sync.get_program())
        .args(sync.get_args())
        .envs(sync.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .expect("prlimit (util-linux) runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let log = std::fs::read_to_string(&log).unwrap();
    let mut lines = log.lines();
    assert_eq!(lines.next(), Some("1024"), "the hook's own soft limit");
    let tend: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        tend,
        ["Max", "open", "files", "8192", "8192", "files"],
        "tend's limits"
    );
}

/// Whether a live process has `needle` in its command line.
fn running(needle: &str) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        std::fs::read(p.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
    })
}

#[test]
fn a_hook_pending_when_tend_is_killed_runs_after_the_restart() {
    let env = Env::new();
    let log = env.state.path().join("hook.log");
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/app.conf\ncontent: \"v1\\n\"\non_change: reload\n",
    );
    env.repo.commit("v1");
    // The hook takes a while before it records that it ran, so tend is
    // killed while it runs, before its effect.
    let cfg = env.config(&format!(
        "policy:\n  resync: 1h\nhooks:\n  reload: {{run: [sh, -c, \"sleep 3; echo ran >> {}\"], timeout: 60s}}\n",
        log.display()
    ));
    let cfg = cfg.to_str().unwrap();
    let mut d = env.daemon(&["--interval", "1h", "-c", cfg]);
    let hook = log.display().to_string();
    assert!(
        wait_until(20, || running(&hook)),
        "the hook never ran:\n{}",
        env.daemon_log()
    );
    d.kill9();
    assert!(!log.exists(), "the kill must land before the hook ran");
    // The hook dies with tend, well before its sleep is over: it can no
    // longer finish behind tend's back.
    assert!(
        wait_until(2, || !running(&hook)),
        "a killed tend's hook is still running"
    );
    assert!(
        !log.exists(),
        "a killed tend's hook must not finish behind its back"
    );
    // A dry run runs no command, pending hooks included.
    let dry = env.tend(&["sync", "--dry-run", "-c", cfg]);
    assert_eq!(dry.code, 0, "{dry:?}");
    assert!(!log.exists(), "a dry run ran a pending hook");
    let _d = env.daemon(&["--interval", "1h", "-c", cfg]);
    assert!(
        wait_until(60, || std::fs::read_to_string(&log)
            .is_ok_and(|l| l == "ran\n")),
        "{}",
        env.daemon_log()
    );
}

#[test]
fn systemd_hears_ready_extend_watchdog_and_stopping() {
    let env = Env::new();
    site(&env);
    let sock_path = env.state.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let cfg = slow_timers(&env);
    let mut c = env.cmd(&[
        "run",
        "--interval",
        "1h",
        "-c",
        &cfg,
        "--listen",
        "127.0.0.1:0",
    ]);
    c.env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "1000000");
    let mut d = util::Daemon {
        child: c.spawn().unwrap(),
    };
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        let ready = got.iter().any(|m| m.contains("READY=1"));
        let pings = got.iter().filter(|m| m.contains("WATCHDOG=1")).count();
        if ready && pings >= 3 {
            break;
        }
    }
    assert!(
        got.iter().any(|m| m.starts_with("EXTEND_TIMEOUT_USEC=")),
        "{got:?}"
    );
    let ready_at = got
        .iter()
        .position(|m| m.contains("READY=1"))
        .expect("READY=1");
    assert!(got[ready_at].contains("STATUS="), "{got:?}");
    assert!(
        got.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 3,
        "{got:?}"
    );
    assert_eq!(d.stop(10), Some(0));
    let mut stopping = false;
    while let Ok(n) = sock.recv(&mut buf) {
        stopping |= String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1");
    }
    assert!(stopping, "{got:?}");
}

/// A wrapper that starts tend in a user namespace of its own whose inotify
/// `limit` (a file under /proc/sys/user) is 0: the limits are per user
/// namespace, so the rest of the machine keeps its own. `None` where user
/// namespaces are not allowed (the test then needs root to be skipped).
fn with_inotify_limit(limit: &str) -> Option<Vec<String>> {
    let script = format!("echo 0 > /proc/sys/user/{limit} && exec \"$@\"");
    let wrapper: Vec<String> = [
        "unshare",
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        &script,
        "sh",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let probe = std::process::Command::new(&wrapper[0])
        .args(&wrapper[1..])
        .arg("true")
        .output();
    match probe {
        Ok(out) if out.status.success() => Some(wrapper),
        other => {
            util::can_run(
                false,
                &format!("a user namespace with its own inotify limits: {other:?}"),
            );
            None
        }
    }
}

/// Without the watcher, drift is still put right, by the resync timer, and
/// status says why reactions are slower.
fn drift_is_corrected_by_the_resync_and_status_says_why(limit: &str, reason: &str) {
    let Some(wrapper) = with_inotify_limit(limit) else {
        return;
    };
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let env = Env::new();
    site(&env);
    let cfg = env.config("policy:\n  resync: 2s\n");
    let _d = env.daemon_under(&wrapper, &["--interval", "1h", "-c", cfg.to_str().unwrap()]);
    assert!(
        wait_until(30, || env.status()["counts"]["InSync"] == 3),
        "{}",
        env.daemon_log()
    );
    assert!(
        wait_until(30, || env.status()["watcher"]
            .as_str()
            .is_some_and(|w| w.contains(reason))),
        "{:?}\n{}",
        env.status()["watcher"],
        env.daemon_log()
    );
    std::fs::write(env.at("etc/app/a.conf"), "edited\n").unwrap();
    std::fs::remove_file(env.at("etc/c.conf")).unwrap();
    assert!(
        wait_until(30, || env.read("etc/app/a.conf") == "a\n"
            && env.at("etc/c.conf").exists()),
        "{}",
        env.daemon_log()
    );
}

#[test]
fn at_the_inotify_watch_limit_drift_is_found_by_the_resync() {
    drift_is_corrected_by_the_resync_and_status_says_why(
        "max_inotify_watches",
        "inotify watch limit reached",
    );
}

#[test]
fn without_any_inotify_instance_drift_is_found_by_the_resync() {
    drift_is_corrected_by_the_resync_and_status_says_why(
        "max_inotify_instances",
        "cannot watch the file system",
    );
}

#[test]
fn a_full_disk_leaves_no_partial_file_and_recovers() {
    if !util::can_run(
        rustix::process::geteuid().is_root(),
        "mounting a tmpfs needs root",
    ) {
        return;
    }
    let env = Env::new();
    let root = env.root().join("small");
    std::fs::create_dir_all(&root).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&root)
        .status();
    if !util::can_run(ok.is_ok_and(|s| s.success()), "cannot mount a tmpfs here") {
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(root.clone());
    env.repo
        .write(
            "big.tend.yaml",
            "kind: file\npath: big.bin\nsource: big.bin\n",
        )
        .write("big.bin", vec![b'x'; 160 * 1024]);
    env.repo.commit("big");
    std::fs::write(root.join("filler"), vec![0u8; 150 * 1024]).unwrap();
    let run = |args: &[&str]| {
        let out = util::tend_cmd()
            .args(args)
            .args([
                "--repo",
                &env.repo.url(),
                "--state-dir",
                env.state.path().to_str().unwrap(),
                "--root",
            ])
            .arg(&root)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _) = run(&["sync"]);
    assert_eq!(code, Some(3));
    let entries: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        entries,
        vec!["filler".to_string()],
        "no partial or temp file may stay"
    );
    let r = env.resource("files/file/big.bin").expect("recorded");
    assert_eq!(r["state"], "Failed", "{r}");
    assert!(
        r["reason"].as_str().unwrap().contains("No space left"),
        "{r}"
    );
    std::fs::remove_file(root.join("filler")).unwrap();
    let (code, err) = run(&["sync"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        std::fs::read(root.join("big.bin")).unwrap().len(),
        160 * 1024
    );
}
