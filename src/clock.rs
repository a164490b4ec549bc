//! Time for the long-running drivers: the rollout engine, the cluster membership and
//! the endpoints driver take a [`Clock`] instead of reading the system clock.
//!
//! One small struct rather than a trait with a manual implementation: every wait and
//! every monotonic reading already goes through `tokio::time`, so a test that calls
//! `tokio::time::pause()` (or `#[tokio::test(start_paused = true)]`) drives them
//! deterministically, and the only thing tokio's clock cannot stand in for is the
//! wall clock the drivers persist (milliseconds since the Unix epoch in state files
//! and etcd records). [`Clock::system`] reads that from the system clock;
//! [`Clock::tokio_at`] derives it from tokio's clock from a fixed start, so paused time
//! moves it too. A manual clock would add a second notion of "now" for the sleeps to
//! follow; tokio's paused time already is one.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Where the drivers read the time and wait (cheap to copy).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// `None`: the wall clock is the system's. `Some`: it is `base_ms` plus tokio's
    /// time since `base`.
    wall: Option<(u64, Instant)>,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// Production: wall time from the system, waits on tokio's timer.
    pub fn system() -> Clock {
        Clock { wall: None }
    }

    /// Wall time that starts at `base_ms` (milliseconds since the Unix epoch) now and
    /// then follows tokio's clock, so paused time moves it (tests).
    pub fn tokio_at(base_ms: u64) -> Clock {
        Clock {
            wall: Some((base_ms, Instant::now())),
        }
    }

    /// Milliseconds since the Unix epoch: the time that is persisted, so it must mean
    /// the same after a restart.
    pub fn now_ms(&self) -> u64 {
        match self.wall {
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            Some((base_ms, base)) => {
                let elapsed = Instant::now().saturating_duration_since(base);
                base_ms.saturating_add(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
            }
        }
    }

    /// The monotonic now (tokio's clock), for local deadlines such as a lease's.
    pub fn instant(&self) -> Instant {
        Instant::now()
    }

    /// Waits `d`.
    pub async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await
    }

    /// Waits until `deadline`.
    pub async fn sleep_until(&self, deadline: Instant) {
        tokio::time::sleep_until(deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn paused_time_moves_the_wall_clock_of_a_tokio_clock() {
        let clock = Clock::tokio_at(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        let start = clock.instant();
        clock.sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.now_ms(), 91_000);
        assert_eq!(clock.instant() - start, Duration::from_secs(90));
    }

    #[test]
    fn the_system_clock_reads_the_epoch_time() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let now = Clock::system().now_ms();
        assert!(now >= before, "{now} < {before}");
    }
}
