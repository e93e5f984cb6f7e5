//! The supervisor: the main child, services with restart and backoff,
//! signal forwarding, and a stop that ends every process within the stop
//! timeout. A state machine over a small trait of process operations, so
//! the stop and crash-loop paths are unit tests with a recording fake.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Code(i32),
    Signal(i32),
}

impl Ended {
    /// The shell's convention: the code, or 128+N for a signal.
    pub fn status(self) -> i32 {
        match self {
            Ended::Code(c) => c,
            Ended::Signal(s) => 128 + s,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSpec {
    pub name: String,
    pub argv: Vec<OsString>,
    /// None: runs as root (a broker); Some: the agent, no capabilities.
    pub creds: Option<sbx_sys::Creds>,
    pub env: Vec<(OsString, OsString)>,
    /// The main child keeps the container's stdin; services get /dev/null.
    pub main: bool,
    /// Its stderr read by the guest instead of going to the container's log.
    pub tap: Option<Tap>,
}

/// A service whose log the guest reads (ssh.rs: sessions to the audit log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tap {
    Sshd,
}

/// Process operations the supervisor needs.
pub trait Procs {
    fn spawn(&mut self, spec: &ChildSpec) -> std::io::Result<i32>;
    fn signal(&mut self, pid: i32, sig: Signal);
    /// Every process the guest may still have (PID 1: all but itself).
    fn signal_rest(&mut self, sig: Signal);
    /// Reap everything that ended; `true` when no child is left at all.
    fn reap(&mut self) -> (Vec<(i32, Ended)>, bool);
    /// Wait until a unix socket accepts connections, at most until `by`.
    fn await_socket(&mut self, path: &Path, by: Instant) -> Result<(), String>;
}

#[derive(Debug)]
struct Svc {
    spec: ChildSpec,
    pid: Option<i32>,
    started: Option<Instant>,
    failures: u32,
    next: Option<Instant>,
    /// A socket the service serves: the main child starts once it listens.
    ready: Option<PathBuf>,
}

/// Backoff after the n-th quick failure: 1 s, 2 s, 4 s … at most 60 s.
pub fn backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.min(6)).min(Duration::from_secs(60))
}

/// How long the main child waits for the services' sockets, in all.
pub const READY_WAIT: Duration = Duration::from_secs(10);

/// A service that ran this long before ending starts again without delay.
const HEALTHY_RUN: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Supervisor {
    main: Option<i32>,
    main_spec: Option<ChildSpec>,
    main_ended: Option<Ended>,
    services: Vec<Svc>,
    /// Set when stopping: (when TERM went out, deadline for KILL).
    stopping: Option<(Instant, Instant)>,
    rest_termed: bool,
    killed: bool,
    grace: Duration,
    /// Exit status when there is no main child (a failed start).
    pub default_status: i32,
    pub log: Vec<String>,
    /// How each service running at the stop ended (the backup's final
    /// sync is judged from it); absent: still running at the end.
    pub stop_ends: Vec<(String, Ended)>,
    /// The services that ran when the stop began.
    pub ran_at_stop: Vec<String>,
}

impl Supervisor {
    pub fn new(main: Option<ChildSpec>, services: Vec<ChildSpec>, grace: Duration) -> Self {
        Self {
            main: None,
            main_spec: main,
            main_ended: None,
            services: services
                .into_iter()
                .map(|spec| Svc {
                    spec,
                    pid: None,
                    started: None,
                    failures: 0,
                    next: None,
                    ready: None,
                })
                .collect(),
            stopping: None,
            rest_termed: false,
            killed: false,
            grace,
            default_status: 69,
            log: Vec::new(),
            stop_ends: Vec::new(),
            ran_at_stop: Vec::new(),
        }
    }

    fn say(&mut self, msg: String) {
        eprintln!("sbx-guest: {msg}");
        self.log.push(msg);
    }

