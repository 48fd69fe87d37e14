//! `--repo ssh://...` and the scp-like form against a real OpenSSH server on
//! a loopback port: a known host with an authorized key (with or without a
//! passphrase) fetches; an unknown or changed host key is refused, naming
//! the host and the offered key's fingerprint, before any login; a missing
//! or rejected key fails clearly; no secret shows up anywhere.

mod util;

use std::path::{Path, PathBuf};

use util::secrets::Canary;
use util::servers::run_remote;
use util::sshd::SshServer;
use util::Env;

fn serve() -> Option<(Env, SshServer)> {
    let server = SshServer::start()?;
    let env = Env::new();
    env.repo
        .write(
            "motd.tend.yaml",
            "kind: file\npath: etc/motd\nsource: motd\n",
        )
        .write("motd", "from ssh\n");
    env.repo.commit("init");
    Some((env, server))
}

#[derive(Default)]
struct Auth<'a> {
    key: Option<&'a Path>,
    passphrase: Option<&'a Path>,
    known_hosts: Option<&'a Path>,
}

fn config(env: &Env, auth: Auth<'_>) -> PathBuf {
    let mut text = String::from("source:\n  auth:\n");
    for (name, path) in [
        ("ssh_key", auth.key),
        ("ssh_key_passphrase_file", auth.passphrase),
        ("known_hosts", auth.known_hosts),
    ] {
        if let Some(path) = path {
            text += &format!("    {name}: {}\n", path.display());
        }
    }
    env.config(&text)
}

/// No login happened: the refusal came before authentication.
fn assert_no_login(server: &SshServer) {
    let log = server.log();
    assert!(!log.contains("Accepted publickey"), "{log}");
}

#[test]
fn known_host_fetches_over_ssh_and_scp_like_addresses() {
    let Some((env, server)) = serve() else {
        return;
    };
    let secrets = Canary::new();
    let known = secrets.file("known_hosts", &server.known_hosts_line());
    let key = server.client_key();
    let auth = || Auth {
        key: Some(&key),
        known_hosts: Some(&known),
        ..Auth::default()
    };
    let cfg = config(&env, auth());
    let run = run_remote(&env, &server.url(env.repo.path()), Some(&cfg), &["sync"]);
    assert_eq!(run.code, 0, "{run:?}\n{}", server.log());
    assert_eq!(env.read("etc/motd"), "from ssh\n");
    assert!(server.log().contains("Accepted publickey"));

    // The scp-like form, with the port in brackets as libgit2 reads it.
    let other = Env::new();
    let cfg = config(&other, auth());
    let scp = server.scp_url(env.repo.path());
    let run = run_remote(&other, &scp, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 0, "{run:?}\n{}", server.log());
    assert_eq!(other.read("etc/motd"), "from ssh\n");
    assert_eq!(other.status()["source"]["repo"], scp.as_str());
}

#[test]
fn a_key_with_a_passphrase_uses_the_passphrase_file() {
    let Some((env, server)) = serve() else {
        return;
    };
    let canary = Canary::new();
    let known = canary.file("known_hosts", &server.known_hosts_line());
    let key = server.locked_key(canary.value());
    let url = server.url(env.repo.path());

    // Without the passphrase the key cannot be used.
    let cfg = config(
        &env,
        Auth {
            key: Some(&key),
            known_hosts: Some(&known),
            ..Auth::default()
        },
    );
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!(
        "the ssh key {} (auth.ssh_key) is encrypted and auth.ssh_key_passphrase_file is not set",
        key.display()
    );
    assert!(run.stderr.contains(&expected), "{run:?}");

    // A wrong passphrase is another secret that must not show.
    let wrong = Canary::new();
    let wrong_file = wrong.secret_file("passphrase");
    let cfg = config(
        &env,
        Auth {
            key: Some(&key),
            passphrase: Some(&wrong_file),
            known_hosts: Some(&known),
        },
    );
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("could not be used: a wrong passphrase (auth.ssh_key_passphrase_file)"),
        "{run:?}"
    );
    wrong.assert_not_in_run("sync with a wrong passphrase", &run);
    wrong.assert_not_stored(&env);
    assert!(!env.at("etc").exists(), "nothing applied");

    let right = canary.secret_file("passphrase");
    let cfg = config(
        &env,
        Auth {
            key: Some(&key),
            passphrase: Some(&right),
            known_hosts: Some(&known),
        },
    );
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 0, "{run:?}\n{}", server.log());
    assert_eq!(env.read("etc/motd"), "from ssh\n");
    canary.assert_not_in_run("sync", &run);
    canary.assert_not_stored(&env);
}

