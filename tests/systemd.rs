//! tend under a real systemd, installed from its Debian package: one
//! container (PID 1 systemd, from the local base image) for every scenario,
//! in order: install; both units verified and rated; `systemctl start`
//! returns after the first pass; the journal has tend's fields; reload
//! takes a new commit and config and refuses a bad one; a healthy tend
//! outlives several watchdog periods, pinging, and a frozen one is killed
//! by the watchdog, restarted, and converges; stop is clean; a confined
//! instance works in its root and cannot write outside it; purge removes
//! the package.

mod util;

use std::path::Path;
use std::process::Command;

use util::container::{docker_works, ensure_base_image, Systemd};
use util::{can_run, wait_until};

const REPO: &str = "/srv/repo";

fn declarations(motd: &str) -> String {
    format!(
        "kind: file\npath: etc/tend-test/motd\ncontent: \"{motd}\\n\"\nmode: \"0640\"\n\
         owner: nobody\non_change: mark\n---\n\
         kind: file\npath: usr/local/share/tend-test/page.html\ncontent: \"<p>page</p>\\n\"\n"
    )
}

/// A short resync: the watcher takes an edit right after tend's own write
/// for its echo, and leaves it to the resync.
const CONFIG: &str = "source: {repo: /srv/repo, interval: 1h}\n\
    targets: {files: {type: files, root: /}}\n\
    hooks: {mark: {run: [touch, /run/tend-hooked]}}\n\
    policy: {resync: 3s}\n";

/// Builds the package from the binary under test (no second build).
fn package() -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/package"))
        .arg("--dev")
        .current_dir(root)
        .output()
        .expect("run scripts/package");
    assert!(
        out.status.success(),
        "scripts/package --dev: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(path.ends_with(".deb"), "{path}");
    path.into()
}

