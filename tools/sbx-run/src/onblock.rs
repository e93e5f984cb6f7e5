//! `[network] on-block`: while `sbx-run agent` or `shell` runs, each name
//! the sandbox's firewall refuses is put to a host program of the user's
//! (a chat message, a webhook), which may open it for a while. The agent
//! picks the names, so they are data here: validated as host names, sent
//! as JSON on stdin, never a word of a command line; the program is the
//! config's, run without a shell. Every failure keeps the name refused.

use std::collections::HashMap;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sbx_core::audit::{self, Outcome, Record};
use sbx_core::config::{Domain, HostCommand, Interval};
use serde_json::{Value, json};

use crate::workspace::Workspace;

/// A name is put to the program at most once in this time, whatever the
/// answer: a loop of refused lookups asks once.
const ASK_EVERY: Duration = Duration::from_secs(600);
/// Refusals waiting for the program; more are dropped (and counted).
const QUEUE: usize = 8;
/// What an approval without a duration opens the name for.
pub const DEFAULT_GRANT: Duration = Duration::from_secs(3600);
/// The program's answer is one short line.
const ANSWER_MAX: u64 = 4096;
/// The uids whose refusal records are real: the DNS filter (root) and
/// the proxy's own. The agent can hand the sink records too; the sink
/// stamps its uid, so one it forged asks nobody.
const FIREWALL_UIDS: [u64; 2] = [0, 65533];

