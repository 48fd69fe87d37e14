//! The event loop on tokio's paused clock: a real Git repository, a real
//! files target and a real state dir, with a context whose wall clock moves
//! with tokio's. Time only passes when every task waits on a timer, and
//! never while a pass runs (tokio does not move a paused clock while a
//! blocking task is out), so each test reads what the loop did at each
//! moment without sleeping.

mod backoff;
mod contested;
mod fetch;
mod pause;
mod plugin;
mod resync;
mod supersede;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::Parser;
use tempfile::TempDir;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::event_loop::{EventLoop, GaveUp, Inputs};
use super::notify::Notifier;
use super::{ReadConfig, Trigger};
use crate::ledger::{Ledger, ResourceRecord, StateLock};
use crate::metrics::Metrics;
use crate::model::ResourceId;
use crate::reconcile::{self, Clock, Control};

/// How finely a test looks at what the loop did: a condition is seen at
/// most this long after it came true.
const STEP: Duration = Duration::from_millis(10);

/// Wall time that moves with tokio's clock: `base` when the test began,
/// plus the time tokio has let pass since.
struct PausedClock {
    base: SystemTime,
    start: Instant,
}

impl Clock for PausedClock {
    fn now(&self) -> SystemTime {
        self.base + self.start.elapsed()
    }
}

/// A Git repository built with the `git` command line, as a user would.
struct Repo {
    dir: PathBuf,
}

impl Repo {
    fn init(dir: PathBuf) -> Repo {
        std::fs::create_dir_all(&dir).unwrap();
        let repo = Repo { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        repo.git(&["config", "user.name", "Test"]);
        repo.git(&["config", "user.email", "test@example.com"]);
        repo.git(&["config", "commit.gpgsign", "false"]);
        repo
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(&self.dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &self.dir)
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Declares the files `(path, content)` in one declaration file, in
    /// place of what it held, and commits.
    fn declare(&self, files: &[(&str, &str)], message: &str) {
        let yaml: Vec<String> = files
            .iter()
            .map(|(path, content)| format!("kind: file\npath: {path}\ncontent: {content:?}\n"))
            .collect();
        std::fs::write(self.dir.join("site.tend.yaml"), yaml.join("---\n")).unwrap();
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
    }
}

/// A host under test: its repository, the files target's root and the
/// state dir, all in one temp dir.
pub(super) struct Host {
    _dir: TempDir,
    repo: Repo,
    root: PathBuf,
    state: PathBuf,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::Builder::new()
            .prefix("tend-paused-")
            .tempdir()
            .unwrap();
        let root = dir.path().join("root");
        let state = dir.path().join("state");
        std::fs::create_dir_all(&root).unwrap();
        Host {
            repo: Repo::init(dir.path().join("repo")),
            root,
            state,
            _dir: dir,
        }
    }

    fn at(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The live content at `rel`; `None` when there is no file to read.
    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.at(rel)).ok()
    }

    fn write(&self, rel: &str, content: &str) {
        std::fs::write(self.at(rel), content).unwrap();
    }

    /// Makes `rel` a directory holding a file tend does not manage: a file
    /// declared there cannot be written (a transient failure, retried with
    /// backoff) until it goes.
    fn obstruct(&self, rel: &str) {
        let _ = std::fs::remove_file(self.at(rel));
        std::fs::create_dir_all(self.at(rel)).unwrap();
        std::fs::write(self.at(rel).join("unmanaged"), "someone else's\n").unwrap();
    }

    fn clear(&self, rel: &str) {
        std::fs::remove_dir_all(self.at(rel)).unwrap();
    }

    /// The ledger as `tend pause` opens it, beside the running loop.
    fn ledger(&self) -> Ledger {
        Ledger::open(&self.state).unwrap()
    }

    fn record(&self, id: &str) -> Option<ResourceRecord> {
        let ledger = Ledger::open_read_only(&self.state).ok()?;
        ledger.resources().unwrap().into_iter().find(|r| r.id == id)
    }

    /// Settings as `tend run -c FILE` resolves them: the repository polled
    /// every `interval`, the root, the state dir, and the watcher off with
    /// the rest of the policy in `policy` (flow-style YAML entries).
    fn settings(&self, interval: &str, policy: &str) -> crate::config::Settings {
        self.settings_with(interval, policy, More::default())
    }

    /// [`Host::settings`], with more entries in `source:` and `targets:`.
    fn settings_with(&self, interval: &str, policy: &str, more: More) -> crate::config::Settings {
        let file = self.state.with_extension("yaml");
        let More { source, targets } = more;
        let config = format!(
            "source: {{repo: {:?}, interval: {interval}{source}}}\n\
             targets: {{files: {{type: files, root: {:?}}}{targets}}}\n\
             state_dir: {:?}\npolicy: {{watch: false, {policy}}}\n",
            self.repo.dir, self.root, self.state
        );
        std::fs::write(&file, config).unwrap();
        let cli = crate::cli::Cli::parse_from(["tend", "run", "-c", file.to_str().unwrap()]);
        crate::config::resolve(&cli.command.flags()).unwrap()
    }