/// The journal entries of `unit` as JSON objects.
fn journal(c: &Systemd, unit: &str) -> Vec<serde_json::Value> {
    c.ok(&format!("journalctl -u {unit} -o json --no-pager"))
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The unit's log as text, for failure messages.
fn log(c: &Systemd, unit: &str) -> String {
    c.ok(&format!(
        "journalctl -u {unit} -o cat --no-pager | tail -40"
    ))
}

fn has_entry(c: &Systemd, unit: &str, f: impl Fn(&serde_json::Value) -> bool) -> bool {
    journal(c, unit).iter().any(f)
}

fn message(e: &serde_json::Value) -> &str {
    e["MESSAGE"].as_str().unwrap_or("")
}

#[test]
fn tend_under_systemd_from_its_package() {
    if !can_run(docker_works(), "no Docker engine") {
        return;
    }
    ensure_base_image();
    let deb = package();
    let c = Systemd::boot("tend-systemd-test");

    // Install.
    c.copy_in(&deb, "/root/tend.deb");
    c.ok("dpkg -i /root/tend.deb");
    let files = [
        "/usr/bin/tend",
        "/usr/lib/systemd/system/tend.service",
        "/usr/lib/systemd/system/tend@.service",
        "/etc/tend/tend.example.yaml",
        "/usr/share/tend/alerts.yaml",
        "/usr/share/man/man1/tend.1.gz",
        "/usr/share/man/man1/tend-run.1.gz",
        "/usr/share/bash-completion/completions/tend",
        "/usr/share/zsh/vendor-completions/_tend",
        "/usr/share/fish/vendor_completions.d/tend.fish",
    ];
    for f in files {
        c.ok(&format!("test -f {f}"));
    }
    c.ok("test -d /var/lib/tend && getent passwd tend");
    assert_eq!(c.prop("tend.service", "LoadState"), "loaded");
    assert_eq!(c.prop("tend@x.service", "LoadState"), "loaded");
    // Known, not enabled: the example config is not a config to run with.
    assert_eq!(c.sh("systemctl is-enabled tend").stdout.trim(), "disabled");
    assert!(c.ok("dpkg -L tend").contains("/usr/bin/tend"));

    // Both units pass systemd's own check and are rated; the template at
    // least OK.
    c.ok("systemd-analyze verify --man=no /usr/lib/systemd/system/tend.service /usr/lib/systemd/system/tend@.service");
    for unit in ["tend.service", "tend@x.service"] {
        let rating = c.ok(&format!(
            "systemd-analyze security --no-pager {unit} | tail -1"
        ));
        eprintln!("{rating}");
        assert!(
            ["PERFECT", "SAFE", "OK"].iter().any(|w| rating.contains(w)),
            "{unit}: {rating}"
        );
    }

    // A repository in the container, and the host's config.
    c.ok(&format!(
        "mkdir -p {REPO} && cd {REPO} && git init -q -b main . && \
         git config user.email t@example.com && git config user.name t"
    ));
    let commit = |what: &str| {
        c.ok(&format!(
            "cd {REPO} && git add -A && git commit -qm '{what}' && git rev-parse HEAD"
        ))
        .trim()
        .to_string()
    };
    c.write(&format!("{REPO}/host.tend.yaml"), &declarations("one"));
    let first = commit("one");
    c.write("/etc/tend/tend.yaml", CONFIG);

    // start returns after the first pass (READY=1): the files are there.
    c.ok("systemctl start tend");
    c.ok("test -f /usr/local/share/tend-test/page.html");
    assert_eq!(c.ok("cat /etc/tend-test/motd"), "one\n");
    assert_eq!(
        c.ok("stat -c '%a %U' /etc/tend-test/motd").trim(),
        "640 nobody"
    );
    c.ok("test -f /run/tend-hooked");
    assert_eq!(c.prop("tend", "ActiveState"), "active");
    assert_eq!(c.prop("tend", "SubState"), "running");
    let status = c.prop("tend", "StatusText");
    assert!(
        status.contains(&first[..12]) && status.contains("0 not in sync"),
        "{status}"
    );
    // The open-files limit was raised past systemd's soft 1024 (prlimit
    // passed the syscall filter).
    let pid = c.prop("tend", "MainPID");
    let limits = c.ok(&format!("grep 'Max open files' /proc/{pid}/limits"));
    let nums: Vec<u64> = limits
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(nums[0], nums[1].min(16384), "{limits}");

    // The journal: native entries with the message as text and each field
    // as TEND_<KEY>, the priority from the level.
    assert!(
        wait_until(10, || has_entry(&c, "tend", |e| message(e)
            .starts_with("new revision")
            && e["TEND_REVISION"] == first.as_str()
            && e["PRIORITY"] == "6"
            && e["SYSLOG_IDENTIFIER"] == "tend"
            && message(e).contains(&first))),
        "{}",
        log(&c, "tend")
    );

    // Reload: a new commit and a changed config (a louder level) are taken
    // at once (the poll interval is an hour), in the same process, with the
    // ledger kept.
    let ledger_before = c.ok("tend status -o json --state-dir /var/lib/tend");
    let page_applied = |status: &str| -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(status).unwrap();
        v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == "files/file/usr/local/share/tend-test/page.html")
            .unwrap()["last_applied"]
            .clone()
    };
    let audit_before = c
        .ok("wc -l < /var/lib/tend/audit.jsonl")
        .trim()
        .parse::<u32>()
        .unwrap();
    c.write(&format!("{REPO}/host.tend.yaml"), &declarations("two"));
    let second = commit("two");
    c.write(
        "/etc/tend/tend.yaml",
        &format!("{CONFIG}log: {{level: debug}}\n"),
    );
    c.ok("systemctl reload tend");
    assert!(
        wait_until(20, || c.sh("cat /etc/tend-test/motd").stdout == "two\n"),
        "{}",
        log(&c, "tend")
    );
    assert!(
        wait_until(10, || has_entry(&c, "tend", |e| e["PRIORITY"] == "7")),
        "no debug entry after the level changed"
    );
    assert_eq!(c.prop("tend", "MainPID"), pid);
    let ledger_after = c.ok("tend status -o json --state-dir /var/lib/tend");
    assert_eq!(page_applied(&ledger_before), page_applied(&ledger_after));
    let audit_after = c
        .ok("wc -l < /var/lib/tend/audit.jsonl")
        .trim()
        .parse::<u32>()
        .unwrap();
    assert!(
        audit_after > audit_before,
        "{audit_before} -> {audit_after}"
    );
    assert!(c.prop("tend", "StatusText").contains(&second[..12]));

    // A bad config is refused, said in the journal at error level, and the
    // running one kept: the daemon runs on and still corrects drift.
    c.write(
        "/etc/tend/tend.yaml",
        &format!("{CONFIG}log: {{verbosity: debug}}\n"),
    );
    c.ok("systemctl reload tend");
    assert!(
        wait_until(20, || has_entry(&c, "tend", |e| message(e)
            .starts_with("config refused")
            && e["PRIORITY"] == "3"
            && e["TEND_ERROR"].as_str().is_some_and(|m| m
                .contains("/etc/tend/tend.yaml")
                && m.contains("verbosity")))),
        "{}",
        log(&c, "tend")
    );
    assert_eq!(c.prop("tend", "ActiveState"), "active");
    assert_eq!(c.prop("tend", "MainPID"), pid);
    c.ok("echo hand edit > /etc/tend-test/motd");
    assert!(
        wait_until(20, || c.sh("cat /etc/tend-test/motd").stdout == "two\n"),
        "{}",
        log(&c, "tend")
    );
    c.write("/etc/tend/tend.yaml", CONFIG);

    // Watchdog: frozen with SIGSTOP, tend stops pinging; systemd kills it
    // and starts it again, and the new process corrects what was edited
    // meanwhile.
    c.write(
        "/etc/systemd/system/tend.service.d/watchdog.conf",
        "[Service]\nWatchdogSec=3s\nRestartSec=1s\nTimeoutAbortSec=5s\nLimitCORE=0\n",
    );
    c.ok("systemctl daemon-reload && systemctl restart tend");
    let pid = c.prop("tend", "MainPID");
    let restarts: u32 = c.prop("tend", "NRestarts").parse().unwrap();
    // A healthy tend pings: it outlives several WatchdogSec periods, and
    // the time systemd last heard WATCHDOG=1 moves on meanwhile.
    assert_eq!(c.prop("tend", "WatchdogUSec"), "3s");
    let pinged = || {
        c.prop("tend", "WatchdogTimestampMonotonic")
            .parse::<u64>()
            .unwrap()
    };
    let first = pinged();
    std::thread::sleep(std::time::Duration::from_secs(10));
    assert_eq!(c.prop("tend", "MainPID"), pid, "{}", log(&c, "tend"));
    assert_eq!(c.prop("tend", "NRestarts"), restarts.to_string());
    assert_eq!(c.prop("tend", "ActiveState"), "active");
    let last = pinged();
    assert!(last > first, "no ping in 10 s: {first} then {last}");
    assert!(!c
        .ok("journalctl -u tend --no-pager")
        .contains("Watchdog timeout"));
    c.ok(&format!("kill -STOP {pid}"));
    c.ok("echo frozen edit > /etc/tend-test/motd");
    assert!(
        wait_until(60, || c.prop("tend", "NRestarts").parse::<u32>().unwrap()
            > restarts
            && c.prop("tend", "ActiveState") == "active"),
        "{:?}",
        c.sh("systemctl status tend --no-pager; journalctl -u tend --no-pager | tail -20")
    );
    assert_ne!(c.prop("tend", "MainPID"), pid);
    assert!(c
        .ok("journalctl -u tend --no-pager")
        .contains("Watchdog timeout"));
    assert!(
        wait_until(20, || c.sh("cat /etc/tend-test/motd").stdout == "two\n"),
        "{}",
        log(&c, "tend")
    );

    // Stop: SIGTERM ends tend cleanly, within TimeoutStopSec (a timeout
    // would be Result=timeout and logged as timed out).
    c.ok("systemctl stop tend");
    assert_eq!(c.prop("tend", "ActiveState"), "inactive");
    assert_eq!(c.prop("tend", "Result"), "success");
    assert_eq!(c.prop("tend", "ExecMainStatus"), "0");
    let stopped = log(&c, "tend");
    assert!(stopped.contains("stopped by signal"), "{stopped}");
    assert!(!stopped.contains("timed out"), "{stopped}");

    // A confined instance: its own user, config and root. Its hook tries
    // to write outside the root, into a folder the tend user owns: only
    // the sandbox stops it.
    c.ok(&format!(
        "cp -a {REPO} /srv/repo-web && chown -R tend:tend /srv/repo-web && \
         cd /srv/repo-web && printf 'kind: file\\npath: site/index.html\\ncontent: \"<p>web</p>\\\\n\"\\non_change: escape\\n' > host.tend.yaml && \
         git -c safe.directory='*' add -A && git -c safe.directory='*' -c user.email=t@e -c user.name=t commit -qm web && \
         install -d -o tend -g tend -m 0755 /srv/outside"
    ));
    c.write(
        "/etc/tend/web.yaml",
        "source: {repo: /srv/repo-web, interval: 1h}\nserver: {listen: 127.0.0.1:9421}\n\
         hooks: {escape: {run: [/bin/sh, -c, '/usr/bin/touch /srv/outside/escaped 2> /var/lib/tend-web/escape.err; \
         echo $? > /var/lib/tend-web/escape.ran']}}\n",
    );
    c.ok("systemctl start tend@web");
    assert_eq!(
        c.ok("stat -c '%U %a' /srv/tend/web/site/index.html").trim(),
        "tend 644"
    );
    assert_eq!(c.ok("cat /srv/tend/web/site/index.html"), "<p>web</p>\n");
    c.ok("test -d /var/lib/tend-web");
    let pid = c.prop("tend@web", "MainPID");
    // The instance runs as tend, without capabilities.
    let st = c.ok(&format!("grep -E '^(Uid|CapEff)' /proc/{pid}/status"));
    assert!(st.contains("0000000000000000"), "{st}");
    assert!(
        wait_until(20, || c.sh("test -f /var/lib/tend-web/escape.ran").code
            == 0),
        "the hook never ran: {}",
        log(&c, "tend@web")
    );
    assert_ne!(c.ok("cat /var/lib/tend-web/escape.ran").trim(), "0");
    c.ok("test ! -e /srv/outside/escaped");
    let refused = c.ok("cat /var/lib/tend-web/escape.err");
    assert!(refused.contains("Read-only file system"), "{refused}");
    c.ok("systemctl stop tend@web");
    assert_eq!(c.prop("tend@web", "Result"), "success");

    // Purge: the package's files and the services' state are gone; the
    // operator's own configs stay.
    c.ok("dpkg --purge tend");
    for f in files {
        c.ok(&format!("test ! -e {f}"));
    }
    c.ok("test ! -e /var/lib/tend && test ! -e /var/lib/tend-web");
    c.ok("test -f /etc/tend/tend.yaml");
    c.ok("systemctl daemon-reload");
    assert_eq!(c.prop("tend.service", "LoadState"), "not-found");
}
