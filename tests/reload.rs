//! SIGHUP on a running `tend run`: it keeps running, fetches at once, and
//! takes a changed config (source path, policy, hooks, log level) while
//! naming what needs a restart; a broken config is refused and the running
//! one kept. The file-system watch follows a target's new root, and ends
//! and begins again with `policy.watch`.

mod util;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use util::{wait_until, Daemon, Env};

const SIGHUP: i32 = 1;

fn site(env: &Env) {
    env.repo.write(
        "a/x.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a1\\n\"\n",
    );
    env.repo.write(
        "b/x.tend.yaml",
        "kind: file\npath: etc/b\ncontent: \"b1\\n\"\non_change: touch\n",
    );
    env.repo.commit("two hosts");
}

/// `tend run -c CONFIG` with no level or interval flag, so that the config
/// decides them; output in the state dir's daemon.log.
fn start(env: &Env, config: &Path) -> Daemon {
    let config = config.to_str().unwrap();
    spawn(
        env,
        env.cmd(&["run", "--listen", "127.0.0.1:0", "-c", config]),
    )
}

/// [`start`] without `--root`, which would stand in for the config's own
/// `files` target: the config's `targets` block names the root.
fn start_rootless(env: &Env, config: &Path) -> Daemon {
    let mut c = util::tend_cmd();
    c.args(["run", "--listen", "127.0.0.1:0", "-c"])
        .arg(config)
        .arg("--repo")
        .arg(env.repo.url())
        .arg("--state-dir")
        .arg(env.state.path());
    spawn(env, c)
}

/// Runs `c` as the daemon, its output in the state dir's daemon.log.
fn spawn(env: &Env, mut c: Command) -> Daemon {
    let log = std::fs::File::create(env.state.path().join("daemon.log")).unwrap();
    c.stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    Daemon {
        child: c.spawn().expect("start tend run"),
    }
}

fn running(d: &mut Daemon) -> bool {
    d.child.try_wait().unwrap().is_none()
}

/// The inodes the daemon's inotify instances watch, as the kernel lists
/// them in /proc/PID/fdinfo (`inotify wd:.. ino:HEX ..`, one line a watch).
fn watched_inodes(d: &Daemon) -> Vec<u64> {
    let mut inodes = Vec::new();
    let fds = std::fs::read_dir(format!("/proc/{}/fdinfo", d.child.id())).unwrap();
    for fd in fds.flatten() {
        // An fd closed since the listing is simply not there.
        let Ok(info) = std::fs::read_to_string(fd.path()) else {
            continue;
        };
        for line in info.lines().filter(|l| l.starts_with("inotify wd:")) {
            let ino = line.split_whitespace().find_map(|w| w.strip_prefix("ino:"));
            inodes.push(u64::from_str_radix(ino.unwrap(), 16).unwrap());
        }
    }
    inodes
}

fn inode(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().ino()
}

/// Whether `file` holds what the declaration says (`a1`).
fn in_sync(file: &Path) -> bool {
    std::fs::read_to_string(file).ok().as_deref() == Some("a1\n")
}

/// Waits for the `n`th reload to be taken and the full pass that follows
/// it to end: a hand edit made after that is not undone by that pass.
fn reloaded(env: &Env, n: usize) {
    assert!(
        wait_until(30, || env.daemon_log().matches("config reloaded").count()
            == n
            && env.full_passes_after("config reloaded") >= 1),
        "{}",
        env.daemon_log()
    );
}

