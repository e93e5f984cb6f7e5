//! The kernel's packet filter behind one small trait, so every fail-closed
//! path can be tested against a recording fake without root. The real one
//! runs `ipset restore` and `ip[6]tables-restore` (each a single kernel
//! transaction) and flushes conntrack over netlink.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::NetfilterError;
use crate::plan::Family;

/// Feed `input` to a restore command; its stderr becomes the error.
pub fn restore(program: &str, args: &[&str], input: &str) -> Result<(), NetfilterError> {
    run(program, args, Some(input), || {
        format!("{program} {}", args.join(" "))
    })
}

/// Run `program ARGS`, with `input` on its stdin if any; on failure the
/// error names the command as `shown` says and carries its first stderr line.
fn run(
    program: &str,
    args: &[&str],
    input: Option<&str>,
    shown: impl Fn() -> String,
) -> Result<(), NetfilterError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NetfilterError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    let io = |source| NetfilterError::Io {
        program: program.to_owned(),
        source,
    };
    let wrote = match (child.stdin.take(), input) {
        (Some(mut stdin), Some(text)) => stdin.write_all(text.as_bytes()),
        _ => Ok(()),
    };
    let out = child.wait_with_output().map_err(io)?;
    if !out.status.success() {
        return Err(NetfilterError::Refused {
            command: shown(),
            detail: first_line(&out.stderr),
        });
    }
    wrote.map_err(io)
}

/// The first non-empty line of a tool's stderr, or "failed".
fn first_line(stderr: &[u8]) -> String {
    let err = String::from_utf8_lossy(stderr);
    err.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("failed")
        .trim()
        .to_owned()
}

/// What sbx-fw asks of the kernel's packet filter. Each call is one
/// transaction or fails whole; the defaults build on the required ones so
/// a fake records exactly what the real filter would be given.
pub trait Netfilter: Send + Sync {
    /// One `ipset -exist restore` script (create, fill, swap, or `add`).
    fn ipset_restore(&self, script: &str) -> Result<(), NetfilterError>;
    /// One family's whole filter table.
    fn tables_restore(&self, fam: Family, rules: &str) -> Result<(), NetfilterError>;
    /// Our nat chain and its jump (proxy mode).
    fn nat_install(&self, fam: Family, chain: &str) -> Result<(), NetfilterError>;
    /// Our nat chain and its jump gone; nothing else in the nat table.
    fn nat_remove(&self, fam: Family) -> Result<(), NetfilterError>;
    fn flush_conntrack(&self) -> Result<(), NetfilterError>;
    /// Whether our chain is in the kernel for this family.
    fn installed(&self, fam: Family) -> bool;
    fn has_ipv6(&self) -> bool;

    /// The families this kernel has.
    fn families(&self) -> Vec<Family> {
        let mut fams = vec![Family::V4];
        if self.has_ipv6() {
            fams.push(Family::V6);
        }
        fams
    }

    /// Both families at once: two independent kernel transactions, so
    /// there is no reason to wait for one before starting the other.
    fn tables_restore_both(&self, v4: &str, v6: Option<&str>) -> Result<(), NetfilterError> {
        std::thread::scope(|s| {
            let six = v6.map(|r| s.spawn(move || self.tables_restore(Family::V6, r)));
            let four = self.tables_restore(Family::V4, v4);
            let six = six.map_or(Ok(()), |h| {
                h.join()
                    .unwrap_or(Err(NetfilterError::Panicked("ip6tables-restore")))
            });
            four.and(six)
        })
    }

    /// Close everything in both families, as best we can. Used after a failure.
    fn block_everything(&self) -> Result<(), NetfilterError> {
        let v4 = self.tables_restore(Family::V4, &crate::plan::block_all(Family::V4));
        let v6 = if self.has_ipv6() {
            self.tables_restore(Family::V6, &crate::plan::block_all(Family::V6))
        } else {
            Ok(())
        };
        v4.and(v6)
    }

    /// Whether a firewall of ours is up in every family this kernel has.
    fn installed_everywhere(&self) -> bool {
        self.families().into_iter().all(|f| self.installed(f))
    }
}

/// The real packet filter of this network namespace.
#[derive(Debug, Clone, Copy, Default)]
pub struct System;

impl Netfilter for System {
    fn ipset_restore(&self, script: &str) -> Result<(), NetfilterError> {
        restore("ipset", &["-exist", "restore"], script)
    }

    fn tables_restore(&self, fam: Family, rules: &str) -> Result<(), NetfilterError> {
        restore(&backend().restore(fam), &["--wait"], rules)
    }

    fn nat_install(&self, fam: Family, chain: &str) -> Result<(), NetfilterError> {
        nat_install(fam, chain)
    }