#[test]
fn unknown_host_is_refused_naming_host_and_fingerprint() {
    let Some((env, server)) = serve() else {
        return;
    };
    let canary = Canary::new();
    let key = server.client_key();
    // known_hosts knows other hosts, and this host on another port.
    let stranger = std::fs::read_to_string(server.stranger_key().with_extension("pub")).unwrap();
    let known = canary.file(
        "known_hosts",
        &format!("git.example.com {stranger}127.0.0.1 {stranger}"),
    );
    let cfg = config(
        &env,
        Auth {
            key: Some(&key),
            known_hosts: Some(&known),
            ..Auth::default()
        },
    );
    // A password in the address must not show either.
    let url = format!(
        "ssh://{}:{}@127.0.0.1:{}{}",
        server.user,
        canary.value(),
        server.port,
        env.repo.path().display()
    );
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    let host = format!(
        "host [127.0.0.1]:{} is not in known_hosts {}",
        server.port,
        known.display()
    );
    assert!(run.stderr.contains(&host), "{run:?}");
    let offered = format!("offered ssh-ed25519 key {}", server.fingerprint());
    assert!(run.stderr.contains(&offered), "{run:?}");
    assert!(run.stderr.contains("ssh://***@127.0.0.1:"), "{run:?}");
    canary.assert_not_in_run("sync", &run);
    assert_no_login(&server);
    assert!(!env.at("etc").exists(), "nothing applied");
    canary.assert_not_stored(&env);

    // Without auth.known_hosts, ~/.ssh/known_hosts applies; here it is absent.
    let cfg = config(
        &env,
        Auth {
            key: Some(&key),
            ..Auth::default()
        },
    );
    let run = run_remote(&env, &server.url(env.repo.path()), Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains(".ssh/known_hosts"), "{run:?}");
    assert!(run.stderr.contains(&server.fingerprint()), "{run:?}");
    assert_no_login(&server);
}

#[test]
fn changed_host_key_is_refused() {
    let Some((env, server)) = serve() else {
        return;
    };
    let canary = Canary::new();
    let key = server.client_key();
    // The line for this very host and port lists another key.
    let stranger = std::fs::read_to_string(server.stranger_key().with_extension("pub")).unwrap();
    let known = canary.file(
        "known_hosts",
        &format!("[127.0.0.1]:{} {stranger}", server.port),
    );
    let cfg = config(
        &env,
        Auth {
            key: Some(&key),
            known_hosts: Some(&known),
            ..Auth::default()
        },
    );
    let run = run_remote(&env, &server.url(env.repo.path()), Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!(
        "host [127.0.0.1]:{} offered ssh-ed25519 key {}, which is not the key known_hosts {} lists for it",
        server.port,
        server.fingerprint(),
        known.display()
    );
    assert!(run.stderr.contains(&expected), "{run:?}");
    assert!(run.stderr.contains("untrusted remote"), "{run:?}");
    assert_no_login(&server);
    assert!(!env.at("etc").exists(), "nothing applied");
}

#[test]
fn missing_or_rejected_key_fails_clearly() {
    let Some((env, server)) = serve() else {
        return;
    };
    let secrets = Canary::new();
    let known = secrets.file("known_hosts", &server.known_hosts_line());
    let url = server.url(env.repo.path());

    let missing = env.sentinel.path().join("no-such-key");
    let cfg = config(
        &env,
        Auth {
            key: Some(&missing),
            known_hosts: Some(&known),
            ..Auth::default()
        },
    );
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!("auth.ssh_key {}: No such file", missing.display());
    assert!(run.stderr.contains(&expected), "{run:?}");

    let cfg = config(
        &env,
        Auth {
            known_hosts: Some(&known),
            ..Auth::default()
        },
    );
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("asks for an ssh key and auth.ssh_key is not set"),
        "{run:?}"
    );

    let stranger = server.stranger_key();
    let cfg = config(
        &env,
        Auth {
            key: Some(&stranger),
            known_hosts: Some(&known),
            ..Auth::default()
        },
    );
    let run = run_remote(&env, &url, Some(&cfg), &["sync"]);
    assert_eq!(run.code, 2, "{run:?}");
    let expected = format!("the remote rejected the ssh key {}", stranger.display());
    assert!(run.stderr.contains(&expected), "{run:?}");
    assert_no_login(&server);
    assert!(!env.at("etc").exists(), "nothing applied");
}
