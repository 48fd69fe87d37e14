//! A new revision supersedes the retries of the old one: what the new
//! revision declares is applied when it is fetched, and the retry the old
//! failure had scheduled neither writes the old declaration nor comes back.

use super::*;
use crate::ledger::State;

/// Polls every 20 s (18 to 22 with jitter); by then `conf` has failed five
/// times (the fifth at 16.5 s at the latest) and its next retry is due at
/// 27.9 s at the earliest.
const INTERVAL: &str = "20s";

/// Waits for the fifth failure of `conf`; returns when its next retry is
/// due, after the loop started.
async fn fifth_failure(host: &Host, d: &Daemon) -> Duration {
    until(secs(18.0), "five failures before the poll", || {
        host.record(CONF).is_some_and(|r| r.attempts == 5)
    })
    .await;
    let due = d.since_start(host.record(CONF).unwrap().next_retry.unwrap());
    assert!(
        due > secs(22.0) + STEP,
        "the retry is due after the poll: {due:?}"
    );
    due
}

/// How long until the poll has surely come.
fn by_the_poll(d: &Daemon) -> Duration {
    secs(22.0) + 2 * STEP - d.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_changed_declaration_is_applied_and_the_old_retry_does_not_write_it() {
    let host = Host::new();
    host.repo.declare(&[("conf", "v1\n")], "v1");
    host.obstruct("conf");
    let (d, run) = host.start(INTERVAL, "resync: 1h");
    run.beside(async {
        let due = fifth_failure(&host, &d).await;
        host.repo.declare(&[("conf", "v2\n")], "v2");
        host.clear("conf");
        until(by_the_poll(&d), "the new revision applied", || {
            host.read("conf").as_deref() == Some("v2\n") && is(&host.record(CONF), State::InSync)
        })
        .await;
        let applied = d.elapsed();
        assert!(
            applied >= secs(18.0) && applied < due,
            "at the poll: {applied:?}"
        );
        let record = host.record(CONF).unwrap();
        assert_eq!(
            (record.state, record.attempts, record.next_retry),
            (State::InSync, 0, None)
        );
        idle().await;
        let writes = d.writes();
        elapse_to(&d, due + secs(5.0)).await;
        assert_eq!(host.read("conf").as_deref(), Some("v2\n"));
        assert_eq!(d.writes(), writes, "the old retry wrote nothing");
        let record = host.record(CONF).unwrap();
        assert_eq!((record.state, record.attempts), (State::InSync, 0));
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_resource_a_new_revision_removes_is_not_retried() {
    let host = Host::new();
    let others = [("one", "1\n"), ("two", "2\n")];
    host.repo
        .declare(&[("conf", "v1\n"), others[0], others[1]], "three files");
    host.obstruct("conf");
    let (d, run) = host.start(INTERVAL, "resync: 1h");
    run.beside(async {
        let due = fifth_failure(&host, &d).await;
        assert_eq!(host.read("one").as_deref(), Some("1\n"));
        host.repo.declare(&others, "conf removed");
        host.clear("conf");
        until(by_the_poll(&d), "conf forgotten", || {
            host.record(CONF).is_none()
        })
        .await;
        assert!(d.elapsed() < due);
        idle().await;
        let writes = d.writes();
        elapse_to(&d, due + secs(5.0)).await;
        assert!(
            !host.at("conf").exists(),
            "the old declaration is not written"
        );
        assert!(host.record(CONF).is_none(), "nor retried");
        assert_eq!(d.writes(), writes);
        assert_eq!(host.read("two").as_deref(), Some("2\n"));
    })
    .await;
}
