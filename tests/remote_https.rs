//! `--repo https://...` against a real Git smart-HTTP server on loopback
//! (nginx with TLS from a throwaway CA, basic auth, git-http-backend): the
//! right token fetches and `sync` applies; a wrong token, an untrusted
//! certificate, an error page, a malformed address and a redirect to another
//! host all fail without the secret showing up anywhere.

mod util;

use std::path::{Path, PathBuf};

use util::certs::openssl;
use util::https::HttpsServer;
use util::secrets::Canary;
use util::servers::{remote_cmd, remote_daemon, run_remote};
use util::{wait_until, Env, Run};

const USER: &str = "tend";

/// A repository declaring one file, served as `ops.git`; basic auth accepts
/// `password`.
fn serve(password: &str) -> Option<(Env, HttpsServer)> {
    let server = HttpsServer::start(USER, password)?;
    let env = Env::new();
    env.repo
        .write(
            "motd.tend.yaml",
            "kind: file\npath: etc/motd\nsource: motd\n",
        )
        .write("motd", "from https\n");
    env.repo.commit("init");
    server.publish("ops.git", env.repo.path());
    Some((env, server))
}

fn config(env: &Env, token: Option<&Path>, ca: Option<&Path>) -> PathBuf {
    let mut auth = String::new();
    if let Some(token) = token {
        auth += &format!("    token_file: {}\n", token.display());
    }
    if let Some(ca) = ca {
        auth += &format!("    ca_file: {}\n", ca.display());
    }
    env.config(&format!("source:\n  auth:\n{auth}"))
}

#[test]
fn right_token_fetches_and_sync_applies() {
    let canary = Canary::new();
    let Some((env, server)) = serve(canary.value()) else {
        return;
    };
    let token = canary.secret_file("token");
    let cfg = config(&env, Some(&token), Some(&server.ca_file()));
    let url = server.url("ops.git");

    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(env.read("etc/motd"), "from https\n");
    let log = server.access_log();
    assert!(
        log.contains(" 401 "),
        "the server asked for credentials: {log}"
    );
    assert!(
        log.contains(" 200 user=tend "),
        "and accepted the token: {log}"
    );
    assert_eq!(env.status()["source"]["repo"], url.as_str());

    // A second commit arrives through the same mirror.
    env.repo.write("motd", "updated over https\n");
    env.repo.commit("update");
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(env.read("etc/motd"), "updated over https\n");
    // Success stores no secret either.
    canary.assert_not_in_run("sync", &run);
    canary.assert_not_stored(&env);
}

#[test]
fn wrong_token_fails_without_printing_it() {
    let canary = Canary::new();
    let Some((env, server)) = serve("the-right-password") else {
        return;
    };
    let token = canary.secret_file("token");
    let cfg = config(&env, Some(&token), Some(&server.ca_file()));
    let url = server.url("ops.git");

    for command in ["sync", "diff", "validate"] {
        let run = run_remote(&env, &url, Some(&cfg), &[command]);
        assert_eq!(run.code, 2, "{command}: {run:?}");
        assert!(
            run.stderr.contains("authentication")
                && run.stderr.contains("rejected the token (auth.token_file)"),
            "{command}: {run:?}"
        );
        assert!(run.stderr.contains(&url), "names the remote: {run:?}");
        canary.assert_not_in_run(command, &run);
    }
    assert!(!env.at("etc").exists(), "nothing applied");
    assert!(
        server.access_log().contains(" 401 user=tend "),
        "the token was tried: {}",
        server.access_log()
    );

    // The daemon records and logs the failure; neither shows the token.
    let mut daemon = remote_daemon(&env, &url, Some(&cfg), &["--interval", "1s"]);
    let failed = wait_until(30, || {
        env.status()["source"]["last_fetch_error"]
            .as_str()
            .is_some_and(|e| e.contains("rejected"))
            && env.daemon_log().contains("fetch failed")
    });
    daemon.stop(20);
    assert!(failed, "{}", env.daemon_log());
    canary.assert_not_stored(&env);
}

#[test]
fn credentials_in_the_address_are_redacted() {
    let canary = Canary::new();
    let Some((env, server)) = serve("the-right-password") else {
        return;
    };
    let cfg = config(&env, None, Some(&server.ca_file()));
    let url = format!(
        "https://{USER}:{}@127.0.0.1:{}/ops.git",
        canary.value(),
        server.port
    );
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    let shown = format!("https://***@127.0.0.1:{}/ops.git", server.port);
    assert!(run.stderr.contains(&shown), "{run:?}");
    assert!(
        run.stderr
            .contains("rejected the credentials in the repository address"),
        "{run:?}"
    );
    canary.assert_not_in_run("sync", &run);
    assert_eq!(env.status()["source"]["repo"], shown.as_str());
    canary.assert_not_stored(&env);

    // A malformed address is reported without its secret too.
    for bad in [
        format!("https://{USER}:{}@127.0.0.1:99999/ops.git", canary.value()),
        format!("https://{USER}:{}@[127.0.0.1/ops.git", canary.value()),
    ] {
        let run = run_remote(&env, &bad, Some(&cfg), &["sync"]);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.contains("https://***@"), "{run:?}");
        canary.assert_not_in_run("sync with a malformed address", &run);
    }
    canary.assert_not_stored(&env);
}

