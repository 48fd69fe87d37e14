//! A source that stops answering is fetched again with growing backoff,
//! never later than the poll interval, while the last good revision stays
//! applied; once it answers, polls are at the interval again. With
//! `max_failures`, a source that never answered ends the daemon after that
//! many retries, at the backoff's times.

use super::*;
use crate::reconcile::backoff;

/// Fetches so far that ended `result` (`ok` or `error`).
fn fetches(d: &Daemon, result: &str) -> u64 {
    let label = format!("result=\"{result}\"");
    d.metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("tend_source_fetch_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Waits for fetch number `n` that ended `result`; returns when it came.
async fn fetch_number(d: &Daemon, result: &str, n: u64, within: Duration) -> Duration {
    until(within, &format!("fetch {n} ending {result}"), || {
        fetches(d, result) >= n
    })
    .await;
    assert_eq!(fetches(d, result), n, "one fetch at a time");
    d.elapsed()
}

/// Whether `gap` is the backoff after `attempts` failures (jittered by a
/// tenth), capped at `cap`, within the steps a test looks by.
fn is_backoff(gap: Duration, attempts: u32, cap: Duration) -> bool {
    let d = backoff::delay(attempts).min(cap);
    gap >= d.mul_f64(0.89).min(cap) - STEP && gap <= d.mul_f64(1.11).min(cap) + 2 * STEP
}

#[tokio::test(start_paused = true)]
async fn failed_fetches_back_off_up_to_the_interval_and_a_good_one_restores_it() {
    let interval = secs(30.0);
    let host = Host::new();
    host.repo.declare(&[("conf", "v1\n")], "v1");
    let (d, run) = host.start("30s", "resync: 1h");
    run.beside(async {
        until(secs(1.0), "the first revision applied", || {
            host.read("conf").as_deref() == Some("v1\n")
        })
        .await;
        assert_eq!((fetches(&d, "ok"), fetches(&d, "error")), (1, 0));
        // The repository goes away: the next poll fails.
        let gone = host.repo.dir.with_extension("gone");
        std::fs::rename(&host.repo.dir, &gone).unwrap();
        let mut at = vec![fetch_number(&d, "error", 1, secs(34.0)).await];
        assert!(at[0] >= secs(27.0) - STEP, "at the poll: {at:?}");
        for n in 2..=7 {
            at.push(fetch_number(&d, "error", n, secs(40.0)).await);
        }
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        for (k, gap) in gaps.iter().enumerate() {
            assert!(
                is_backoff(*gap, k as u32 + 1, interval),
                "retry {} after {gap:?}: {gaps:?}",
                k + 2
            );
        }
        assert!(
            gaps[5] <= interval + STEP,
            "never past the interval: {gaps:?}"
        );
        // The last good state stays applied all along.
        assert_eq!(host.read("conf").as_deref(), Some("v1\n"));
        assert_eq!(fetches(&d, "ok"), 1);

        // It comes back: the next retry fetches, and then the interval.
        std::fs::rename(&gone, &host.repo.dir).unwrap();
        let back = fetch_number(&d, "ok", 2, interval + secs(1.0)).await;
        assert!(back - at[6] <= interval + 2 * STEP);
        elapse(secs(26.0)).await;
        assert_eq!((fetches(&d, "ok"), fetches(&d, "error")), (2, 7));
        let next = fetch_number(&d, "ok", 3, secs(8.0)).await;
        assert!(
            next - back >= interval.mul_f64(0.9) - STEP,
            "{:?}",
            next - back
        );
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_source_that_never_answered_ends_the_daemon_after_max_failures() {
    let host = Host::new();
    std::fs::remove_dir_all(&host.repo.dir).unwrap();
    let more = More {
        source: ", max_failures: 3".into(),
        ..More::default()
    };
    let (d, run) = host.start_with(host.settings_with("1h", "resync: 1h", more));
    let ended = run.until_it_ends().await;
    let why = ended.expect_err("the daemon gives up").to_string();
    assert!(
        why.contains("4 consecutive fetches failed (max_failures 3)"),
        "{why}"
    );
    assert_eq!((fetches(&d, "error"), fetches(&d, "ok")), (4, 0));
    // Three retries, at the backoff of one, two and three failures.
    let waited: Duration = (1..=3).map(backoff::delay).sum();
    let took = d.elapsed();
    assert!(
        took >= waited.mul_f64(0.89) && took <= waited.mul_f64(1.11) + 3 * STEP,
        "gave up after {took:?}, the backoff is {waited:?}"
    );
}
