//! The start sequence up to the agent, as decisions over a small trait of
//! side effects, so every fail-closed path is a unit test without root.
//! Order matters: egress is blocked before anything else, so a failure at
//! any later step leaves nothing open.

use std::io;
use std::path::{Path, PathBuf};

/// What the start sequence does to the outside world.
pub trait Effects {
    /// OUTPUT/INPUT DROP in both families.
    fn block_egress(&mut self) -> Result<(), String>;
    /// A tool on the guest's PATH.
    fn find_tool(&self, name: &str) -> Option<PathBuf>;
    /// Run a tool as root to completion.
    fn run_tool(&mut self, path: &Path, args: &[&str]) -> io::Result<ToolOut>;
    fn write_marker(&mut self) -> io::Result<()>;
}

#[derive(Debug, Clone, Default)]
pub struct ToolOut {
    /// None when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The agent may start; warnings are reported, not fatal.
    Ready { warnings: Vec<String> },
    /// The agent must not start; egress stays blocked.
    Unhealthy(String),
}

/// The last non-empty stderr line, prefixes kept short.
fn last_line(s: &str) -> &str {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

/// Steps 1, 3 and 4 of the start: block, firewall, verify, marker.
pub fn firewall(fx: &mut dyn Effects) -> Outcome {
    use Outcome::Unhealthy;
    if let Err(e) = fx.block_egress() {
        return Unhealthy(format!("cannot block egress before the firewall: {e}"));
    }
    let Some(fw) = fx.find_tool("sbx-fw") else {
        return Unhealthy("sbx-fw is missing from the image: egress stays blocked".into());
    };
    match fx.run_tool(&fw, &["init"]) {
        Err(e) => {
            return Unhealthy(format!(
                "cannot run {}: {e}: egress stays blocked",
                fw.display()
            ));
        }
        Ok(o) if o.code != Some(0) => {
            return Unhealthy(format!(
                "sbx-fw init failed ({}): {}: egress stays blocked",
                status_text(o.code),
                last_line(&o.stderr)
            ));
        }
        Ok(_) => {}
    }
    let mut warnings = Vec::new();
    match fx.run_tool(&fw, &["verify", "--json"]) {
        Err(e) => return Unhealthy(format!("cannot run sbx-fw verify: {e}")),
        Ok(o) => match judge_verify(&o) {
            Ok(w) => warnings.extend(w),
            Err(reason) => return Unhealthy(reason),
        },
    }
    if let Err(e) = fx.write_marker() {
        return Unhealthy(format!(
            "cannot write the marker {}: {e}",
            sbx_core::audit::SANDBOX_MARKER
        ));
    }
    Outcome::Ready { warnings }
}

fn status_text(code: Option<i32>) -> String {
    match code {
        Some(c) => format!("exit {c}"),
        None => "killed by a signal".into(),
    }
}

/// sbx-fw verify's JSON lines: a blocked target that answered is fatal; an
/// allowlisted host that did not answer is a warning (an offline machine).
pub fn judge_verify(o: &ToolOut) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    let mut checks = 0;
    for line in o.stdout.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["type"] != "check" {
            continue;
        }
        checks += 1;
        let d = &v["data"];
        if d["pass"] == true {
            continue;
        }
        let what = format!(
            "{} ({}: {})",
            d["check"].as_str().unwrap_or("?"),
            d["probe"].as_str().unwrap_or("?"),
            d["detail"].as_str().unwrap_or("?")
        );
        if d["expect"] == "open" {
            warnings.push(format!("sbx-fw verify: not reachable: {what}"));
        } else if d["verdict"] == "open" {
            return Err(format!("sbx-fw verify: a blocked target answered: {what}"));
        } else {
            // Not refused, but not answered either (no IPv6 route, a
            // timeout): nothing got through, so it is reported, not fatal.
            warnings.push(format!("sbx-fw verify: not proven refused: {what}"));
        }
    }
    match o.code {
        Some(0) if checks > 0 => Ok(warnings),
        Some(1) if checks > 0 => Ok(warnings),
        // No name to test against (offline, or nothing allowlisted resolved):
        // the rules are in, the probe could not run.
        Some(69) if checks == 0 => Ok(vec![format!(
            "sbx-fw verify did not run: {}",
            last_line(&o.stderr)
        )]),
        // allow-external = true: the firewall is off by the config's choice.
        Some(1) if o.stderr.contains("the firewall is off") => {
            Ok(vec!["the firewall is off (allow-external = true)".into()])
        }
        c => Err(format!(
            "sbx-fw verify failed ({}): {}",
            status_text(c),
            last_line(&o.stderr)
        )),
    }
}

#[cfg(test)]
pub mod fake {
    use super::*;

    /// Records every call; answers from its fields.
    #[derive(Debug, Default)]
    pub struct Fake {
        pub calls: Vec<String>,
        pub block_fails: bool,
        pub no_fw: bool,
        pub init: ToolOut,
        pub verify: ToolOut,
        pub marker_fails: bool,
    }

    impl Fake {
        pub fn ok() -> Self {
            Self {
                init: ToolOut { code: Some(0), ..Default::default() },
                verify: ToolOut {
                    code: Some(0),
                    stdout: r#"{"type":"check","data":{"check":"blocked IPv4 address","expect":"refused","pass":true}}"#.into(),
                    stderr: String::new(),
                },
                ..Default::default()
            }
        }
    }

