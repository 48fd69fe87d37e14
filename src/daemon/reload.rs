//! SIGHUP: the config is read again (file, and the flags and environment
//! the daemon started with) and checked; what can change while running is
//! taken, what cannot is kept and named as needing a restart. A config that
//! does not resolve changes nothing.

use std::fmt::Debug;

use super::driver::Loop;
use crate::config::Settings;
use crate::reconcile;

/// Reads and checks the config as at start, without starting anything.
pub type ReadConfig = Box<dyn Fn() -> Result<Settings, String> + Send + Sync>;

/// The settings to run with after a reload, and what differs.
#[derive(Debug)]
pub struct Plan {
    pub settings: Settings,
    /// Sections taken from the new config.
    pub changed: Vec<&'static str>,
    /// Settings that differ but are kept as they were until a restart.
    pub needs_restart: Vec<&'static str>,
}

/// Compared through their debug form: every settings type has one, and
/// it shows every field.
fn differ<T: Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") != format!("{b:?}")
}

/// What of `new` the running daemon can take from `old`.
pub fn plan(old: &Settings, mut new: Settings) -> Plan {
    let mut needs_restart = Vec::new();
    // Bound once at start: the state dir (and its lock), the listener with
    // its secrets, the log format.
    if new.state_dir != old.state_dir {
        needs_restart.push("state_dir");
        new.state_dir = old.state_dir.clone();
    }
    if differ(&new.server, &old.server) {
        needs_restart.push("server");
        new.server = old.server.clone();
    }
    if new.log_format != old.log_format {
        needs_restart.push("log.format");
        new.log_format = old.log_format.clone();
    }
    // libgit2's timeouts and certificates are process-wide, set before any
    // thread started.
    if new.source.timeout != old.source.timeout {
        needs_restart.push("source.timeout");
        new.source.timeout = old.source.timeout;
    }
    if new.source.auth.ca_file != old.source.auth.ca_file {
        needs_restart.push("source.auth.ca_file");
        new.source.auth.ca_file = old.source.auth.ca_file.clone();
    }
    // The elector runs with the election it started in; the role it sets
    // stays the one the targets and the pass read.
    if differ(&new.ha, &old.ha) {
        needs_restart.push("ha");
        new.ha = old.ha.clone();
    }
    let tls = crate::source::may_use_tls;
    if tls(&new.source.repo) && !tls(&old.source.repo) {
        // Started without the system's certificates (no remote needed
        // them): the whole source stays.
        needs_restart.push("source (a repository over https)");
        new.source = old.source.clone();
    }
    let mut changed = Vec::new();
    for (name, differs) in [
        ("source", differ(&new.source, &old.source)),
        ("targets", differ(&new.targets, &old.targets)),
        ("hooks", differ(&new.hooks, &old.hooks)),
        ("policy", differ(&new.policy, &old.policy)),
        ("log.level", new.log_level != old.log_level),
    ] {
        if differs {
            changed.push(name);
        }
    }
    Plan {
        settings: new,
        changed,
        needs_restart,
    }
}

/// Reads the config again and takes what it can, then fetches and runs a
/// full pass (with the new settings, the current revision is declared
/// anew). A config that does not resolve, or whose targets or source
/// cannot be opened, is refused whole: the running one stays. The daemon
/// never ends here.
pub(super) async fn reload(lp: &mut Loop, read: &ReadConfig) {
    tracing::info!("reloading: reading the config again");
    match read() {
        Err(e) => {
            tracing::error!(error = %e, "config refused; the running config stays");
        }
        Ok(new) => {
            let plan = plan(&lp.settings, new);
            for setting in &plan.needs_restart {
                tracing::warn!(
                    setting,
                    "changed in the config but kept as it was: needs restart"
                );
            }
            match take(lp, plan.settings).await {
                Ok(()) => tracing::info!(
                    changed = ?plan.changed,
                    needs_restart = ?plan.needs_restart,
                    "config reloaded"
                ),
                Err(e) => {
                    tracing::error!(error = %e, "config refused; the running config stays")
                }
            }
        }
    }
    lp.fetch_failures = 0;
    let fetched = lp
        .blocking(|ctx, rec| reconcile::fetch(ctx, rec, ctx.clock.now()))
        .await;
    super::publish::fetch(&lp.shared.metrics, fetched.is_ok());
    let fresh = fetched.is_ok();
    let id = match fetched {
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!(error = %e, "fetch failed; the last good state stays");
            match lp.shared.current() {
                Some(rev) => Some(rev.id),
                None => lp
                    .blocking(|ctx, _| ctx.mirror.resolved())
                    .await
                    .ok()
                    .flatten(),
            }
        }
    };
    if let Some(id) = id {
        lp.admit_or_rerun(id, fresh, true).await;
    }
}

