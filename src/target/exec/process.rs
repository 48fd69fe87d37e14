//! One plugin process: spawned from the local config's command line,
//! requests written to its stdin, lines read from its stdout by a thread,
//! its stderr copied to tend's log, every call bounded by a timeout.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::protocol::{self, Incoming, ObjectRef, MAX_LINE};

/// Why a call did not return a result.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The plugin answered with a JSON-RPC error; the session is fine.
    Rpc(protocol::RpcError),
    /// The session cannot be trusted any more (it exited, hung, or wrote
    /// something that is not the protocol); it has to be restarted.
    Broken(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Rpc(e) => write!(f, "{e}"),
            CallError::Broken(reason) => f.write_str(reason),
        }
    }
}

/// What the stdout reader hands to the caller.
enum Msg {
    Line(Incoming),
    Malformed(String),
    Closed,
}

/// Called with the objects of each `changed` notification.
pub type OnChanged = Arc<dyn Fn(Vec<ObjectRef>) + Send + Sync>;
/// Called when the plugin's output ends without tend having stopped it.
pub type OnExit = Arc<dyn Fn() + Send + Sync>;

pub struct Plugin {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Receiver<Msg>,
    next_id: u64,
    /// Set before tend stops the plugin, so the end of its output is not
    /// reported as a crash.
    stopping: Arc<AtomicBool>,
}

/// Reads one line of at most `max` bytes; `None` at end of output.
fn read_line(r: &mut impl BufRead, max: usize) -> std::io::Result<Option<Result<Vec<u8>, ()>>> {
    let mut buf = Vec::new();
    let n = r
        .by_ref()
        .take(max as u64 + 1)
        .read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.len() > max && !buf.ends_with(b"\n") {
        return Ok(Some(Err(())));
    }
    while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        buf.pop();
    }
    Ok(Some(Ok(buf)))
}

fn describe(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => format!("the plugin exited ({s})"),
        None => "the plugin closed its output".into(),
    }
}

