//! Fetch memory does not grow with blob size: a 200 MB blob pushed to the
//! repository (refused by the declaration's 64 MiB limit) is fetched, over
//! a local path and over smart HTTP, with a peak resident size well below
//! the blob's. The peak is the kernel's own count for the `tend sync`
//! process (`ru_maxrss` from `wait4`), so a busy machine cannot blur it.

mod util;

use std::io::Write;
use std::process::{Command, Stdio};

use util::https::HttpsServer;
use util::{Env, Run};

const BLOB: usize = 200 << 20;
/// Far below the blob: a fetch that held it whole, or mapped all of its
/// pack at once, goes over.
const LIMIT_KIB: i64 = 120 << 10;

/// Runs `cmd` and returns its outcome and its peak resident size in KiB.
fn peak_rss(mut cmd: Command) -> (Run, i64) {
    let out = tempfile::tempdir().unwrap();
    let (o, e) = (out.path().join("out"), out.path().join("err"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap());
    let child = cmd.spawn().expect("start tend");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: plain out-parameters; `child` is never waited on elsewhere.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child);
    let run = Run {
        code: if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -1
        },
        stdout: std::fs::read_to_string(o).unwrap(),
        stderr: std::fs::read_to_string(e).unwrap(),
    };
    (run, usage.ru_maxrss)
}

/// A repository with one small file, then a commit adding 200 MB that do
/// not compress (xorshift noise).
fn small_then_big(env: &Env) {
    env.repo.write("small.txt", "small");
    env.repo.commit("small");
}

fn add_big(env: &Env) {
    let mut f = std::fs::File::create(env.repo.path().join("big.bin")).unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..BLOB / chunk.len() {
        for b in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&chunk).unwrap();
    }
    drop(f);
    env.repo.write("small.txt", "small, again");
    env.repo.commit("big");
}

fn assert_bounded(env: &Env, run: &Run, peak: i64) {
    eprintln!("peak resident size {} MiB", peak >> 10);
    assert_eq!(run.code, 3, "the big file is refused: {run:?}");
    assert!(run.all().contains("over the"), "{run:?}");
    assert_eq!(env.read("small.txt"), "small, again");
    assert!(
        peak < LIMIT_KIB,
        "peak resident size {} MiB while fetching a {} MiB blob",
        peak >> 10,
        BLOB >> 20
    );
}

#[test]
fn a_big_blob_from_a_local_repository_is_fetched_in_bounded_memory() {
    let env = Env::new();
    small_then_big(&env);
    assert_eq!(env.tend(&["sync", "--mirror"]).code, 0);
    add_big(&env);
    let (run, peak) = peak_rss(env.cmd(&["sync", "--mirror"]));
    assert_bounded(&env, &run, peak);
}

#[test]
fn a_big_blob_over_https_is_fetched_in_bounded_memory() {
    let Some(server) = HttpsServer::start("tend", "secret") else {
        return;
    };
    let env = Env::new();
    small_then_big(&env);
    server.publish("big.git", env.repo.path());
    let token = env.state.path().join("token");
    std::fs::write(&token, "secret").unwrap();
    let cfg = env.config(&format!(
        "source:\n  auth:\n    token_file: {}\n    ca_file: {}\n",
        token.display(),
        server.ca_file().display()
    ));
    let cmd = |env: &Env| {
        let mut c = util::tend_cmd();
        c.args(["sync", "--mirror", "-c"])
            .arg(&cfg)
            .args(["--repo", &server.url("big.git"), "--root"])
            .arg(env.root())
            .arg("--state-dir")
            .arg(env.state.path());
        c
    };
    let (first, _) = peak_rss(cmd(&env));
    assert_eq!(first.code, 0, "{first:?}");
    add_big(&env);
    let (run, peak) = peak_rss(cmd(&env));
    assert_bounded(&env, &run, peak);
}
