//! `tend health` against a real daemon over a real port (SPEC §10): 0 while
//! the loop answers, 1 when the daemon is frozen (SIGSTOP), gone, or
//! answers an error; `--ready` also needs the first pass to have ended.

mod util;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use util::{tend_cmd, wait_until, Env, Run};

fn health(args: &[&str]) -> Run {
    let out = tend_cmd().arg("health").args(args).output().unwrap();
    Run::from(out)
}

fn commit_a(env: &Env) {
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/a\ncontent: \"a\\n\"\n",
    );
    env.repo.commit("a");
}

#[test]
fn healthy_while_the_loop_answers_unhealthy_when_frozen_or_gone() {
    let env = Env::new();
    commit_a(&env);
    let mut s = env.serve("", &[]);
    let addr = s.addr.to_string();
    assert!(
        wait_until(30, || health(&["--listen", &addr]).code == 0),
        "never healthy: {:?}\n{}",
        health(&["--listen", &addr]),
        env.daemon_log()
    );
    let ok = health(&["--listen", &addr]);
    assert!(ok.stdout.contains("/healthz: ok"), "{ok:?}");
    assert!(wait_until(30, || health(&["--listen", &addr, "--ready"])
        .code
        == 0));
    let ready = health(&["--listen", &addr, "--ready"]);
    assert!(ready.stdout.contains("/readyz: ready"), "{ready:?}");
    assert!(ready.stdout.contains("/healthz: ok"), "{ready:?}");

    // Frozen: the port still accepts (the kernel's backlog), nothing answers.
    s.daemon.signal(libc::SIGSTOP);
    let asked = Instant::now();
    let frozen = health(&["--listen", &addr, "--max-time", "1s"]);
    assert_eq!(frozen.code, 1, "{frozen:?}");
    assert!(frozen.stderr.contains("no answer within 1s"), "{frozen:?}");
    let frozen = health(&["--listen", &addr, "--ready", "--max-time", "1s"]);
    assert_eq!(frozen.code, 1, "ready but frozen is unhealthy: {frozen:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the check is bounded: {:?}",
        asked.elapsed()
    );
    s.daemon.signal(libc::SIGCONT);
    assert!(wait_until(30, || health(&["--listen", &addr]).code == 0));

    s.daemon.kill9();
    let gone = health(&["--listen", &addr]);
    assert_eq!(gone.code, 1, "{gone:?}");
    assert!(gone.stderr.contains("cannot connect"), "{gone:?}");
}

#[test]
fn ready_follows_the_first_pass_and_the_address_comes_from_env_or_config() {
    let env = Env::new();
    // No commit: every fetch fails, the loop runs, no pass ends.
    let s = env.serve("", &[]);
    let addr = s.addr.to_string();
    assert!(wait_until(30, || health(&["--listen", &addr]).code == 0));
    let not_ready = health(&["--listen", &addr, "--ready"]);
    assert_eq!(not_ready.code, 1, "{not_ready:?}");
    assert!(not_ready.stderr.contains("answered 503"), "{not_ready:?}");

    commit_a(&env);
    s.refresh();
    let from_env = || {
        tend_cmd()
            .args(["health", "--ready"])
            .env("TEND_LISTEN", &addr)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert!(
        wait_until(30, || from_env() == Some(0)),
        "{}",
        env.daemon_log()
    );

    let cfg = env.state.path().join("health.yaml");
    std::fs::write(&cfg, format!("server:\n  listen: {addr}\n")).unwrap();
    let from_config = health(&["-c", cfg.to_str().unwrap()]);
    assert_eq!(from_config.code, 0, "{from_config:?}");
}

#[test]
fn an_error_answer_or_a_bad_address_is_unhealthy_never_2() {
    // A server that answers every request 500, over a real port.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\nbad!\n",
            );
        }
    });
    let failing = health(&["--listen", &addr]);
    assert_eq!(failing.code, 1, "{failing:?}");
    assert!(failing.stderr.contains("answered 500: bad!"), "{failing:?}");

    let bad = health(&["--listen", "not an address"]);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.contains("not a listen address"), "{bad:?}");

    let missing = health(&["-c", "/nonexistent/tend.yaml"]);
    assert_eq!(missing.code, 1, "{missing:?}");
}