#[test]
fn redirect_to_another_host_does_not_forward_the_token() {
    let canary = Canary::new();
    // The other host would accept the token: a leak would succeed.
    let Some((env, server)) = serve(canary.value()) else {
        return;
    };
    let token = canary.secret_file("token");
    let cfg = config(&env, Some(&token), Some(&server.ca_file()));
    let url = server.redirect_url("ops.git");

    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!(
        "redirected to https://localhost:{}, which asks for credentials; \
         they are only sent to https://127.0.0.1:{}",
        server.other_port, server.redirect_port
    );
    assert!(run.stderr.contains(&expected), "{run:?}");
    canary.assert_not_in_run("sync", &run);
    assert!(server.redirect_log().contains(" 302 "), "redirected");
    let other = server.other_log();
    assert!(
        other.contains(" 401 "),
        "the redirect was followed: {other}"
    );
    assert!(
        !other.contains("authorization=\"Basic"),
        "credentials went to the other host: {other}"
    );

    // Credentials in the address do not follow the redirect either.
    let with_userinfo = format!(
        "https://{USER}:{}@127.0.0.1:{}/ops.git",
        canary.value(),
        server.redirect_port
    );
    let run = run_remote(&env, &with_userinfo, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    canary.assert_not_in_run("sync", &run);
    let other = server.other_log();
    assert!(
        !other.contains("authorization=\"Basic"),
        "credentials went to the other host: {other}"
    );
    assert!(!env.at("etc").exists(), "nothing applied");
    canary.assert_not_stored(&env);
}

#[test]
fn untrusted_certificate_is_refused_before_anything_is_sent() {
    let canary = Canary::new();
    let Some((env, server)) = serve(canary.value()) else {
        return;
    };
    let token = canary.secret_file("token");
    let url = server.url("ops.git");

    // The throwaway CA is not in the system store.
    let cfg = config(&env, Some(&token), None);
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("untrusted remote")
            && run.stderr.contains("certificate")
            && run.stderr.contains("auth.ca_file"),
        "{run:?}"
    );
    canary.assert_not_in_run("sync", &run);
    assert_eq!(server.access_log(), "", "no request passed the handshake");

    let missing = env.sentinel.path().join("no-such-ca.pem");
    let cfg = config(&env, Some(&token), Some(&missing));
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("auth.ca_file {}", missing.display())),
        "{run:?}"
    );

    let not_a_cert = canary.file("not-a-cert.pem", "hello\n");
    let cfg = config(&env, Some(&token), Some(&not_a_cert));
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("not a usable PEM"), "{run:?}");
    assert!(!env.at("etc").exists(), "nothing applied");
    assert_eq!(server.access_log(), "");
    canary.assert_not_stored(&env);
}

#[test]
fn an_error_page_after_authentication_leaks_nothing() {
    let canary = Canary::new();
    let Some((env, server)) = serve(canary.value()) else {
        return;
    };
    let token = canary.secret_file("token");
    let cfg = config(&env, Some(&token), Some(&server.ca_file()));
    let run = run_remote(&env, &server.url("broken.git"), Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("502"), "{run:?}");
    assert!(
        server.access_log().contains(" 502 user=tend "),
        "{}",
        server.access_log()
    );
    canary.assert_not_in_run("sync", &run);
    canary.assert_not_stored(&env);
}