#[test]
fn sighup_fetches_at_once_and_takes_a_changed_config() {
    let env = Env::new();
    site(&env);
    // An hour between polls: only SIGHUP can bring a new commit in soon.
    let cfg = env.config("source: {path: a, interval: 1h}\nlog: {level: info}\n");
    let mut d = start(&env, &cfg);
    assert!(
        wait_until(20, || env.at("etc/a").exists()),
        "{}",
        env.daemon_log()
    );

    env.repo.write(
        "a/x.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a2\\n\"\n",
    );
    env.repo.commit("a2");
    d.signal(SIGHUP);
    assert!(
        wait_until(20, || std::fs::read_to_string(env.at("etc/a"))
            .ok()
            .as_deref()
            == Some("a2\n")),
        "{}",
        env.daemon_log()
    );
    assert!(running(&mut d), "{}", env.daemon_log());

    // Another path, a hook its declaration names, a prune limit that lets
    // the old host's one file go, a louder level; and a log format, which
    // only a restart can change.
    let hooked = env.state.path().join("hooked");
    std::fs::write(
        &cfg,
        format!(
            "source: {{path: b, interval: 1h}}\n\
             hooks: {{touch: {{run: [touch, {}]}}}}\n\
             policy: {{max_prune: 100%}}\n\
             log: {{level: debug, format: json}}\n",
            hooked.display()
        ),
    )
    .unwrap();
    d.signal(SIGHUP);
    assert!(
        wait_until(20, || env.at("etc/b").exists()
            && !env.at("etc/a").exists()
            && hooked.exists()),
        "{}",
        env.daemon_log()
    );
    assert_eq!(env.read("etc/b"), "b1\n");
    let log = env.daemon_log();
    assert!(log.contains("config reloaded"), "{log}");
    assert!(
        log.contains("needs restart") && log.contains("log.format"),
        "{log}"
    );
    // The level changed (debug lines now), the format did not (no JSON).
    assert!(
        wait_until(10, || env.daemon_log().contains("DEBUG")),
        "{}",
        env.daemon_log()
    );
    assert!(!env.daemon_log().contains("{\"timestamp\""));
    assert!(running(&mut d), "{}", env.daemon_log());
    assert_eq!(d.stop(10), Some(0));
}

#[test]
fn a_broken_config_is_refused_and_the_running_one_kept() {
    let env = Env::new();
    site(&env);
    // A short resync: a hand edit right after tend's own write is taken
    // as its echo by the watcher, and left to the resync.
    let cfg = env.config("source: {path: a, interval: 1h}\npolicy: {resync: 2s}\n");
    let mut d = start(&env, &cfg);
    assert!(
        wait_until(20, || env.at("etc/a").exists()),
        "{}",
        env.daemon_log()
    );

    // A key that does not exist: refused, naming file and line.
    std::fs::write(
        &cfg,
        "source: {path: b, interval: 1h}\npolicy:\n  prune_all: true\n",
    )
    .unwrap();
    env.repo.write(
        "a/x.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a2\\n\"\n",
    );
    env.repo.commit("a2");
    d.signal(SIGHUP);
    // The running config (path a) still applies, and SIGHUP still fetched.
    assert!(
        wait_until(20, || std::fs::read_to_string(env.at("etc/a"))
            .ok()
            .as_deref()
            == Some("a2\n")),
        "{}",
        env.daemon_log()
    );
    let log = env.daemon_log();
    assert!(log.contains("config refused"), "{log}");
    assert!(
        log.contains("tend.yaml") && log.contains("prune_all"),
        "{log}"
    );
    assert!(!env.at("etc/b").exists());
    assert!(running(&mut d), "{log}");

    // A config that resolves but whose target cannot be opened (its root
    // would be under a file): refused whole.
    let under_a_file = env.sentinel.path().join("precious/site");
    std::fs::write(
        &cfg,
        format!(
            "source: {{path: b, interval: 1h}}\n\
             targets: {{site: {{type: files, root: {}}}}}\n",
            under_a_file.display()
        ),
    )
    .unwrap();
    d.signal(SIGHUP);
    assert!(
        wait_until(20, || env.daemon_log().matches("config refused").count()
            >= 2),
        "{}",
        env.daemon_log()
    );
    assert!(env.daemon_log().contains("cannot create root"));
    // The pass that follows every SIGHUP (the third in all) has ended.
    assert!(
        wait_until(20, || env.daemon_log().matches("pass ended").count() >= 3),
        "{}",
        env.daemon_log()
    );
    // Drift is still corrected under the running config.
    std::fs::write(env.at("etc/a"), "hand edit\n").unwrap();
    assert!(
        wait_until(20, || env.read("etc/a") == "a2\n"),
        "{}",
        env.daemon_log()
    );
    assert!(!env.at("etc/b").exists());
    assert!(running(&mut d), "{}", env.daemon_log());
    assert_eq!(d.stop(10), Some(0));
}

