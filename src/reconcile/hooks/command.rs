//! Command hooks: the only commands tend runs, told the revision and the
//! number of changed resources in `TEND_REVISION` and `TEND_CHANGED`.
//!
//! A hook runs in a session (and process group) of its own. Its end is
//! the end of the command tend started: then tend takes what it wrote and
//! stops reading, so a process it left behind (a service started with
//! `nohup app &`) never holds a pass. Such leftovers are the hook's
//! business and are left running after it exits, whatever its status;
//! they should send their output elsewhere, as tend's end of the pipes is
//! closed. On a timeout, or when tend is stopping, the whole group is
//! ended: SIGTERM, then SIGKILL after [`GRACE`].

use std::io::{ErrorKind, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::Delivery;

/// How long a group told SIGTERM has to end before SIGKILL.
const GRACE: Duration = Duration::from_secs(2);
/// How much of each stream is kept for the log; the rest is read and
/// dropped so a chatty hook never blocks on a full pipe.
const KEEP: usize = 64 << 10;

/// Why a command hook failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("cannot start {program:?}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("exited with {0}")]
    Exited(ExitStatus),
    #[error("ended, tend is stopping")]
    Stopping,
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
    #[error("{0}")]
    Wait(#[source] std::io::Error),
}

/// Runs `argv` until it exits, `timeout` passes or `stop` says tend is
/// stopping, logging its output.
pub(super) fn run(
    name: &str,
    argv: &[String],
    timeout: Duration,
    delivery: &Delivery,
    stop: &dyn Fn() -> bool,
) -> Result<(), CommandError> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env("TEND_REVISION", delivery.revision)
        .env("TEND_CHANGED", delivery.changed.to_string());
    // The command dies with tend: if tend is killed mid-hook, the intent
    // stays pending and the hook runs again after the restart, rather than
    // a half-finished copy racing the next one. (What it started itself
    // lives on: a killed tend can end nothing; a stop ends the group.)
    // Killed between fork and the prctl, tend would never send the signal:
    // the child sees its parent changed and does not start.
    let tend = rustix::process::getpid();
    // SAFETY: setsid, prctl(PR_SET_PDEATHSIG) and getppid are single
    // async-signal-safe system calls that touch no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            // Its own group, so that what it starts can be ended with it.
            rustix::process::setsid().map_err(std::io::Error::from)?;
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
                .map_err(std::io::Error::from)?;
            match rustix::process::getppid() {
                Some(parent) if parent == tend => Ok(()),
                _ => Err(std::io::Error::other("tend is gone")),
            }
        });
    }
    crate::open_files::put_back_for(&mut cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| CommandError::Start {
            program: argv[0].clone(),
            source,
        })?;
    let mut out = Capture::new(child.stdout.take());
    let mut err = Capture::new(child.stderr.take());
    let status = wait(&mut child, timeout, stop, &mut [&mut out, &mut err]);
    // What it wrote before it ended is in the pipes; later output of what
    // it left behind is not waited for.
    out.drain();
    err.drain();
    for (stream, capture) in [("hook stdout", out), ("hook stderr", err)] {
        let text = String::from_utf8_lossy(&capture.kept).into_owned();
        if !text.trim().is_empty() {
            tracing::info!(hook = name, output = text.trim(), "{stream}");
        }
    }
    let status = status?;
    if status.success() {
        Ok(())
    } else {
        Err(CommandError::Exited(status))
    }
}

/// Waits for `child`, reading its output meanwhile; past the timeout or on
/// stop its group is ended.
fn wait(
    child: &mut Child,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
    captures: &mut [&mut Capture],
) -> Result<ExitStatus, CommandError> {
    let deadline = Instant::now() + timeout;
    loop {
        for c in captures.iter_mut() {
            c.drain();
        }
        let why = match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if stop() => CommandError::Stopping,
            Ok(None) if Instant::now() >= deadline => CommandError::TimedOut(timeout),
            Ok(None) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => CommandError::Wait(e),
        };
        end_group(child);
        return Err(why);
    }
}