    /// Take on a service already running as `pid` (a daemon another
    /// program started; as PID 1 or subreaper its end is ours to reap), so
    /// `start` leaves it and its end restarts it from its spec.
    pub fn adopt(&mut self, name: &str, pid: i32, now: Instant) -> bool {
        let Some(s) = self.services.iter_mut().find(|s| s.spec.name == name) else {
            return false;
        };
        s.pid = Some(pid);
        s.started = Some(now);
        true
    }

    /// The main child (and so the agent, and the status's "ready") waits
    /// until service `name` accepts connections on `socket`: the git broker
    /// is the only way to git, and a first `git` must not find it missing.
    pub fn ready_when_listening(&mut self, name: &str, socket: &Path) -> bool {
        let Some(s) = self.services.iter_mut().find(|s| s.spec.name == name) else {
            return false;
        };
        s.ready = Some(socket.to_owned());
        true
    }

    /// Whether the service `name` runs now (None: no such service).
    pub fn running(&self, name: &str) -> Option<bool> {
        self.services
            .iter()
            .find(|s| s.spec.name == name)
            .map(|s| s.pid.is_some())
    }

    /// Services first (brokers the agent talks to), then, once each with a
    /// socket listens, the main child. A main child that cannot start, or a
    /// socket that does not listen within READY_WAIT, is an error: the
    /// caller reports it and nothing of the agent's runs.
    pub fn start(&mut self, p: &mut dyn Procs, now: Instant) -> Result<(), String> {
        for i in 0..self.services.len() {
            if self.services[i].pid.is_none() {
                self.start_service(p, i, now);
            }
        }
        let by = now + READY_WAIT;
        for i in 0..self.services.len() {
            let Some(sock) = self.services[i].ready.clone() else {
                continue;
            };
            if let Err(e) = p.await_socket(&sock, by) {
                self.default_status = 69;
                self.begin_stop(p, now);
                return Err(format!(
                    "service {} does not listen on {} ({e}) after {READY_WAIT:?}",
                    self.services[i].spec.name,
                    sock.display()
                ));
            }
        }
        if let Some(spec) = self.main_spec.clone() {
            match p.spawn(&spec) {
                Ok(pid) => self.main = Some(pid),
                Err(e) => {
                    let argv0 = spec
                        .argv
                        .first()
                        .map(|a| a.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    self.default_status = if e.kind() == std::io::ErrorKind::NotFound {
                        127
                    } else {
                        126
                    };
                    self.begin_stop(p, now);
                    let why = if e.kind() == std::io::ErrorKind::NotFound {
                        "not found".to_owned()
                    } else {
                        e.to_string()
                    };
                    return Err(format!("cannot start {argv0}: {why}"));
                }
            }
        }
        Ok(())
    }

    fn start_service(&mut self, p: &mut dyn Procs, i: usize, now: Instant) {
        let spec = self.services[i].spec.clone();
        match p.spawn(&spec) {
            Ok(pid) => {
                let s = &mut self.services[i];
                s.pid = Some(pid);
                s.started = Some(now);
                s.next = None;
            }
            Err(e) => {
                let n = self.services[i].failures;
                self.services[i].failures += 1;
                self.services[i].next = Some(now + backoff(n));
                // Logged on the first failures and then every 10th: no flood.
                if n < 3 || n % 10 == 0 {
                    self.say(format!(
                        "service {}: cannot start: {e}; retry in {:?}",
                        spec.name,
                        backoff(n)
                    ));
                }
            }
        }
    }

    pub fn on_signal(&mut self, p: &mut dyn Procs, sig: Signal, now: Instant) {
        match sig {
            Signal::SIGCHLD => self.on_chld(p, now),
            Signal::SIGTERM | Signal::SIGINT | Signal::SIGQUIT => {
                if let Some(m) = self.main {
                    p.signal(m, sig);
                }
                self.begin_stop(p, now);
            }
            // Forwarded only: the main child decides what it means.
            other => {
                if let Some(m) = self.main {
                    p.signal(m, other);
                }
            }
        }
    }

    fn begin_stop(&mut self, p: &mut dyn Procs, now: Instant) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some((now, now + self.grace));
        for s in &self.services {
            if let Some(pid) = s.pid {
                self.ran_at_stop.push(s.spec.name.clone());
                p.signal(pid, Signal::SIGTERM);
            }
        }
        if let Some(m) = self.main {
            p.signal(m, Signal::SIGTERM);
        }
    }

