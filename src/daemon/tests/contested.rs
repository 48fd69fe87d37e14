//! Another writer that keeps overruling tend: past
//! `policy.contested.corrections` corrections inside the window the
//! resource is Contested and left alone; once the window has passed over
//! those corrections it is corrected again and back to normal.

use super::*;
use crate::ledger::State;

#[tokio::test(start_paused = true)]
async fn drift_repeated_inside_the_window_is_contested_until_the_window_passes() {
    let host = Host::new();
    host.repo.declare(&[("conf", "v1\n")], "v1");
    let window = Duration::from_secs(60);
    let (d, run) = host.start("1h", "resync: 1h, contested: {corrections: 2, window: 1m}");
    let theirs = || {
        host.write("conf", "theirs\n");
        d.changed(&[CONF]);
    };
    let ours = || host.read("conf").as_deref() == Some("v1\n");
    run.beside(async {
        until(secs(1.0), "the first pass", ours).await;
        for n in 1..=2 {
            elapse(secs(1.0)).await;
            theirs();
            // The file is written before the pass records it: both.
            until(secs(1.0), "corrected and recorded", || {
                ours() && host.record(CONF).is_some_and(|r| r.corrections.len() == n)
            })
            .await;
            assert_eq!(host.record(CONF).unwrap().corrections.len(), n);
        }
        elapse(secs(1.0)).await;
        theirs();
        until(secs(1.0), "contested", || {
            is(&host.record(CONF), State::Contested)
        })
        .await;
        let contested_at = d.elapsed();
        assert_eq!(host.read("conf").as_deref(), Some("theirs\n"));
        let record = host.record(CONF).unwrap();
        assert!(record.reason.unwrap().contains("contested"));
        let oldest = d.since_start(record.corrections[0]);
        // Looked at again a window later: left alone until then.
        elapse_to(&d, contested_at + window - STEP).await;
        assert_eq!(host.read("conf").as_deref(), Some("theirs\n"));
        assert!(is(&host.record(CONF), State::Contested));
        until(secs(1.0), "corrected once the window passed", || {
            ours() && is(&host.record(CONF), State::InSync)
        })
        .await;
        let corrected_at = d.elapsed();
        assert!(corrected_at >= oldest + window);
        assert!(corrected_at <= contested_at + window + 2 * STEP);
        let record = host.record(CONF).unwrap();
        assert_eq!(record.state, State::InSync);
        assert_eq!(record.corrections.len(), 1, "the old ones left the window");
        // Back to normal: the next drift is corrected at once.
        elapse(secs(1.0)).await;
        theirs();
        until(2 * STEP, "corrected at once", ours).await;
        assert!(is(&host.record(CONF), State::InSync));
    })
    .await;
}
