//! What the host hands the clean room (`Plan`) and the one thing it reads
//! back (`Verdict`, one JSON line per commit). The verdicts come out of a
//! container that ran the commits' own code, so the host parses them as
//! untrusted input: unknown fields, a wrong commit, an oversized line or
//! a missing verdict fail the run.

use serde::{Deserialize, Serialize};

use super::record::Record;

/// The directory the host mounts read-only into the clean room.
pub const IN_DIR: &str = "/sbx-verify/in";
pub const PLAN_FILE: &str = "plan.json";
pub const PACK_FILE: &str = "objects.pack";
pub const TRUSTED_DIR: &str = "trusted";

/// Caps on what the clean room may return.
pub const LINE_CAP: usize = 64 << 10;
pub const OUTPUT_CAP: usize = 8 << 10;
pub const FLAGS_CAP: usize = 64;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub commits: Vec<Commit>,
    /// Parents of the commits outside the range: their trees are in the
    /// pack, their own parents are not (the clean room's `shallow`).
    pub boundary: Vec<String>,
    pub record: Record,
    /// The uid and gid the hooks run as (never the driver's, root).
    pub hook_uid: u32,
    /// Seconds one hook may run.
    pub hook_timeout: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Commit {
    pub id: String,
    pub parent: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Pass,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hook {
    PreCommit,
    CommitMsg,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Self::PreCommit => "pre-commit",
            Self::CommitMsg => "commit-msg",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub id: String,
    pub result: Outcome,
    pub hook: Option<Hook>,
    /// Why it failed: "exited 3", "killed by signal 9", "timed out".
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    /// The failing hook's last lines.
    pub output: Option<String>,
    /// "hook inputs changed: …" and the like, computed before any hook ran.
    pub flags: Vec<String>,
}

/// Why a verdict line is refused.
pub fn check(line: &[u8], want: &str) -> Result<Verdict, String> {
    if line.len() > LINE_CAP {
        return Err(format!("a verdict line of {} bytes", line.len()));
    }
    let v: Verdict = serde_json::from_slice(line).map_err(|e| format!("not a verdict: {e}"))?;
    if v.id != want {
        return Err(format!("a verdict for {} where {want} was due", v.id));
    }
    let sizes_ok = v.output.as_ref().is_none_or(|o| o.len() <= OUTPUT_CAP)
        && v.reason.as_ref().is_none_or(|r| r.len() <= 256)
        && v.flags.len() <= FLAGS_CAP
        && v.flags.iter().all(|f| f.len() <= 4096);
    let consistent = match v.result {
        Outcome::Pass => v.hook.is_none(),
        Outcome::Fail => v.hook.is_some() && v.reason.is_some(),
    };
    if !sizes_ok || !consistent {
        return Err(format!("an inconsistent or oversized verdict for {want}"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_checked_as_untrusted_input() {
        let id = "a".repeat(40);
        let ok = format!(
            r#"{{"id":"{id}","result":"pass","hook":null,"reason":null,"exit_code":null,"output":null,"flags":[]}}"#
        );
        assert!(check(ok.as_bytes(), &id).is_ok());
        let cases = [
            ok.replace("\"flags\"", "\"extra\":1,\"flags\""),
            ok.replace(&id, &"b".repeat(40)),
            ok.replace("\"pass\",\"hook\":null", "\"pass\",\"hook\":\"pre-commit\""),
            ok.replace("\"pass\"", "\"fail\""),
            ok.replace("\"pass\"", "\"ok\""),
            format!("{ok}{}", " ".repeat(LINE_CAP)),
        ];
        for bad in cases {
            assert!(check(bad.as_bytes(), &id).is_err(), "{bad:.200}");
        }
    }
}
