//! A write that fails for a reason that passes is retried at the backoff's
//! times, each later than the one before, and converges at the first retry
//! after the reason is gone; then nothing is looked at again.

use super::*;
use crate::ledger::State;
use crate::reconcile::backoff;

#[tokio::test(start_paused = true)]
async fn a_failing_write_is_retried_with_growing_backoff_until_it_converges() {
    let host = Host::new();
    host.repo.declare(&[("conf", "v1\n")], "v1");
    host.obstruct("conf");
    let (d, run) = host.start("1h", "resync: 1h");
    run.beside(async {
        until(secs(1.0), "the first write fails", || {
            is(&host.record(CONF), State::Failed)
        })
        .await;
        let first = host.record(CONF).unwrap();
        assert_eq!(first.attempts, 1, "{first:?}");
        assert!(
            first.reason.as_deref().unwrap().contains("unmanaged"),
            "{first:?}"
        );
        let mut last = (Duration::ZERO, first);
        let mut gaps = Vec::new();
        for attempts in 2..=5 {
            let (at, before) = &last;
            let due = d.since_start(before.next_retry.expect("a failure has a retry time"));
            // Its time is the backoff of the attempts so far, jittered.
            let wait = due - *at;
            let delay = backoff::delay(before.attempts);
            assert!(
                wait >= delay.mul_f64(0.89) && wait <= delay.mul_f64(1.11),
                "retry {attempts} after {wait:?}, the backoff is {delay:?}"
            );
            // Not looked at again before then.
            elapse_to(&d, due - STEP).await;
            assert_eq!(host.record(CONF).unwrap().attempts, attempts - 1);
            until(secs(1.0), "the retry", || {
                host.record(CONF).is_some_and(|r| r.attempts == attempts)
            })
            .await;
            let retried_at = d.elapsed();
            assert!(retried_at <= due + 2 * STEP, "{retried_at:?} {due:?}");
            gaps.push(wait);
            last = (retried_at, host.record(CONF).unwrap());
        }
        assert!(gaps[0] >= backoff::BASE.mul_f64(0.9), "{gaps:?}");
        assert!(gaps.windows(2).all(|w| w[1] > w[0]), "{gaps:?}");
        assert_eq!(host.read("conf"), None, "never written while obstructed");

        // The cause goes: the next retry, at its time, converges.
        host.clear("conf");
        let due = d.since_start(last.1.next_retry.unwrap());
        elapse_to(&d, due - STEP).await;
        assert!(is(&host.record(CONF), State::Failed));
        until(secs(1.0), "converged at the retry", || {
            host.read("conf").as_deref() == Some("v1\n") && is(&host.record(CONF), State::InSync)
        })
        .await;
        assert!(d.elapsed() <= due + 2 * STEP);
        let done = host.record(CONF).unwrap();
        assert_eq!(
            (done.state, done.attempts, done.next_retry),
            (State::InSync, 0, None)
        );
        // Converged, it waits for a change: minutes go by without a pass.
        idle().await;
        let (reconciled, writes) = (d.reconciled(), d.writes());
        elapse(Duration::from_secs(300)).await;
        assert_eq!((d.reconciled(), d.writes()), (reconciled, writes));
    })
    .await;
}
