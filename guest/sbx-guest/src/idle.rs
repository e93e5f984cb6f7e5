//! `[lifecycle] idle-stop`: when the sandbox was last used. The host API
//! marks every request and terminal input, each running exec (agent runs
//! and PTY sessions included) holds a `Live` guard, and the main loop adds
//! CPU use from the cgroup; the loop asks `stop_if_idle` once a second.
//! One lock orders an idle stop against a new request: whichever takes it
//! first wins, and a request after the stop is refused with "retry".

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct State {
    last: Option<Instant>,
    live: usize,
    stopping: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    last: None,
    live: 0,
    stopping: false,
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Activity now. False when an idle stop has begun: the caller refuses.
pub fn touch() -> bool {
    let mut s = state();
    if s.stopping {
        return false;
    }
    s.last = Some(Instant::now());
    true
}

/// Held while an exec runs: a running agent or an open terminal keeps
/// the sandbox from ever being idle.
#[derive(Debug)]
pub struct Live(());

impl Live {
    pub fn new() -> Self {
        let mut s = state();
        s.live += 1;
        s.last = Some(Instant::now());
        Self(())
    }
}

impl Default for Live {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let mut s = state();
        s.live = s.live.saturating_sub(1);
        s.last = Some(Instant::now());
    }
}

/// True (and from then on every `touch` fails) when nothing ran and
/// nothing was asked for `after`; the clock starts at the first call.
pub fn stop_if_idle(after: Duration, now: Instant) -> bool {
    let mut s = state();
    let last = *s.last.get_or_insert(now);
    if s.stopping || s.live > 0 || now.saturating_duration_since(last) < after {
        return false;
    }
    s.stopping = true;
    true
}

/// CPU use of the sandbox's cgroup: above `SHARE` of one core over a
/// sample counts as activity (a build or test the agent left running
/// outside any exec, a service at work).
#[derive(Debug, Default)]
pub struct Cpu {
    prev: Option<(Instant, u64)>,
}

/// 5% of one core: the guest, the backup daemon and an idle shell stay far
/// below it; anything doing real work is above.
const SHARE: f64 = 0.05;
const SAMPLE: Duration = Duration::from_secs(2);

impl Cpu {
    /// Sample the cgroup's `usage_usec`; marks activity when busy. A
    /// cgroup that cannot be read counts nothing (the other signals stay).
    pub fn sample(&mut self, now: Instant) {
        if self
            .prev
            .is_some_and(|(t, _)| now.saturating_duration_since(t) < SAMPLE)
        {
            return;
        }
        let Some(usec) = usage_usec() else {
            return;
        };
        if let Some((t, u)) = self.prev.replace((now, usec)) {
            let wall = now.saturating_duration_since(t).as_secs_f64();
            if busy(usec.saturating_sub(u), wall) {
                touch();
            }
        }
    }
}

fn busy(used_usec: u64, wall_secs: f64) -> bool {
    wall_secs > 0.0 && used_usec as f64 / 1e6 / wall_secs > SHARE
}

fn usage_usec() -> Option<u64> {
    let text = std::fs::read_to_string("/sys/fs/cgroup/cpu.stat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the state is the process's, as it is in the guest.
    #[test]
    fn live_work_and_requests_keep_it_up_and_the_stop_refuses_late_ones() {
        let t0 = Instant::now();
        let idle = Duration::from_secs(5);
        assert!(!stop_if_idle(idle, t0));
        let live = Live::new();
        assert!(!stop_if_idle(idle, t0 + Duration::from_secs(60)));
        drop(live);
        assert!(touch());
        let later = Instant::now();
        assert!(!stop_if_idle(idle, later + Duration::from_secs(4)));
        assert!(stop_if_idle(idle, later + Duration::from_secs(6)));
        assert!(!touch(), "a request after the idle stop began is refused");
        assert!(!stop_if_idle(idle, later + Duration::from_secs(60)));
    }

    #[test]
    fn cpu_share() {
        assert!(!busy(10_000, 2.0));
        assert!(busy(200_000, 2.0));
        assert!(!busy(1, 0.0));
    }
}