    impl Effects for Fake {
        fn block_egress(&mut self) -> Result<(), String> {
            self.calls.push("block".into());
            if self.block_fails {
                Err("iptables-legacy-restore: not found".into())
            } else {
                Ok(())
            }
        }
        fn find_tool(&self, name: &str) -> Option<PathBuf> {
            (!self.no_fw).then(|| PathBuf::from("/usr/local/bin").join(name))
        }
        fn run_tool(&mut self, _p: &Path, args: &[&str]) -> io::Result<ToolOut> {
            self.calls.push(args.join(" "));
            Ok(if args[0] == "init" {
                self.init.clone()
            } else {
                self.verify.clone()
            })
        }
        fn write_marker(&mut self) -> io::Result<()> {
            self.calls.push("marker".into());
            if self.marker_fails {
                Err(io::Error::from(io::ErrorKind::PermissionDenied))
            } else {
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::Fake;
    use super::*;

    fn unhealthy(o: Outcome) -> String {
        match o {
            Outcome::Unhealthy(r) => r,
            other => panic!("expected unhealthy, got {other:?}"),
        }
    }

    #[test]
    fn happy_path_blocks_first_and_marks_last() {
        let mut f = Fake::ok();
        assert_eq!(firewall(&mut f), Outcome::Ready { warnings: vec![] });
        assert_eq!(f.calls, ["block", "init", "verify --json", "marker"]);
    }

    #[test]
    fn nothing_runs_when_egress_cannot_be_blocked() {
        let mut f = Fake {
            block_fails: true,
            ..Fake::ok()
        };
        assert!(unhealthy(firewall(&mut f)).contains("cannot block egress"));
        assert_eq!(f.calls, ["block"]);
    }

    #[test]
    fn missing_sbx_fw_is_unhealthy_and_stays_blocked() {
        let mut f = Fake {
            no_fw: true,
            ..Fake::ok()
        };
        assert!(unhealthy(firewall(&mut f)).contains("sbx-fw is missing"));
        assert_eq!(f.calls, ["block"]);
    }

    #[test]
    fn failing_init_is_unhealthy_with_its_last_line() {
        for code in [Some(1), Some(69), Some(77), None] {
            let mut f = Fake::ok();
            f.init = ToolOut {
                code,
                stdout: String::new(),
                stderr: "x\nsbx-fw: error: no CAP_NET_ADMIN\n".into(),
            };
            let r = unhealthy(firewall(&mut f));
            assert!(
                r.contains("sbx-fw init failed") && r.contains("no CAP_NET_ADMIN"),
                "{r}"
            );
            assert_eq!(f.calls, ["block", "init"]);
        }
    }

    #[test]
    fn a_leak_found_by_verify_is_fatal_and_no_marker_is_written() {
        let mut f = Fake::ok();
        f.verify = ToolOut {
            code: Some(1),
            stdout: r#"{"type":"check","data":{"check":"blocked IPv4 address","probe":"tcp:192.0.2.1:443","expect":"refused","verdict":"open","pass":false,"detail":"connected"}}"#.into(),
            stderr: "sbx-fw: error: verify: 1 of 6 checks failed".into(),
        };
        assert!(unhealthy(firewall(&mut f)).contains("a blocked target answered"));
        assert!(!f.calls.contains(&"marker".into()));
    }

    #[test]
    fn a_blocked_probe_that_did_not_answer_is_a_warning() {
        let mut f = Fake::ok();
        f.verify = ToolOut {
            code: Some(1),
            stdout: r#"{"type":"check","data":{"check":"blocked IPv6 address","probe":"tcp:[2001:db8::1]:443","expect":"refused","verdict":"error","pass":false,"detail":"Cannot assign requested address"}}"#.into(),
            stderr: String::new(),
        };
        let Outcome::Ready { warnings } = firewall(&mut f) else {
            panic!()
        };
        assert!(warnings[0].contains("not proven refused"), "{warnings:?}");
    }

    #[test]
    fn an_unreachable_allowlisted_host_is_a_warning() {
        let mut f = Fake::ok();
        f.verify = ToolOut {
            code: Some(1),
            stdout: concat!(
                r#"{"type":"check","data":{"check":"blocked IPv4 address","expect":"refused","pass":true}}"#, "\n",
                r#"{"type":"check","data":{"check":"allowlisted name reachable","probe":"tcp:203.0.113.9:443","expect":"open","pass":false,"detail":"timeout"}}"#
            ).into(),
            stderr: String::new(),
        };
        let Outcome::Ready { warnings } = firewall(&mut f) else {
            panic!()
        };
        assert!(warnings[0].contains("not reachable"), "{warnings:?}");
    }

    #[test]
    fn verify_without_a_name_warns_but_other_failures_are_fatal() {
        let mut f = Fake::ok();
        f.verify = ToolOut {
            code: Some(69),
            stdout: String::new(),
            stderr: "sbx-fw: error: no allowlisted name with an IPv4 address to test".into(),
        };
        assert!(matches!(firewall(&mut f), Outcome::Ready { .. }));
        for (code, stderr) in [(Some(71), "boom"), (None, ""), (Some(0), "")] {
            let mut f = Fake::ok();
            f.verify = ToolOut {
                code,
                stdout: String::new(),
                stderr: stderr.into(),
            };
            assert!(unhealthy(firewall(&mut f)).contains("verify failed"));
        }
    }

    #[test]
    fn marker_failure_is_unhealthy() {
        let mut f = Fake {
            marker_fails: true,
            ..Fake::ok()
        };
        assert!(unhealthy(firewall(&mut f)).contains("marker"));
    }
}
