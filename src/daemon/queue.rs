//! The work queue: keyed by resource identity, de-duplicated (a key waits
//! once, at its earliest due time), and never hands out a key that is still
//! being worked on. Time is tokio's, so tests can pause the clock.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use tokio::time::Instant;

use crate::model::ResourceId;
use crate::reconcile::NextStep;

#[derive(Debug, Default)]
pub struct Queue {
    due: HashMap<ResourceId, Instant>,
    by_time: BTreeSet<(Instant, ResourceId)>,
    running: HashSet<ResourceId>,
    /// Keys scheduled while running: they wait until the run ends.
    deferred: BTreeMap<ResourceId, Instant>,
}

impl Queue {
    pub fn new() -> Queue {
        Queue::default()
    }

    /// Schedules `key` at `at`; an earlier schedule of the same key wins.
    pub fn schedule(&mut self, key: ResourceId, at: Instant) {
        if self.running.contains(&key) {
            let e = self.deferred.entry(key).or_insert(at);
            *e = (*e).min(at);
            return;
        }
        match self.due.get(&key) {
            Some(&prev) if prev <= at => {}
            Some(&prev) => {
                self.by_time.remove(&(prev, key.clone()));
                self.by_time.insert((at, key.clone()));
                self.due.insert(key, at);
            }
            None => {
                self.by_time.insert((at, key.clone()));
                self.due.insert(key, at);
            }
        }
    }

    pub fn schedule_now(&mut self, key: ResourceId) {
        self.schedule(key, Instant::now());
    }

    /// Applies a reconcile's [`NextStep`] to its key.
    pub fn after(&mut self, key: ResourceId, step: NextStep) {
        if let Some(d) = step.requeue_after() {
            self.schedule(key, Instant::now() + d);
        }
    }

    /// Takes every key due by `now` (at most `max`), marking them running.
    pub fn take_due(&mut self, now: Instant, max: usize) -> Vec<ResourceId> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some((at, _)) = self.by_time.first() else {
                break;
            };
            if *at > now {
                break;
            }
            let (_, key) = self.by_time.pop_first().expect("checked non-empty");
            self.due.remove(&key);
            self.running.insert(key.clone());
            out.push(key);
        }
        out
    }

    /// Ends the run of `key`; a schedule made meanwhile now takes effect.
    pub fn done(&mut self, key: &ResourceId) {
        self.running.remove(key);
        if let Some(at) = self.deferred.remove(key) {
            self.schedule(key.clone(), at);
        }
    }

    /// When the next key falls due.
    pub fn next_due(&self) -> Option<Instant> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Keys waiting (not running).
    pub fn depth(&self) -> usize {
        self.due.len() + self.deferred.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn id(s: &str) -> ResourceId {
        ResourceId::new("files", "file", s)
    }

    #[tokio::test(start_paused = true)]
    async fn deduplicates_and_keeps_the_earliest_time() {
        let mut q = Queue::new();
        let t0 = Instant::now();
        q.schedule(id("a"), t0 + Duration::from_secs(10));
        q.schedule(id("a"), t0 + Duration::from_secs(5));
        q.schedule(id("a"), t0 + Duration::from_secs(20));
        assert_eq!(q.depth(), 1);
        assert_eq!(q.next_due(), Some(t0 + Duration::from_secs(5)));
        assert!(q.take_due(Instant::now(), 10).is_empty());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(q.take_due(Instant::now(), 10), vec![id("a")]);
        assert_eq!(q.depth(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_key_is_never_handed_out_twice() {
        let mut q = Queue::new();
        q.schedule_now(id("a"));
        let first = q.take_due(Instant::now(), 10);
        assert_eq!(first, vec![id("a")]);
        // An event for the same key while it runs waits for the run to end.
        q.schedule_now(id("a"));
        assert!(q.take_due(Instant::now(), 10).is_empty());
        q.done(&id("a"));
        assert_eq!(q.take_due(Instant::now(), 10), vec![id("a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn actions_requeue_or_wait() {
        let mut q = Queue::new();
        q.after(id("waits"), NextStep::await_change());
        q.after(id("retries"), NextStep::retry_after(Duration::from_secs(4)));
        assert_eq!(q.depth(), 1);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(q.take_due(Instant::now(), 10).is_empty());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(q.take_due(Instant::now(), 10), vec![id("retries")]);
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_batches_in_due_order() {
        let mut q = Queue::new();
        let t0 = Instant::now();
        for (i, name) in ["c", "a", "b"].iter().enumerate() {
            q.schedule(id(name), t0 + Duration::from_millis(i as u64));
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(q.take_due(Instant::now(), 2), vec![id("c"), id("a")]);
        assert_eq!(q.take_due(Instant::now(), 2), vec![id("b")]);
    }
}
