//! The writer lock: exclusive across open files and processes, naming its
//! holder, released on drop.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::ledger::{LedgerError, StateLock};

#[test]
fn a_second_acquire_fails_naming_the_holder_and_drop_releases() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = StateLock::acquire(tmp.path(), "run").unwrap();
    // A second open file description in the same process conflicts too.
    let err = StateLock::acquire(tmp.path(), "sync").unwrap_err();
    let LedgerError::Locked { ref holder } = err else {
        panic!("{err}")
    };
    assert_eq!(holder, &format!("pid {} (run)", std::process::id()));
    assert_eq!(
        err.to_string(),
        format!("state dir is locked by pid {} (run)", std::process::id())
    );
    drop(lock);
    let again = StateLock::acquire(tmp.path(), "sync").unwrap();
    assert_eq!(
        std::fs::read_to_string(again.path()).unwrap(),
        format!("pid {} (sync)\n", std::process::id())
    );
}

#[test]
fn another_process_holding_the_lock_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("lock");
    // flock(1) takes the same kind of lock; the shell then identifies itself
    // the way tend does.
    let child = Command::new("flock")
        .arg(&path)
        .args(["sh", "-c", "echo \"pid $$ (child)\" > \"$0\"; sleep 30"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    if !crate::test_gate::can_run(child.is_ok(), "flock(1) is missing (util-linux)") {
        return;
    }
    let mut child = child.unwrap();
    let started = Instant::now();
    let err = loop {
        match StateLock::acquire(tmp.path(), "sync") {
            Err(LedgerError::Locked { holder, .. }) if holder.contains("(child)") => break holder,
            Err(LedgerError::Locked { .. }) => {}
            Ok(lock) => drop(lock),
            Err(e) => panic!("{e}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the child never took the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        err.starts_with("pid ") && !err.contains(&std::process::id().to_string()),
        "{err}"
    );
    // The shell and its sleep inherit the locked file: end the whole group.
    let group = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process_group(group, rustix::process::Signal::KILL).unwrap();
    child.wait().unwrap();
    // The kernel releases the lock once its last holder is dead; the
    // grandchildren die a moment after the child is reaped. (Left alone they
    // would hold it for the whole `sleep 30`, longer than this waits.)
    let started = Instant::now();
    while StateLock::acquire(tmp.path(), "sync").is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the lock outlived its holders"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn flock_from_another_process_sees_our_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = StateLock::acquire(tmp.path(), "run").unwrap();
    let try_lock = || {
        Command::new("flock")
            .arg("-n")
            .arg(lock.path())
            .arg("true")
            .status()
    };
    let status = try_lock();
    if !crate::test_gate::can_run(status.is_ok(), "flock(1) is missing (util-linux)") {
        return;
    }
    let status = status.unwrap();
    assert_eq!(status.code(), Some(1), "another process took a held lock");
    let path = lock.path().to_path_buf();
    drop(lock);
    let status = Command::new("flock")
        .arg("-n")
        .arg(&path)
        .arg("true")
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn removing_the_lock_file_lets_no_second_writer_in_and_the_holder_is_still_named() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = StateLock::acquire(tmp.path(), "run").unwrap();
    std::fs::remove_file(lock.path()).unwrap();
    let err = StateLock::acquire(tmp.path(), "sync").unwrap_err();
    let LedgerError::Locked { holder } = err else {
        panic!("{err}")
    };
    // The note went with the file; /proc/locks names the holder.
    assert!(
        holder.starts_with(&format!("pid {} (", std::process::id())),
        "{holder}"
    );
    assert!(
        !tmp.path().join("lock").exists(),
        "a contender creates nothing"
    );
    drop(lock);
    let again = StateLock::acquire(tmp.path(), "sync").unwrap();
    assert_eq!(
        std::fs::read_to_string(again.path()).unwrap(),
        format!("pid {} (sync)\n", std::process::id())
    );
}