/// The running watch; dropping it stops the watch and a program still
/// running is killed.
pub struct Watch {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One refusal to put to the program.
#[derive(Debug, Clone)]
struct Ask {
    name: Domain,
    record: Value,
}

/// Start watching `ws`'s sandbox when `[network] on-block` is set.
pub fn spawn(ws: &Workspace) -> Option<Watch> {
    let net = &ws.loaded.config.network;
    let cmd = net.on_block.clone()?;
    let timeout = net.on_block_timeout;
    let log = crate::spec::host_dir(&ws.names.container).join("audit.jsonl");
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::sync_channel::<Ask>(QUEUE);
    let mut tail = Tail::at_end(log);
    let s = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut asked = Asked::default();
        while !s.load(Ordering::Acquire) {
            for line in tail.read_new() {
                let Some(ask) = refusal(&line) else { continue };
                let key = ask.name.to_string();
                let now = Instant::now();
                if !asked.fresh(&key, now) {
                    continue;
                }
                if tx.try_send(ask).is_err()
                    && let Some(n) = asked.dropped(now)
                {
                    audit::append(
                        &Record::new("sbx-run", "on-block", &key, Outcome::Blocked, "on-block")
                            .reason(&format!(
                                "not asked: too many refusals waiting for the on-block program ({n} since the last such record)"
                            )),
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let s = stop.clone();
    let ws = ws.clone();
    let worker = std::thread::spawn(move || {
        while !s.load(Ordering::Acquire) {
            let Ok(ask) = rx.recv_timeout(Duration::from_millis(200)) else {
                continue;
            };
            decide(&ws, &cmd, timeout, &ask, &s);
        }
    });
    Some(Watch {
        stop,
        threads: vec![reader, worker],
    })
}

/// At most one "not asked" record this often: a flood of refused names
/// (the agent's to make) must not turn into as many host records.
const NOTE_EVERY: Duration = Duration::from_secs(10);
/// Past this many names remembered, those asked over [`ASK_EVERY`] ago
/// are forgotten: the memory of a long run's flood stays bounded.
const ASKED_MAX: usize = 4096;

/// The names asked lately, and the refusals not asked (queue full).
#[derive(Default)]
struct Asked {
    at: HashMap<String, Instant>,
    dropped: u64,
    noted: Option<Instant>,
}

impl Asked {
    /// Whether `name` is asked now: at most once in [`ASK_EVERY`].
    fn fresh(&mut self, name: &str, now: Instant) -> bool {
        if self
            .at
            .get(name)
            .is_some_and(|t| now.duration_since(*t) < ASK_EVERY)
        {
            return false;
        }
        if self.at.len() >= ASKED_MAX {
            self.at.retain(|_, t| now.duration_since(*t) < ASK_EVERY);
        }
        self.at.insert(name.to_owned(), now);
        true
    }

    /// One refusal not asked; Some(how many since the last record) when
    /// a record is due (the first, then one a [`NOTE_EVERY`]).
    fn dropped(&mut self, now: Instant) -> Option<u64> {
        self.dropped += 1;
        if self
            .noted
            .is_some_and(|t| now.duration_since(t) < NOTE_EVERY)
        {
            return None;
        }
        self.noted = Some(now);
        Some(std::mem::take(&mut self.dropped))
    }
}

/// A firewall refusal of a name not on the allowlist, from the firewall
/// itself; None for anything else.
fn refusal(line: &str) -> Option<Ask> {
    let v: Value = serde_json::from_str(line).ok()?;
    let uid = v["peer"]["uid"].as_u64()?;
    if !FIREWALL_UIDS.contains(&uid) || v["tool"] != "sbx-fw" || v["result"] != "blocked" {
        return None;
    }
    let reason = v["reason"].as_str().unwrap_or("");
    let refused = match (v["operation"].as_str(), v["policy"].as_str()) {
        (Some("dns"), Some("dns-filter")) => reason.starts_with("name is not on the allowlist"),
        (Some("connect"), Some("proxy")) => reason.starts_with("not on the allowlist"),
        _ => false,
    };
    if !refused {
        return None;
    }
    let name: Domain = v["target"].as_str()?.parse().ok()?;
    if name.wildcard {
        return None;
    }
    Some(Ask { name, record: v })
}

/// Put one refusal to the program and act on its answer.
fn decide(ws: &Workspace, cmd: &HostCommand, timeout: Interval, ask: &Ask, stop: &AtomicBool) {
    let name = ask.name.to_string();
    let record = |outcome, why: &str| {
        let why = format!("{why} (sandbox {})", ws.names.container);
        audit::append(&Record::new("sbx-run", "on-block", &name, outcome, "on-block").reason(&why));
    };
    match ask_program(ws, cmd, timeout.0, ask, stop) {
        Answer::Open(d) => match crate::allow::grant(ws, &ask.name, d, "on-block") {
            Ok(()) => record(
                Outcome::Allowed,
                &format!(
                    "opened for {} by {}",
                    humantime::format_duration(d),
                    cmd.text
                ),
            ),
            Err(e) => record(Outcome::Blocked, &format!("approved, but not opened: {e}")),
        },
        Answer::Refuse(why) => record(Outcome::Blocked, &format!("{}: {why}", cmd.text)),
    }
}

#[derive(Debug, PartialEq)]
enum Answer {
    Open(Duration),
    Refuse(String),
}

/// Run the program with the refusal on stdin; exit 0 within the time
/// opens the name for what it printed (or [`DEFAULT_GRANT`]); everything
/// else is a refusal.
fn ask_program(
    ws: &Workspace,
    cmd: &HostCommand,
    timeout: Duration,
    ask: &Ask,
    stop: &AtomicBool,
) -> Answer {
    let s = |v: &str| sbx_core::sanitize::field(v).into_owned();
    let input = json!({
        "name": ask.name.to_string(),
        "sandbox": ws.names.container,
        "workspace": ws.path,
        "operation": s(ask.record["operation"].as_str().unwrap_or("")),
        "reason": s(ask.record["reason"].as_str().unwrap_or("")),
        "timestamp": s(ask.record["timestamp"].as_str().unwrap_or("")),
        "answer": "exit 0 to open the name; print a duration (30m, 2h) to say for how long (default 1h)",
    });
    let mut c = Command::new(&cmd.argv[0]);
    c.args(&cmd.argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        // Its own group: a timeout kills what it started too.
        .process_group(0);
    let mut child = match c.spawn() {
        Ok(c) => c,
        Err(e) => return Answer::Refuse(format!("cannot run it: {e}")),
    };
    let mut stdin = child.stdin.take();
    let text = format!("{input}\n");
    // Written from a thread: a program that never reads must not hold us.
    std::thread::spawn(move || {
        if let Some(w) = stdin.as_mut() {
            let _ = w.write_all(text.as_bytes());
        }
    });
    let out = child.stdout.take();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(o) = out {
            let _ = o.take(ANSWER_MAX).read_to_end(&mut buf);
        }
        let _ = tx.send(buf);
    });
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if t0.elapsed() >= timeout || stop.load(Ordering::Acquire) => {
                kill(&mut child);
                let why = if stop.load(Ordering::Acquire) {
                    "the run ended before it answered".to_owned()
                } else {
                    format!(
                        "no answer within {} (on-block-timeout)",
                        humantime::format_duration(timeout)
                    )
                };
                return Answer::Refuse(why);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                kill(&mut child);
                return Answer::Refuse(format!("lost it: {e}"));
            }
        }
    };
    if !status.success() {
        return Answer::Refuse(match status.code() {
            Some(c) => format!("refused (exit {c})"),
            None => "ended by a signal".into(),
        });
    }
    // A program whose children keep its stdout open answered by exiting.
    let out = rx.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
    answer(&String::from_utf8_lossy(&out))
}

/// The duration the program printed; an unreadable one refuses.
fn answer(out: &str) -> Answer {
    let line = out.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Answer::Open(DEFAULT_GRANT);
    }
    match line.parse::<Interval>() {
        Ok(d) if d.0 <= Duration::from_secs(7 * 24 * 3600) => Answer::Open(d.0),
        Ok(_) => Answer::Refuse("answered more than 7d".into()),
        Err(e) => Answer::Refuse(format!(
            "answered {:?}, not a duration: {e}",
            sbx_core::sanitize::field(line)
        )),
    }
}

fn kill(child: &mut Child) {
    use nix::sys::signal::{Signal, killpg};
    let pg = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = killpg(pg, Signal::SIGKILL);
    let _ = child.wait();
}

/// New complete lines of the sandbox's audit log (the guest writes it; it
/// is opened without following a link, and read as bytes).
pub(crate) struct Tail {
    path: PathBuf,
    offset: u64,
    pending: Vec<u8>,
}

impl Tail {
    pub(crate) fn at_end(path: PathBuf) -> Self {
        let offset = std::fs::metadata(&path).map_or(0, |m| m.len());
        Self {
            path,
            offset,
            pending: Vec::new(),
        }
    }