/// Swaps in a context built for `settings` and follows it: the targets'
/// subscriptions (a target built anew, or a change of `policy.watch`,
/// begins its watch again), the level, dry run.
async fn take(lp: &mut Loop, settings: Settings) -> Result<(), String> {
    let s = settings.clone();
    let targets = lp
        .with_worker(move |w| -> Result<_, String> {
            let ctx = w.ctx.rebuild(s).map_err(|e| e.to_string())?;
            w.ctx = ctx;
            w.rec
                .set_audit_rotation(w.ctx.settings.policy.audit_rotation());
            Ok(w.ctx.targets.clone())
        })
        .await?;
    if lp.watch.follow(&targets, settings.policy.watch) {
        lp.watched = None;
    }
    for name in targets.keys() {
        lp.shared.metrics.writes(name, 0);
    }
    if let Err(e) = crate::logging::set_level(&settings.log_level) {
        tracing::warn!(error = %e, "cannot change the log level");
    }
    lp.opts.dry_run = settings.policy.dry_run;
    // Declared anew: the next revision is not reconciled from this one.
    lp.settled = None;
    lp.settings = settings;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn settings(config: &str, args: &[&str]) -> Settings {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tend.yaml");
        std::fs::write(&p, config).unwrap();
        let mut argv = vec!["tend", "run", "-c", p.to_str().unwrap()];
        argv.extend_from_slice(args);
        let cli = crate::cli::Cli::parse_from(argv);
        crate::config::resolve(&cli.command.flags()).unwrap()
    }

    const BASE: &str = "source: {repo: /srv/a, interval: 1m, timeout: 2m}\n\
        targets: {files: {type: files, root: /srv/root}}\n\
        state_dir: /var/lib/one\nserver: {listen: 127.0.0.1:9420}\n";

    #[test]
    fn the_same_config_changes_nothing() {
        let old = settings(BASE, &[]);
        let p = plan(&old, settings(BASE, &[]));
        assert!(p.changed.is_empty(), "{p:?}");
        assert!(p.needs_restart.is_empty(), "{p:?}");
    }

    #[test]
    fn the_election_is_kept_until_a_restart() {
        let old = settings(BASE, &[]);
        let with_ha = format!(
            "{BASE}ha: {{etcd: {{endpoints: [\"http://127.0.0.1:2379\"]}}, election: e, lease_ttl: 3s}}\n"
        );
        let p = plan(&old, settings(&with_ha, &[]));
        assert_eq!(p.needs_restart, ["ha"]);
        assert!(p.settings.ha.is_none(), "{p:?}");
        let old = settings(&with_ha, &[]);
        let p = plan(&old, settings(&with_ha.replace("3s", "5s"), &[]));
        assert_eq!(p.needs_restart, ["ha"]);
        assert_eq!(p.settings.ha.unwrap().lease_ttl.as_secs(), 3);
    }

    #[test]
    fn live_sections_are_taken() {
        let old = settings(BASE, &[]);
        let new = settings(
            "source: {repo: /srv/b, interval: 5s, timeout: 2m}\n\
             targets: {files: {type: files, root: /srv/other}}\n\
             hooks: {h: {run: [true]}}\npolicy: {prune: false}\n\
             log: {level: debug}\n\
             state_dir: /var/lib/one\nserver: {listen: 127.0.0.1:9420}\n",
            &[],
        );
        let p = plan(&old, new);
        assert_eq!(
            p.changed,
            ["source", "targets", "hooks", "policy", "log.level"]
        );
        assert!(p.needs_restart.is_empty(), "{p:?}");
        assert_eq!(p.settings.source.repo, "/srv/b");
        assert!(!p.settings.policy.prune);
        assert_eq!(p.settings.log_level, "debug");
    }

    #[test]
    fn what_is_bound_at_start_is_kept_and_named() {
        let old = settings(BASE, &[]);
        let new = settings(
            "source: {repo: /srv/a, interval: 1m, timeout: 9s}\n\
             targets: {files: {type: files, root: /srv/root}}\n\
             state_dir: /var/lib/two\nserver: {listen: 127.0.0.1:9999}\n\
             log: {format: json}\n",
            &[],
        );
        let p = plan(&old, new);
        assert_eq!(
            p.needs_restart,
            ["state_dir", "server", "log.format", "source.timeout"]
        );
        assert!(p.changed.is_empty(), "{p:?}");
        assert_eq!(p.settings.state_dir, old.state_dir);
        assert_eq!(p.settings.server.listen, "127.0.0.1:9420");
        assert_eq!(p.settings.source.timeout, old.source.timeout);
    }

    #[test]
    fn a_first_https_repository_needs_a_restart() {
        let old = settings(BASE, &[]);
        let new = settings(
            &BASE.replace("/srv/a", "https://git.example.com/a.git"),
            &[],
        );
        let p = plan(&old, new);
        assert_eq!(p.settings.source.repo, "/srv/a");
        assert_eq!(p.needs_restart, ["source (a repository over https)"]);
    }

    #[test]
    fn flags_given_at_start_still_win() {
        let old = settings(BASE, &["--interval", "7s"]);
        let p = plan(
            &old,
            settings(&BASE.replace("1m", "3m"), &["--interval", "7s"]),
        );
        assert!(p.changed.is_empty(), "{p:?}");
        assert_eq!(p.settings.source.interval.as_secs(), 7);
    }
}