    fn on_chld(&mut self, p: &mut dyn Procs, now: Instant) {
        let (ended, _) = p.reap();
        for (pid, how) in ended {
            if Some(pid) == self.main {
                self.main = None;
                self.main_ended = Some(how);
                self.begin_stop(p, now);
                continue;
            }
            let Some(i) = self.services.iter().position(|s| s.pid == Some(pid)) else {
                continue; // an orphan, reaped
            };
            let s = &mut self.services[i];
            s.pid = None;
            if self.stopping.is_some() {
                self.stop_ends.push((s.spec.name.clone(), how));
                continue;
            }
            let ran = s.started.map(|t| now.duration_since(t)).unwrap_or_default();
            if ran >= HEALTHY_RUN {
                s.failures = 0;
            }
            let n = s.failures;
            s.failures += 1;
            s.next = Some(
                now + if n == 0 {
                    Duration::ZERO
                } else {
                    backoff(n - 1)
                },
            );
            let name = s.spec.name.clone();
            if n < 3 || n % 10 == 0 {
                let delay = self.services[i]
                    .next
                    .map(|t| t.duration_since(now))
                    .unwrap_or_default();
                self.say(format!(
                    "service {name} ended ({how:?}); restart in {delay:?}"
                ));
            }
        }
    }

    /// Timers: due restarts, the stop's second TERM wave and the KILL.
    pub fn tick(&mut self, p: &mut dyn Procs, now: Instant) {
        if let Some((_, deadline)) = self.stopping {
            let own_left = self.main.is_some() || self.services.iter().any(|s| s.pid.is_some());
            // Once main and services are gone (the backup's final sync
            // included), everything else gets TERM; at the deadline, KILL.
            if !own_left && !self.rest_termed {
                self.rest_termed = true;
                p.signal_rest(Signal::SIGTERM);
            }
            if now >= deadline && !self.killed {
                self.killed = true;
                self.say("stop timeout: killing what is left".into());
                if let Some(m) = self.main {
                    p.signal(m, Signal::SIGKILL);
                }
                for s in &self.services {
                    if let Some(pid) = s.pid {
                        p.signal(pid, Signal::SIGKILL);
                    }
                }
                p.signal_rest(Signal::SIGKILL);
            }
            return;
        }
        for i in 0..self.services.len() {
            if self.services[i].pid.is_none() && self.services[i].next.is_some_and(|t| t <= now) {
                self.start_service(p, i, now);
            }
        }
    }

    /// When to wake up next, at the latest.
    pub fn next_wake(&self, now: Instant) -> Duration {
        let mut t = Duration::from_secs(1);
        if let Some((_, d)) = self.stopping {
            t = t
                .min(d.saturating_duration_since(now))
                .min(Duration::from_millis(100));
        }
        for s in &self.services {
            if let Some(n) = s.next {
                t = t.min(n.saturating_duration_since(now));
            }
        }
        t
    }

    pub fn stopping(&self) -> bool {
        self.stopping.is_some()
    }

    /// How service `name` ended during the stop: None when it did not run
    /// at the stop, Some(None) when it was still running at the end.
    pub fn stop_end(&self, name: &str) -> Option<Option<Ended>> {
        if !self.ran_at_stop.iter().any(|n| n == name) {
            return None;
        }
        Some(
            self.stop_ends
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, how)| *how),
        )
    }

    /// The exit status once stopping and no child is left.
    pub fn finished(&mut self, p: &mut dyn Procs, now: Instant) -> Option<i32> {
        self.stopping?;
        let (ended, none_left) = p.reap();
        for (pid, how) in ended {
            if Some(pid) == self.main {
                self.main = None;
                self.main_ended = Some(how);
            }
            for s in &mut self.services {
                if s.pid == Some(pid) {
                    s.pid = None;
                    self.stop_ends.push((s.spec.name.clone(), how));
                }
            }
        }
        // Past the deadline plus a margin, leave even if something hangs in
        // the kernel: the container's end kills it anyway.
        let hard = self
            .stopping
            .map(|(_, d)| now >= d + Duration::from_secs(1))
            .unwrap_or(false);
        if none_left || hard {
            return Some(
                self.main_ended
                    .map(Ended::status)
                    .unwrap_or(self.default_status),
            );
        }
        None
    }
}