    /// Opens the writer as `tend run` does, on a clock that moves with
    /// tokio's, and builds the loop: nothing runs until the test drives it.
    /// The loop starts at the clock's `base` with a fetch and a full pass.
    fn start(&self, interval: &str, policy: &str) -> (Daemon, Running) {
        self.start_with(self.settings(interval, policy))
    }

    /// [`Host::start`] with the settings given.
    fn start_with(&self, settings: crate::config::Settings) -> (Daemon, Running) {
        let (lock, mut ctx, rec) = reconcile::open_writer(settings, "a test").unwrap();
        let clock = Arc::new(PausedClock {
            base: SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000),
            start: Instant::now(),
        });
        ctx.clock = clock.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        let (fetch_tx, fetches) = mpsc::channel(1);
        let stop = Arc::new(Notify::new());
        let events = EventLoop::new(ctx, rec, Arc::new(Control::default()), tx.clone());
        let metrics = events.shared().metrics.clone();
        let inputs = Inputs {
            stop: stop.clone(),
            triggers: rx,
            fetches,
        };
        let read: ReadConfig = Box::new(|| {
            Err(crate::config::ConfigError::one(
                crate::config::Problem::general("", "no config to read again in this test"),
            ))
        });
        let run = async move {
            let notifier = Arc::new(Notifier::silent());
            events.run(notifier, inputs, &read).await
        };
        let daemon = Daemon {
            clock,
            triggers: tx,
            _fetches: fetch_tx,
            metrics,
            _lock: lock,
        };
        let running = Running {
            stop,
            run: Box::pin(run),
        };
        (daemon, running)
    }
}

/// More flow-style entries for a test's config, each starting with `, `.
#[derive(Default)]
pub(super) struct More {
    source: String,
    targets: String,
}

/// What a test sees of the running loop and tells it.
pub(super) struct Daemon {
    clock: Arc<PausedClock>,
    triggers: mpsc::UnboundedSender<Trigger>,
    /// Kept open: the loop waits on fetch requests as it does in `run`.
    _fetches: mpsc::Sender<crate::server::Trigger>,
    metrics: Arc<Metrics>,
    _lock: StateLock,
}

impl Daemon {
    /// Time since the loop started, on tokio's clock.
    fn elapsed(&self) -> Duration {
        self.clock.start.elapsed()
    }

    /// The wall time `at` after the loop started.
    fn at(&self, at: Duration) -> SystemTime {
        self.clock.base + at
    }

    /// When, after the loop started, wall time `t` is.
    fn since_start(&self, t: SystemTime) -> Duration {
        t.duration_since(self.clock.base).unwrap()
    }

    /// Tells the loop these resources may have changed, as the watcher
    /// would.
    fn changed(&self, ids: &[&str]) {
        let ids = ids
            .iter()
            .map(|id| ResourceId::from_string(id.to_string()))
            .collect();
        self.triggers.send(Trigger::Keys(ids)).unwrap();
    }

    /// Resources reconciled so far, one per resource in each pass.
    fn reconciled(&self) -> u64 {
        self.sum("tend_reconcile_total")
    }

    /// Writes made so far, over every target.
    fn writes(&self) -> u64 {
        self.sum("tend_writes_total")
    }

    fn sum(&self, name: &str) -> u64 {
        let text = self.metrics.encode();
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

/// The loop, driven only while a test's script runs beside it.
pub(super) struct Running {
    stop: Arc<Notify>,
    run: Pin<Box<dyn Future<Output = Result<(), GaveUp>>>>,
}

impl Running {
    /// Runs the loop until it ends on its own, as when it gives up.
    async fn until_it_ends(self) -> Result<(), GaveUp> {
        self.run.await
    }

    /// Runs the loop beside `script` until the script ends, then stops the
    /// loop as SIGTERM does and waits for it to end.
    async fn beside(mut self, script: impl Future<Output = ()>) {
        tokio::select! {
            biased;
            ended = &mut self.run => panic!("the loop ended before the test did: {ended:?}"),
            () = script => {}
        }
        self.stop.notify_waiters();
        assert_eq!(self.run.await, Ok(()), "the loop stops when told to");
    }
}

/// Lets `d` of tokio's time pass: the loop's timers fire as they fall due.
async fn elapse(d: Duration) {
    tokio::time::sleep(d).await;
}

/// Lets the loop finish what it is doing: a paused clock moves (here by a
/// millisecond) only once the loop waits on its timers alone, with no pass
/// running. A pass writes files before its records and its records before
/// its metrics, so a script that saw one of them waits here for the rest.
async fn idle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// Lets tokio's time run until `at` after the loop started.
async fn elapse_to(d: &Daemon, at: Duration) {
    tokio::time::sleep_until(d.clock.start + at).await;
}

/// Waits until `cond` holds, looking every [`STEP`] of tokio's time, for
/// at most `within`; panics naming `what` otherwise.
async fn until(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(STEP).await;
    }
}

/// The one resource most tests declare.
const CONF: &str = "files/file/conf";

/// Whether `record` is in `state`.
fn is(record: &Option<ResourceRecord>, state: crate::ledger::State) -> bool {
    record.as_ref().is_some_and(|r| r.state == state)
}

/// Seconds, for readable durations.
fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}