/// Issue 22: a remote's first fetch brings the revision, not its history
/// (`source.depth`, default 1); history is fetched, whole and once, when
/// the anti-rollback check first needs it (a later revision, or a mirror
/// made afresh under an old mark); one that does not descend is refused.
/// `source.depth: 0` fetches all of history at once.
#[test]
fn a_remote_s_first_fetch_is_shallow_and_deepens_only_for_the_rollback_check() {
    let canary = Canary::new();
    let Some((env, server)) = serve(canary.value()) else {
        return;
    };
    let token = canary.secret_file("token");
    let cfg = config(&env, Some(&token), Some(&server.ca_file()));
    let url = server.url("ops.git");
    let commits = |n: usize, tag: &str| {
        for i in 0..n {
            env.repo.write("motd", format!("{tag} {i}\n"));
            env.repo.commit(&format!("{tag} {i}"));
        }
    };
    let in_mirror = || {
        let dir = env.mirror_dir();
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&dir)
            .args(["rev-list", "--all", "--count"])
            .output()
            .unwrap();
        let count: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        (count, dir.join("shallow").exists())
    };
    let sync = |cfg: &Path| {
        let run = run_remote(&env, &url, Some(cfg), &["sync", "--log-level", "info"]);
        assert_eq!(run.code, 0, "{run:?}");
        run
    };
    commits(30, "old");
    sync(&cfg);
    assert_eq!(env.read("etc/motd"), "old 29\n");
    assert_eq!(in_mirror(), (1, true), "one commit of 31 fetched");
    commits(3, "new");
    let run = sync(&cfg);
    assert_eq!(env.read("etc/motd"), "new 2\n");
    assert!(run.all().contains("mirror history deepened"), "{run:?}");
    assert_eq!(in_mirror(), (34, false), "the history, once");
    commits(2, "plain");
    let run = sync(&cfg);
    assert_eq!(env.read("etc/motd"), "plain 1\n");
    assert!(!run.all().contains("deepened"), "{run:?}");
    assert_eq!(in_mirror(), (36, false));

    // A fresh mirror, the mark 20 commits back: shallow, then deepened.
    std::fs::remove_dir_all(env.mirror_dir()).unwrap();
    commits(18, "later");
    let run = sync(&cfg);
    assert_eq!(env.read("etc/motd"), "later 17\n");
    assert!(run.all().contains("mirror history deepened"), "{run:?}");
    assert_eq!(in_mirror(), (54, false));

    // The branch rewound past the mark, seen by a fresh mirror: deepened
    // to the whole history, then refused.
    env.repo.git(&["reset", "-q", "--hard", "HEAD~5"]);
    std::fs::remove_dir_all(env.mirror_dir()).unwrap();
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("rewind"), "{run:?}");
    assert_eq!(env.read("etc/motd"), "later 17\n");
    assert_eq!(in_mirror(), (49, false), "the whole history, to be sure");

    // A pin to an older revision on a shallow mirror: the history is
    // fetched to find it, and the pin applies.
    let old = env.repo.git(&["rev-parse", "HEAD~3"]).trim().to_string();
    std::fs::remove_dir_all(env.mirror_dir()).unwrap();
    let allow = env.config(&format!(
        "source:\n  repo: {url}\n  allow_rewind: true\n  auth:\n    token_file: {}\n    ca_file: {}\n",
        token.display(),
        server.ca_file().display()
    ));
    // Rewound on purpose: the mark moves to the tip; then a fresh mirror
    // stays shallow.
    sync(&allow);
    std::fs::remove_dir_all(env.mirror_dir()).unwrap();
    sync(&allow);
    assert_eq!(in_mirror(), (1, true));
    let cfg_arg = allow.to_str().unwrap();
    let pin = run_remote(&env, &url, Some(&allow), &["pin", &old[..10]]);
    assert_eq!(pin.code, 0, "{pin:?}");
    sync(&allow);
    assert_eq!(env.read("etc/motd"), "later 9\n");
    assert_eq!(in_mirror(), (49, false));
    let unpin = env.tend(&["unpin", "-c", cfg_arg]);
    assert_eq!(unpin.code, 0, "{unpin:?}");

    // `source.depth: 0`: all of history at once.
    let full = env.config(&format!(
        "source:\n  depth: 0\n  allow_rewind: true\n  auth:\n    token_file: {}\n    ca_file: {}\n",
        token.display(),
        server.ca_file().display()
    ));
    std::fs::remove_dir_all(env.mirror_dir()).unwrap();
    sync(&full);
    assert_eq!(in_mirror(), (49, false));
    assert_eq!(env.read("etc/motd"), "later 12\n");
}