#[test]
fn a_reload_moves_the_watch_with_the_root_and_follows_policy_watch() {
    let env = Env::new();
    site(&env);
    let b = tempfile::Builder::new()
        .prefix("tend-root-b-")
        .tempdir()
        .unwrap();
    let (a, b) = (env.root(), b.path());
    let (in_a, in_b) = (a.join("etc/a"), b.join("etc/a"));
    // An hour between polls and between resyncs: only the watcher can put
    // a hand edit back soon. The one file is put back more often than the
    // default contested limit (5 times in 10 minutes) allows.
    let config = |root: &Path, watch: bool| {
        format!(
            "source: {{path: a, interval: 1h}}\n\
             targets: {{files: {{type: files, root: {}}}}}\n\
             policy: {{resync: 1h, watch: {watch}, contested: {{corrections: 100, window: 10m}}}}\n\
             log: {{level: info}}\n",
            root.display()
        )
    };
    let hand_edit = |file: &Path| std::fs::write(file, "hand edit\n").unwrap();
    let put_back = |file: &Path| wait_until(30, || in_sync(file));
    let cfg = env.config(&config(a, true));
    let mut d = start_rootless(&env, &cfg);
    assert!(
        wait_until(30, || in_sync(&in_a) && env.full_passes() >= 1),
        "{}",
        env.daemon_log()
    );
    // The watch begins once the first pass has ended.
    assert!(
        wait_until(30, || watched_inodes(&d).contains(&inode(&a.join("etc")))),
        "{}",
        env.daemon_log()
    );
    hand_edit(&in_a);
    assert!(put_back(&in_a), "{}", env.daemon_log());

    // Another root: the target is built anew and watched there; the old
    // root is watched no more.
    std::fs::write(&cfg, config(b, true)).unwrap();
    d.signal(SIGHUP);
    reloaded(&env, 1);
    assert!(in_sync(&in_b), "{}", env.daemon_log());
    let old_dirs = [inode(a), inode(&a.join("etc"))];
    assert!(
        wait_until(30, || {
            let watched = watched_inodes(&d);
            watched.contains(&inode(&b.join("etc")))
                && !old_dirs.iter().any(|i| watched.contains(i))
        }),
        "{:?}\n{}",
        watched_inodes(&d),
        env.daemon_log()
    );
    hand_edit(&in_b);
    assert!(put_back(&in_b), "{}", env.daemon_log());
    // An edit under the old root, then one under the new: events are
    // handled in the order they came, so once the second is put back the
    // first would have been too, were it seen.
    hand_edit(&in_a);
    hand_edit(&in_b);
    assert!(put_back(&in_b), "{}", env.daemon_log());
    assert_eq!(std::fs::read_to_string(&in_a).unwrap(), "hand edit\n");

    // Watching turned off: the watch ends, and a hand edit stays.
    std::fs::write(&cfg, config(b, false)).unwrap();
    d.signal(SIGHUP);
    reloaded(&env, 2);
    assert!(
        wait_until(30, || watched_inodes(&d).is_empty()),
        "{:?}\n{}",
        watched_inodes(&d),
        env.daemon_log()
    );
    hand_edit(&in_b);
    // Nothing watches now (the kernel says so) and the timers are an hour
    // off: in a second, no pass has put it back.
    assert!(!wait_until(1, || in_sync(&in_b)), "{}", env.daemon_log());
    // And status says so, rather than keeping the line from before.
    let watcher = || {
        env.status()["watcher"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        wait_until(30, || watcher().starts_with("off")),
        "{}",
        watcher()
    );

    // Watching again: the reload's pass puts the edit back, and the watch
    // sees the next one.
    std::fs::write(&cfg, config(b, true)).unwrap();
    d.signal(SIGHUP);
    reloaded(&env, 3);
    assert!(in_sync(&in_b), "{}", env.daemon_log());
    assert!(
        wait_until(30, || watched_inodes(&d).contains(&inode(&b.join("etc")))),
        "{}",
        env.daemon_log()
    );
    hand_edit(&in_b);
    assert!(put_back(&in_b), "{}", env.daemon_log());
    assert!(
        wait_until(30, || watcher().starts_with("watching")),
        "{}",
        watcher()
    );
    assert_eq!(std::fs::read_to_string(&in_a).unwrap(), "hand edit\n");
    assert!(running(&mut d), "{}", env.daemon_log());
    assert_eq!(d.stop(10), Some(0));
}
