//! Which allowlist entries each address the filter added was handed out
//! for, kept in a file so `sbx-fw deny` and the proxy can read it.

use std::collections::HashMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::HANDED_FILE;
use super::filter::Filter;

/// The filter's record of what it added: address -> (entries, hold end).
#[derive(Default)]
pub(super) struct Handed {
    by_ip: HashMap<IpAddr, (Vec<String>, Instant)>,
    /// Lines in the file; rewritten from `by_ip` when it doubles.
    lines: usize,
}

/// Parse [`HANDED_FILE`]: address -> entries (every line counts).
pub fn read_handed(dir: &Path) -> HashMap<IpAddr, Vec<String>> {
    let mut out: HashMap<IpAddr, Vec<String>> = HashMap::new();
    let Ok(t) = std::fs::read_to_string(dir.join(HANDED_FILE)) else {
        return out;
    };
    for l in t.lines() {
        let mut w = l.split_whitespace();
        let Some(Ok(ip)) = w.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        let e = out.entry(ip).or_default();
        for d in w {
            if !e.iter().any(|x| x == d) {
                e.push(d.to_owned());
            }
        }
    }
    out
}

impl Filter {
    pub(super) fn record_handed(&self, added: &[(IpAddr, u32)], entries: &[String]) {
        let mut h = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let mut new = String::new();
        for (ip, hold) in added {
            let until = now + Duration::from_secs(u64::from(*hold));
            let (have, end) = h.by_ip.entry(*ip).or_insert_with(|| (Vec::new(), until));
            *end = (*end).max(until);
            let fresh: Vec<&String> = entries.iter().filter(|e| !have.contains(e)).collect();
            if !fresh.is_empty() {
                new.push_str(&ip.to_string());
                for e in fresh {
                    new.push(' ');
                    new.push_str(e);
                    have.push(e.clone());
                }
                new.push('\n');
            }
        }
        if new.is_empty() {
            return;
        }
        let path = self.dir.join(HANDED_FILE);
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(new.as_bytes()));
        if let Err(e) = appended {
            sbx_core::output::warn(&format!(
                "DNS filter: cannot record handed-out addresses in {}: {e}",
                path.display()
            ));
        }
        h.lines += new.lines().count();
        if h.lines > 2 * h.by_ip.len() + 1024 {
            // Compact: expired holds go, the rest is written anew.
            h.by_ip.retain(|_, (_, end)| *end > now);
            let mut all = String::new();
            for (ip, (es, _)) in &h.by_ip {
                all.push_str(&format!("{ip} {}\n", es.join(" ")));
            }
            let tmp = self.dir.join(format!(".{HANDED_FILE}.tmp"));
            if std::fs::write(&tmp, &all).is_ok() && std::fs::rename(&tmp, &path).is_ok() {
                h.lines = h.by_ip.len();
            }
        }
    }
}