#[cfg(test)]
pub mod fake {
    use super::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Default)]
    pub struct FakeProcs {
        pub next_pid: i32,
        pub live: BTreeSet<i32>,
        pub ended: Vec<(i32, Ended)>,
        pub signals: Vec<(i32, Signal)>,
        pub spawned: Vec<String>,
        pub fail_spawn: BTreeSet<String>,
        /// Sockets that listen; each wait, with how many had been spawned.
        pub listening: BTreeSet<PathBuf>,
        pub waits: Vec<(usize, PathBuf)>,
    }

    impl FakeProcs {
        pub fn end(&mut self, pid: i32, how: Ended) {
            self.live.remove(&pid);
            self.ended.push((pid, how));
        }
        pub fn pid_of(&self, name: &str) -> i32 {
            // pids are handed out in spawn order from 100
            100 + self.spawned.iter().rposition(|n| n == name).unwrap() as i32
        }
    }

    impl Procs for FakeProcs {
        fn spawn(&mut self, spec: &ChildSpec) -> std::io::Result<i32> {
            if self.fail_spawn.contains(&spec.name) {
                return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
            }
            let pid = 100 + self.spawned.len() as i32;
            self.spawned.push(spec.name.clone());
            self.live.insert(pid);
            Ok(pid)
        }
        fn signal(&mut self, pid: i32, sig: Signal) {
            self.signals.push((pid, sig));
        }
        fn signal_rest(&mut self, sig: Signal) {
            self.signals.push((-1, sig));
        }
        fn reap(&mut self) -> (Vec<(i32, Ended)>, bool) {
            (std::mem::take(&mut self.ended), self.live.is_empty())
        }
        fn await_socket(&mut self, path: &Path, _by: Instant) -> Result<(), String> {
            self.waits.push((self.spawned.len(), path.to_owned()));
            if self.listening.contains(path) {
                Ok(())
            } else {
                Err("timed out".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeProcs;
    use super::*;

    fn spec(name: &str, main: bool) -> ChildSpec {
        ChildSpec {
            name: name.into(),
            argv: vec![name.into()],
            creds: None,
            env: vec![],
            main,
            tap: None,
        }
    }

    #[test]
    fn exits_with_the_main_childs_status_after_stopping_services() {
        let mut p = FakeProcs::default();
        let mut s = Supervisor::new(
            Some(spec("main", true)),
            vec![spec("backup", false)],
            Duration::from_secs(5),
        );
        let t0 = Instant::now();
        s.start(&mut p, t0).unwrap();
        assert_eq!(p.spawned, ["backup", "main"]);
        p.end(p.pid_of("main"), Ended::Code(7));
        s.on_signal(&mut p, Signal::SIGCHLD, t0);
        assert!(p.signals.contains(&(p.pid_of("backup"), Signal::SIGTERM)));
        assert_eq!(s.finished(&mut p, t0), None);
        p.end(p.pid_of("backup"), Ended::Code(0));
        s.on_signal(&mut p, Signal::SIGCHLD, t0);
        s.tick(&mut p, t0);
        assert!(
            p.signals.contains(&(-1, Signal::SIGTERM)),
            "the rest gets TERM after own children"
        );
        assert_eq!(s.finished(&mut p, t0), Some(7));
    }

    /// Issue 43: the stop's record says whether the backup's final sync
    /// ended on its own (0), was cut at the deadline, or never ran.
    #[test]
    fn how_each_service_ended_in_the_stop_is_kept() {
        let mut p = FakeProcs::default();
        let mut s = Supervisor::new(
            Some(spec("main", true)),
            vec![spec("backup", false), spec("svc", false)],
            Duration::from_secs(3),
        );
        let t0 = Instant::now();
        s.start(&mut p, t0).unwrap();
        assert_eq!(s.stop_end("backup"), None, "no stop yet");
        s.on_signal(&mut p, Signal::SIGTERM, t0);
        p.end(p.pid_of("main"), Ended::Code(0));
        p.end(p.pid_of("svc"), Ended::Code(0));
        s.on_signal(&mut p, Signal::SIGCHLD, t0);
        assert_eq!(s.stop_end("backup"), Some(None), "still syncing");
        s.tick(&mut p, t0 + Duration::from_secs(3));
        p.end(p.pid_of("backup"), Ended::Signal(9));
        assert_eq!(s.finished(&mut p, t0 + Duration::from_secs(3)), Some(0));
        assert_eq!(s.stop_end("backup"), Some(Some(Ended::Signal(9))));
        assert_eq!(s.stop_end("svc"), Some(Some(Ended::Code(0))));
        assert_eq!(s.stop_end("main"), None);
    }

    #[test]
    fn sigterm_is_forwarded_and_kill_follows_at_the_deadline() {
        let mut p = FakeProcs::default();
        let mut s = Supervisor::new(Some(spec("main", true)), vec![], Duration::from_secs(3));
        let t0 = Instant::now();
        s.start(&mut p, t0).unwrap();
        let m = p.pid_of("main");
        s.on_signal(&mut p, Signal::SIGHUP, t0);
        assert_eq!(p.signals, [(m, Signal::SIGHUP)]);
        s.on_signal(&mut p, Signal::SIGTERM, t0);
        assert!(p.signals.contains(&(m, Signal::SIGTERM)));
        s.tick(&mut p, t0 + Duration::from_secs(1));
        assert!(!p.signals.iter().any(|(_, g)| *g == Signal::SIGKILL));
        s.tick(&mut p, t0 + Duration::from_secs(3));
        assert!(p.signals.contains(&(m, Signal::SIGKILL)));
        assert!(p.signals.contains(&(-1, Signal::SIGKILL)));
        p.end(m, Ended::Signal(9));
        s.on_signal(&mut p, Signal::SIGCHLD, t0 + Duration::from_secs(3));
        assert_eq!(s.finished(&mut p, t0 + Duration::from_secs(3)), Some(137));
    }

    #[test]
    fn a_crash_loop_backs_off_and_logs_little() {
        let mut p = FakeProcs::default();
        let mut s = Supervisor::new(
            Some(spec("main", true)),
            vec![spec("svc", false)],
            Duration::from_secs(3),
        );
        let mut now = Instant::now();
        s.start(&mut p, now).unwrap();
        let mut restarts = 0;
        let mut delays = vec![];
        // 10 simulated minutes of a service that dies at once.
        let end = now + Duration::from_secs(600);
        while now < end {
            if let Some(pid) = p.live.iter().copied().find(|&x| x != p.pid_of("main")) {
                p.end(pid, Ended::Code(1));
                s.on_signal(&mut p, Signal::SIGCHLD, now);
                delays.push(s.next_wake(now));
            }
            now += Duration::from_millis(250);
            let before = p.spawned.len();
            s.tick(&mut p, now);
            restarts += p.spawned.len() - before;
        }
        assert!(restarts < 20, "{restarts} restarts in 10 minutes");
        assert!(restarts > 5, "it keeps trying: {restarts}");
        assert!(s.log.len() < 10, "log lines: {:?}", s.log);
        assert!(!s.stopping());
    }

    #[test]
    fn a_main_child_that_cannot_start_stops_everything() {
        let mut p = FakeProcs::default();
        p.fail_spawn.insert("main".into());
        let mut s = Supervisor::new(
            Some(spec("main", true)),
            vec![spec("svc", false)],
            Duration::from_secs(3),
        );
        let t0 = Instant::now();
        assert!(s.start(&mut p, t0).unwrap_err().contains("cannot start"));
        assert!(s.stopping());
        p.end(p.pid_of("svc"), Ended::Signal(15));
        assert_eq!(s.finished(&mut p, t0), Some(127));
    }

    /// The firewall proxy, started by `sbx-fw init` as a daemon: adopted,
    /// not started twice; its end (the reaped orphan) restarts it from the
    /// spec, and a second end soon after waits its backoff.
    #[test]
    fn an_adopted_daemon_is_restarted_from_its_spec_when_it_ends() {
        let mut p = FakeProcs::default();
        let mut s = Supervisor::new(
            Some(spec("main", true)),
            vec![spec("sbx-fw-proxy", false)],
            Duration::from_secs(3),
        );
        let t0 = Instant::now();
        assert!(s.adopt("sbx-fw-proxy", 4242, t0));
        assert!(!s.adopt("nothing", 1, t0));
        s.start(&mut p, t0).unwrap();
        assert_eq!(p.spawned, ["main"]);
        assert_eq!(s.running("sbx-fw-proxy"), Some(true));
        p.ended.push((4242, Ended::Signal(9)));
        s.on_signal(&mut p, Signal::SIGCHLD, t0);
        assert_eq!(s.running("sbx-fw-proxy"), Some(false));
        s.tick(&mut p, t0);
        assert_eq!(p.spawned, ["main", "sbx-fw-proxy"]);
        assert_eq!(s.running("sbx-fw-proxy"), Some(true));
        p.end(p.pid_of("sbx-fw-proxy"), Ended::Signal(9));
        let t1 = t0 + Duration::from_secs(2);
        s.on_signal(&mut p, Signal::SIGCHLD, t1);
        s.tick(&mut p, t1);
        assert_eq!(s.running("sbx-fw-proxy"), Some(false), "backoff");
        s.tick(&mut p, t1 + Duration::from_secs(1));
        assert_eq!(s.running("sbx-fw-proxy"), Some(true));
        assert_eq!(s.running("nothing"), None);
    }

    #[test]
    fn the_main_child_starts_only_once_the_brokers_socket_listens() {
        let sock = Path::new("/run/sbx-git/broker.sock");
        let mut p = FakeProcs::default();
        p.listening.insert(sock.to_owned());
        let mut s = Supervisor::new(
            Some(spec("main", true)),
            vec![spec("git-broker", false), spec("backup", false)],
            Duration::from_secs(3),
        );
        assert!(s.ready_when_listening("git-broker", sock));
        assert!(!s.ready_when_listening("nothing", sock));
        s.start(&mut p, Instant::now()).unwrap();
        // Both services spawned, then the wait, then main.
        assert_eq!(p.spawned, ["git-broker", "backup", "main"]);
        assert_eq!(p.waits, [(2, sock.to_owned())]);
    }

    #[test]
    fn a_broker_that_never_listens_keeps_the_agent_from_starting() {
        let sock = Path::new("/run/sbx-git/broker.sock");
        let mut p = FakeProcs::default();
        let mut s = Supervisor::new(
            Some(spec("main", true)),
            vec![spec("git-broker", false)],
            Duration::from_secs(3),
        );
        s.ready_when_listening("git-broker", sock);
        let err = s.start(&mut p, Instant::now()).unwrap_err();
        assert!(
            err.contains("git-broker") && err.contains("/run/sbx-git/broker.sock"),
            "{err}"
        );
        assert_eq!(p.spawned, ["git-broker"], "main never started");
        assert!(s.stopping());
        assert!(
            p.signals
                .contains(&(p.pid_of("git-broker"), Signal::SIGTERM))
        );
    }

    #[test]
    fn orphans_are_reaped_without_affecting_anything() {
        let mut p = FakeProcs::default();
        let mut s = Supervisor::new(Some(spec("main", true)), vec![], Duration::from_secs(3));
        let t0 = Instant::now();
        s.start(&mut p, t0).unwrap();
        p.ended.push((4242, Ended::Code(0)));
        s.on_signal(&mut p, Signal::SIGCHLD, t0);
        assert!(!s.stopping());
        assert!(p.ended.is_empty());
    }
}