impl Plugin {
    /// Starts `command` (never a shell). `label` names it in logs.
    pub fn spawn(
        label: &str,
        command: &[String],
        on_changed: OnChanged,
        on_exit: Option<OnExit>,
    ) -> std::io::Result<Plugin> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| std::io::Error::other("the command is empty"))?;
        let mut cmd = Command::new(program);
        crate::open_files::put_back_for(&mut cmd);
        let mut child = cmd
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, replies) = mpsc::channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let stop_flag = stopping.clone();
        std::thread::Builder::new()
            .name(format!("plugin-{label}-out"))
            .spawn(move || {
                let mut r = BufReader::new(stdout);
                loop {
                    let line = match read_line(&mut r, MAX_LINE) {
                        Ok(Some(Ok(line))) => line,
                        Ok(Some(Err(()))) => {
                            let _ = tx.send(Msg::Malformed(format!(
                                "malformed output: a line longer than {MAX_LINE} bytes"
                            )));
                            return;
                        }
                        Ok(None) | Err(_) => break,
                    };
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let msg = match std::str::from_utf8(&line) {
                        Err(_) => {
                            Msg::Malformed("malformed output: a line that is not UTF-8".into())
                        }
                        Ok(text) => match protocol::parse_line(text) {
                            Ok(Incoming::Changed(objects)) => {
                                on_changed(objects);
                                continue;
                            }
                            Ok(Incoming::Notification(method)) => {
                                tracing::debug!(method, "ignoring an unknown plugin notification");
                                continue;
                            }
                            Ok(reply) => Msg::Line(reply),
                            Err(e) => Msg::Malformed(e.to_string()),
                        },
                    };
                    if tx.send(msg).is_err() {
                        return;
                    }
                }
                let _ = tx.send(Msg::Closed);
                if !stop_flag.load(Ordering::SeqCst) {
                    if let Some(f) = on_exit {
                        f();
                    }
                }
            })?;
        let plugin_label = label.to_string();
        std::thread::Builder::new()
            .name(format!("plugin-{label}-err"))
            .spawn(move || {
                let mut r = BufReader::new(stderr);
                while let Ok(Some(line)) = read_line(&mut r, 64 << 10) {
                    let text = match &line {
                        Ok(b) => String::from_utf8_lossy(b).into_owned(),
                        Err(()) => "(an overlong line)".into(),
                    };
                    tracing::info!(plugin = %plugin_label, "{text}");
                }
            })?;
        Ok(Plugin {
            stdin: child.stdin.take(),
            child,
            replies,
            next_id: 1,
            stopping,
        })
    }

    /// Writes one line to the plugin's stdin.
    pub fn send_line(&mut self, line: &str) -> Result<(), CallError> {
        let result = match self.stdin.as_mut() {
            Some(stdin) => stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.write_all(b"\n"))
                .and_then(|()| stdin.flush()),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        result.map_err(|e| {
            let status = self.exit_status(Duration::from_millis(200));
            CallError::Broken(format!(
                "cannot write to the plugin: {e}; {}",
                describe(status)
            ))
        })
    }

    /// The next response (or JSON-RPC error) the plugin writes, within
    /// `timeout` of `start`.
    pub fn next_reply(
        &mut self,
        start: Instant,
        timeout: Duration,
        method: &str,
    ) -> Result<Incoming, CallError> {
        let left = (start + timeout).saturating_duration_since(Instant::now());
        match self.replies.recv_timeout(left) {
            Ok(Msg::Line(reply)) => Ok(reply),
            Ok(Msg::Malformed(e)) => Err(CallError::Broken(e)),
            Ok(Msg::Closed) | Err(RecvTimeoutError::Disconnected) => {
                let status = self.exit_status(Duration::from_millis(500));
                Err(CallError::Broken(describe(status)))
            }
            Err(RecvTimeoutError::Timeout) => Err(CallError::Broken(format!(
                "no answer to `{method}` within {}",
                humantime::format_duration(timeout)
            ))),
        }
    }

    /// Sends a request and waits for its answer.
    pub fn call(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let id = self.next_id;
        self.next_id += 1;
        let start = Instant::now();
        self.send_line(&protocol::request(id, method, params))?;
        match self.next_reply(start, timeout, method)? {
            Incoming::Response {
                id: Some(got),
                result,
            } if got == id => result.map_err(CallError::Rpc),
            Incoming::Response {
                id: None,
                result: Err(e),
            } => Err(CallError::Broken(format!(
                "the plugin could not read tend's `{method}` request: {e}"
            ))),
            // Calls are one at a time, so any other answer means the
            // session is out of step.
            other => Err(CallError::Broken(format!(
                "malformed output: an answer that does not belong to `{method}`: {other:?}"
            ))),
        }
    }

    /// The exit status, waiting up to `wait` for the process to end.
    pub fn exit_status(&mut self, wait: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + wait;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => return None,
            }
        }
    }

    /// Asks the plugin to stop (`shutdown`, then end of input), and kills it
    /// if it has not exited after `grace`.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.stopping.store(true, Ordering::SeqCst);
        if self.exit_status(Duration::ZERO).is_none() {
            let _ = self.call("shutdown", Value::Null, grace);
        }
        self.finish(grace)
    }

    /// Closes the plugin's input and waits up to `grace` for it to exit,
    /// then kills it.
    pub fn finish(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.stopping.store(true, Ordering::SeqCst);
        self.stdin = None;
        match self.exit_status(grace) {
            Some(s) => Some(s),
            None => {
                self.kill();
                None
            }
        }
    }

    /// Kills the process and reaps it.
    pub fn kill(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        if self.exit_status(Duration::ZERO).is_none() {
            self.kill();
        } else {
            self.stopping.store(true, Ordering::SeqCst);
        }
    }
}