    fn nat_remove(&self, fam: Family) -> Result<(), NetfilterError> {
        nat_remove(fam)
    }

    fn flush_conntrack(&self) -> Result<(), NetfilterError> {
        sbx_sys::netlink::flush_conntrack().map_err(NetfilterError::Conntrack)
    }

    fn installed(&self, fam: Family) -> bool {
        installed(fam)
    }

    fn has_ipv6(&self) -> bool {
        crate::host::has_ipv6()
    }
}

/// Which iptables implementation holds our tables. Both hook into the same
/// netfilter, so packets must pass whichever tables exist; what differs is
/// speed: a legacy table commit takes ~1 ms, an nft-backed one ~15 ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// `iptables-legacy*`: x_tables, when the kernel has it.
    Legacy,
    /// Whatever `iptables*` is on this system (nft-backed on Debian).
    #[default]
    #[serde(alias = "nft")]
    System,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Legacy => "legacy",
            Backend::System => "system",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "legacy" => Some(Backend::Legacy),
            "system" | "nft" => Some(Backend::System),
            _ => None,
        }
    }

    /// `iptables` (or `ip6tables`) of this backend, for listing.
    pub fn tables(self, fam: Family) -> &'static str {
        match (fam, self) {
            (Family::V4, Backend::Legacy) => "iptables-legacy",
            (Family::V6, Backend::Legacy) => "ip6tables-legacy",
            (Family::V4, Backend::System) => "iptables",
            (Family::V6, Backend::System) => "ip6tables",
        }
    }

    /// Its `iptables-restore` (or `ip6tables-restore`): the same name
    /// with `-restore`, in both implementations.
    pub fn restore(self, fam: Family) -> String {
        format!("{}-restore", self.tables(fam))
    }
}

static BACKEND: std::sync::OnceLock<Backend> = std::sync::OnceLock::new();

/// The backend for this namespace: `$SBX_FW_BACKEND`, else the one the last
/// init recorded (a namespace never gets our chains in both), else legacy
/// when the kernel and the tools have it, else the system's.
pub fn backend() -> Backend {
    *BACKEND.get_or_init(|| {
        if let Some(b) = std::env::var("SBX_FW_BACKEND")
            .ok()
            .and_then(|v| Backend::parse(&v))
        {
            return b;
        }
        let dir = crate::state::dir_from_env();
        if let Ok(Some(st)) = crate::state::State::load(&dir) {
            return st.backend;
        }
        let kernel = Path::new("/proc/net/ip_tables_names").exists()
            && (!crate::host::has_ipv6() || Path::new("/proc/net/ip6_tables_names").exists());
        if kernel && on_path("iptables-legacy-restore") && on_path("ip6tables-legacy-restore") {
            Backend::Legacy
        } else {
            Backend::System
        }
    })
}

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            fs::metadata(d.join(prog)).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

/// Whether our chain is in the kernel for this family: "previous state".
fn installed(fam: Family) -> bool {
    Command::new(backend().tables(fam))
        .args(["--wait", "-n", "-L", "SBX-OUT"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Proxy mode's redirect: our nat chain with `--noflush`, so the rest of
/// the nat table (Docker's DNS DNAT for 127.0.0.11, anything else) stays,
/// then the jump from nat OUTPUT, inserted only when it is not there yet.
/// Chain before jump: a packet never jumps into a half-filled chain.
fn nat_install(fam: Family, chain: &str) -> Result<(), NetfilterError> {
    restore(&backend().restore(fam), &["--wait", "--noflush"], chain)?;
    if nat(fam, "-C", &crate::plan::nat_jump()).is_err() {
        nat(fam, "-I", &crate::plan::nat_jump())?;
    }
    Ok(())
}

/// Leaving proxy mode: our jump and our chain go, nothing else in the nat
/// table. A no-op when the chain is not there.
fn nat_remove(fam: Family) -> Result<(), NetfilterError> {
    let chain = crate::plan::NAT_CHAIN;
    if nat(fam, "-n", &["-L", chain]).is_err() {
        return Ok(());
    }
    // Every copy of the jump (a second tool might have added one too).
    while nat(fam, "-C", &crate::plan::nat_jump()).is_ok() {
        nat(fam, "-D", &crate::plan::nat_jump())?;
    }
    for op in ["-F", "-X"] {
        nat(fam, op, &[chain])?;
    }
    Ok(())
}

/// `iptables --wait -t nat OP ARGS`.
fn nat(fam: Family, op: &str, args: &[&str]) -> Result<(), NetfilterError> {
    let program = backend().tables(fam);
    let mut all = vec!["--wait", "-t", "nat", op];
    all.extend_from_slice(args);
    run(program, &all, None, || {
        format!("{program} -t nat {op} {}", args.join(" "))
    })
}