/// The system's roots as OpenSSL reads them, made by the test: `SSL_CERT_FILE`
/// a bundle, `SSL_CERT_DIR` a directory of certificates named by subject
/// hash. tend starts without the bundle where the directory is hashed, and
/// reads it when a server's certificate needs it: a root in the bundle
/// alone, in the directory alone, or in neither is trusted, trusted and
/// refused, as when both are read at the start.
#[test]
fn system_roots_are_the_bundle_and_the_hashed_directory_whichever_holds_the_root() {
    let canary = Canary::new();
    let Some((env, server)) = serve(canary.value()) else {
        return;
    };
    let token = canary.secret_file("token");
    let cfg = config(&env, Some(&token), None);
    let url = server.url("ops.git");
    let ca = std::fs::read_to_string(server.ca_file()).unwrap();
    let roots = tempfile::tempdir().unwrap();
    let at = |name: &str| roots.path().join(name);
    // A hashed directory without the server's root: another name hashed.
    std::fs::create_dir(at("other")).unwrap();
    std::fs::write(at("other/0badc0de.0"), "").unwrap();
    // One with it, under its subject's hash.
    let hash = openssl(roots.path(), &["x509", "-hash", "-noout"], Some(&ca));
    std::fs::create_dir(at("with")).unwrap();
    std::fs::write(at("with").join(format!("{}.0", hash.trim())), &ca).unwrap();
    std::fs::write(at("bundle-with.pem"), &ca).unwrap();
    std::fs::write(at("bundle-without.pem"), "").unwrap();
    let sync = |bundle: &str, dir: &str| -> Run {
        let _ = std::fs::remove_dir_all(env.at("etc"));
        remote_cmd(&env, &url, Some(&cfg), &["sync", "--log-level", "debug"])
            .env("SSL_CERT_FILE", at(bundle))
            .env("SSL_CERT_DIR", at(dir))
            .output()
            .expect("run tend")
            .into()
    };

    let run = sync("bundle-with.pem", "other");
    assert_eq!(run.code, 0, "in the bundle alone: {run:?}");
    assert_eq!(env.read("etc/motd"), "from https\n");
    assert!(
        run.all().contains("added the system's certificate bundle"),
        "read when the handshake needed it: {run:?}"
    );

    let run = sync("bundle-without.pem", "with");
    assert_eq!(run.code, 0, "in the directory alone: {run:?}");
    assert_eq!(env.read("etc/motd"), "from https\n");
    assert!(
        !run.all().contains("certificate bundle"),
        "the directory sufficed: {run:?}"
    );

    let before = server.access_log();
    let run = sync("bundle-without.pem", "other");
    assert_eq!(run.code, 2, "in neither: {run:?}");
    assert!(
        run.stderr.contains("untrusted remote") && run.stderr.contains("auth.ca_file"),
        "{run:?}"
    );
    assert_eq!(
        server.access_log(),
        before,
        "no request passed the handshake"
    );
    assert!(!env.at("etc").exists(), "nothing applied");
    canary.assert_not_in_run("sync", &run);
}

#[test]
fn a_reload_from_a_local_repository_to_https_is_taken_with_the_system_roots() {
    let canary = Canary::new();
    let Some((env, server)) = serve(canary.value()) else {
        return;
    };
    let token = canary.secret_file("token");
    let url = server.url("ops.git");
    // The daemon starts on a local repository, which needs no TLS.
    let local = Env::new();
    local
        .repo
        .write(
            "motd.tend.yaml",
            "kind: file\npath: etc/motd\nsource: motd\n",
        )
        .write("motd", "from a local repository\n");
    local.repo.commit("init");
    // The server's root is the system's: in its bundle, beside a hashed
    // directory without it.
    let roots = tempfile::tempdir().unwrap();
    let bundle = roots.path().join("bundle.pem");
    std::fs::copy(server.ca_file(), &bundle).unwrap();
    let dir = roots.path().join("certs");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("0badc0de.0"), "").unwrap();
    let source = |repo: &str| {
        env.config(&format!(
            "source:\n  repo: {repo}\n  interval: 1h\n  auth:\n    token_file: {}\n",
            token.display()
        ))
    };
    let cfg = source(local.repo.path().to_str().unwrap());
    let log = std::fs::File::create(env.state.path().join("daemon.log")).unwrap();
    let mut c = util::tend_cmd();
    c.args([
        "run",
        "--listen",
        "127.0.0.1:0",
        "--log-level",
        "debug",
        "-c",
    ])
    .arg(&cfg)
    .arg("--root")
    .arg(env.root())
    .arg("--state-dir")
    .arg(env.state.path())
    .env("HOME", util::servers::home(&env))
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .env("SSL_CERT_FILE", &bundle)
    .env("SSL_CERT_DIR", &dir)
    .stdout(log.try_clone().unwrap())
    .stderr(log);
    let mut daemon = util::Daemon {
        child: c.spawn().expect("start tend run"),
    };
    let local_applied = wait_until(30, || {
        std::fs::read_to_string(env.at("etc/motd")).ok().as_deref()
            == Some("from a local repository\n")
    });
    assert!(local_applied, "{}", env.daemon_log());

    // The same config file, now naming the https repository.
    assert_eq!(source(&url), cfg);
    daemon.signal(1); // SIGHUP
    let https_applied = wait_until(30, || {
        std::fs::read_to_string(env.at("etc/motd")).ok().as_deref() == Some("from https\n")
    });
    let log = env.daemon_log();
    daemon.stop(20);
    assert!(https_applied, "the reload took the https repository: {log}");
    assert!(log.contains("config reloaded"), "{log}");
    assert!(!log.contains("needs restart"), "{log}");
    assert!(
        log.contains("added the system's certificate bundle"),
        "the bundle read when the first handshake needed it: {log}"
    );
    assert!(
        server.access_log().contains(" 200 user=tend "),
        "{}",
        server.access_log()
    );
    canary.assert_not_stored(&env);
}