    pub(crate) fn read_new(&mut self) -> Vec<String> {
        let Ok(mut f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&self.path)
        else {
            return Vec::new();
        };
        let len = f.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            self.offset = 0;
            self.pending.clear();
        }
        if f.seek(std::io::SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut chunk = Vec::new();
        let _ = f.take(1 << 20).read_to_end(&mut chunk);
        self.offset += chunk.len() as u64;
        self.pending.extend_from_slice(&chunk);
        let mut out = Vec::new();
        while let Some(i) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=i).collect();
            out.push(String::from_utf8_lossy(&line).trim_end().to_owned());
        }
        // No line is this long: a runaway one is dropped, not kept.
        if self.pending.len() > 1 << 20 {
            self.pending.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the firewall's own refusals of a host name ask; a record the
    /// agent sent (its uid stamped by the sink) or a name that is not one
    /// asks nobody.
    #[test]
    fn which_records_ask() {
        let rec = |uid: u64, op: &str, policy: &str, target: &str, reason: &str| {
            json!({"tool": "sbx-fw", "result": "blocked", "operation": op, "policy": policy,
                   "target": target, "reason": reason, "peer": {"uid": uid}})
            .to_string()
        };
        let dns = "name is not on the allowlist";
        let px = "not on the allowlist (address 198.18.2.1:443)";
        let cases = [
            (rec(0, "dns", "dns-filter", "x.example", dns), true),
            (rec(65533, "connect", "proxy", "x.example", px), true),
            (rec(1000, "dns", "dns-filter", "x.example", dns), false),
            (
                rec(
                    0,
                    "dns",
                    "dns-filter",
                    "x.example",
                    "answer outside GitHub's ranges",
                ),
                false,
            ),
            (
                rec(
                    0,
                    "connect",
                    "proxy",
                    "x.example",
                    "address is not one the name resolved to",
                ),
                false,
            ),
            (rec(0, "dns", "dns-filter", "$(reboot).example", dns), false),
            (rec(0, "dns", "dns-filter", "a b", dns), false),
            (rec(0, "dns", "dns-filter", "*.example", dns), false),
        ];
        for (line, want) in cases {
            assert_eq!(refusal(&line).is_some(), want, "{line}");
        }
    }

    /// A flood of refused names with the program busy (the queue full)
    /// makes one host record a [`NOTE_EVERY`], not one a name, and the
    /// names remembered are forgotten once old (a44).
    #[test]
    fn a_flood_of_names_is_counted_not_recorded_each() {
        let t0 = Instant::now();
        let mut a = Asked::default();
        let mut records = 0;
        for i in 0..10_000u64 {
            // 10,000 names over 20 minutes, each new.
            let now = t0 + Duration::from_millis(i * 120);
            assert!(a.fresh(&format!("n{i}.example"), now));
            if a.dropped(now).is_some() {
                records += 1;
            }
        }
        assert!(records <= 1 + 1200 / 10, "{records} records");
        // At most the names of the last ASK_EVERY (5,000 here) are kept.
        assert!(a.at.len() <= 5001, "{} names kept", a.at.len());
        // A name asked is not asked again within ASK_EVERY, then is.
        assert!(!a.fresh("n9999.example", t0 + Duration::from_millis(9999 * 120 + 1)));
        assert!(a.fresh("n9999.example", t0 + Duration::from_secs(1200) + ASK_EVERY));
    }

    #[test]
    fn answers() {
        assert_eq!(answer(""), Answer::Open(DEFAULT_GRANT));
        assert_eq!(answer("30m\n"), Answer::Open(Duration::from_secs(1800)));
        assert!(matches!(answer("yes please"), Answer::Refuse(_)));
        assert!(matches!(answer("30d"), Answer::Refuse(_)));
    }
}