/// SIGTERM to the child's whole group, SIGKILL to what is left of it after
/// [`GRACE`]; the child is reaped.
fn end_group(child: &mut Child) {
    let Some(group) = Pid::from_raw(child.id() as i32) else {
        return;
    };
    let _ = rustix::process::kill_process_group(group, Signal::TERM);
    let deadline = Instant::now() + GRACE;
    loop {
        // The child reaped, the group is gone once its last member is:
        // while any lives, its id cannot be taken by another group.
        let reaped = matches!(child.try_wait(), Ok(Some(_)));
        if reaped && rustix::process::test_kill_process_group(group).is_err() {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = rustix::process::kill_process_group(group, Signal::KILL);
    let _ = child.wait();
}

/// One output stream, read without blocking.
struct Capture {
    pipe: Option<Box<dyn ReadFd>>,
    kept: Vec<u8>,
}

trait ReadFd: Read + std::os::fd::AsFd {}
impl<T: Read + std::os::fd::AsFd> ReadFd for T {}

impl Capture {
    fn new<P: ReadFd + 'static>(pipe: Option<P>) -> Capture {
        let pipe = pipe.and_then(|p| {
            let flags = rustix::fs::fcntl_getfl(&p).ok()?;
            rustix::fs::fcntl_setfl(&p, flags | rustix::fs::OFlags::NONBLOCK).ok()?;
            Some(Box::new(p) as Box<dyn ReadFd>)
        });
        Capture {
            pipe,
            kept: Vec::new(),
        }
    }

    /// Reads what is there now, at most a few pipefuls, so a process that
    /// never stops writing cannot keep the caller here.
    fn drain(&mut self) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        let mut buf = [0u8; 16 << 10];
        for _ in 0..64 {
            match pipe.read(&mut buf) {
                Ok(0) => {
                    self.pipe = None;
                    return;
                }
                Ok(n) => {
                    let room = KEEP.saturating_sub(self.kept.len());
                    self.kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.pipe = None;
                    return;
                }
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    const DELIVERY: Delivery = Delivery {
        revision: "0123abcd",
        changed: 3,
    };

    fn run_ms(args: &[&str], timeout: u64) -> Result<(), CommandError> {
        let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        run(
            "h",
            &argv,
            Duration::from_millis(timeout),
            &DELIVERY,
            &|| false,
        )
    }

    #[test]
    fn success_failure_and_timeout() {
        assert!(run_ms(&["true"], 5000).is_ok());
        let e = run_ms(&["false"], 5000).unwrap_err();
        assert!(matches!(e, CommandError::Exited(_)), "{e}");
        assert!(e.to_string().contains("exited"), "{e}");
        let started = Instant::now();
        let e = run_ms(&["sleep", "10"], 200).unwrap_err();
        assert!(e.to_string().contains("timed out"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let e = run_ms(&["/nonexistent/hook"], 100).unwrap_err();
        assert!(e.to_string().contains("cannot start"), "{e}");
    }

    #[test]
    fn a_command_is_told_the_revision_and_the_change_count() {
        let script = r#"[ "$TEND_REVISION" = 0123abcd ] && [ "$TEND_CHANGED" = 3 ]"#;
        assert!(run_ms(&["sh", "-c", script], 5000).is_ok());
        let wrong = r#"[ "$TEND_CHANGED" = 4 ]"#;
        assert!(run_ms(&["sh", "-c", wrong], 5000).is_err());
    }

    fn alive(pidfile: &std::path::Path) -> bool {
        let pid = std::fs::read_to_string(pidfile).unwrap();
        let pid = Pid::from_raw(pid.trim().parse().unwrap()).unwrap();
        rustix::process::test_kill_process(pid).is_ok()
    }

    #[test]
    fn a_timeout_ends_the_hooks_whole_group_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let script = format!("sleep 20 & echo $! > {}; wait", pid.display());
        let started = Instant::now();
        let e = run_ms(&["sh", "-c", &script], 300).unwrap_err();
        assert!(matches!(e, CommandError::TimedOut(_)), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(
            (0..100).any(|_| {
                std::thread::sleep(Duration::from_millis(20));
                !alive(&pid)
            }),
            "the grandchild outlived the timeout"
        );
    }

    #[test]
    fn what_a_hook_leaves_running_neither_holds_it_nor_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let script = format!("echo started; sleep 20 & echo $! > {}", pid.display());
        let started = Instant::now();
        assert!(run_ms(&["sh", "-c", &script], 30_000).is_ok());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(alive(&pid), "a hook's service was ended with it");
        let group = std::fs::read_to_string(&pid).unwrap();
        let group = Pid::from_raw(group.trim().parse().unwrap()).unwrap();
        let _ = rustix::process::kill_process(group, Signal::KILL);
    }

    #[test]
    fn stopping_ends_a_running_hook() {
        let started = Instant::now();
        let stop = || started.elapsed() > Duration::from_millis(200);
        let argv: Vec<String> = ["sh", "-c", "sleep 20 & wait"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let e = run("h", &argv, Duration::from_secs(60), &DELIVERY, &stop).unwrap_err();
        assert!(matches!(e, CommandError::Stopping), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
