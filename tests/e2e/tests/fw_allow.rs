//! "Ask, don't just block" (issue 44), through the user's whole path in a
//! real sandbox started with the default network config (proxy mode):
//! a refused name shows in `sbx-run log --follow --blocked-only` as it
//! happens; the agent cannot open it (`sbx-fw grant` as the agent: 77);
//! `sbx-run allow` opens it, `--list` shows it, `--revoke` and `--for`
//! close it again; and `[network] on-block` asks a host program while
//! `sbx-run shell` runs: exit 0 opens the name, exit 1 keeps it refused,
//! a program that never answers is killed at `on-block-timeout` and the
//! name stays refused. The remote host is a TLS stand-in on a network of
//! its own, its names resolved by Docker's resolver.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sbx_e2e::{Repo, Standin, Started, base_image, bin, sbx, sh, text};
use serde_json::Value;

const OPEN: &str = "ask.sbx-e2e.test";
const APPROVE: &str = "approve.sbx-e2e.test";
const DENY: &str = "deny.sbx-e2e.test";
const HANG: &str = "hang.sbx-e2e.test";

/// `cond` polled for up to `secs` (generous: a loaded 2-core machine).
fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

/// The host's merged audit log, as records.
fn log() -> Vec<Value> {
    let o = sbx().args(["log", "--json"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["data"].clone())
        .collect()
}

const ASKER: &str = r#"#!/bin/sh
# The user's on-block program: records what it was given, then answers.
d="$1"
req=$(cat)
printf '%s\n' "$req" >> "$d/asked.jsonl"
printf '%s\n' "$#" >> "$d/argc"
case "$req" in
  *'"name":"approve.sbx-e2e.test"'*) echo 10m; exit 0 ;;
  *'"name":"hang.sbx-e2e.test"'*) sleep 600 ;;
esac
exit 1
"#;

#[test]
fn a_refused_name_is_shown_asked_about_and_opened_for_a_while() {
    if !base_image() {
        return;
    }
    let repo = Repo::new("fwallow");
    sh(Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo.path));
    let asks = repo.root().join("asks");
    std::fs::create_dir_all(&asks).unwrap();
    let asker = repo.root().join("asker.sh");
    std::fs::write(&asker, ASKER).unwrap();
    sh(Command::new("chmod").arg("0755").arg(&asker));
    let cfg = repo.path.join(".agent-sandbox");
    std::fs::create_dir_all(&cfg).unwrap();
    // No mode: the default, proxy mode.
    std::fs::write(
        cfg.join("config.toml"),
        format!(
            "[network]\nregistries = false\ngithub = false\n\
             on-block = \"{} {}\"\non-block-timeout = \"3s\"\n",
            asker.display(),
            asks.display()
        ),
    )
    .unwrap();
    repo.give_to_agent();
    let o = sbx()
        .args(["-q", "start"])
        .arg(&repo.path)
        .output()
        .unwrap();
    let _started = Started(&repo);
    assert!(o.status.success(), "start: {}", text(&o));
    let names = sbx_run::names::Names::new(&repo.path.canonicalize().unwrap(), None);
    let state = sh(Command::new("docker").args([
        "exec",
        "-u",
        "0",
        &names.container,
        "cat",
        "/run/sbx-fw/state.json",
    ]));
    assert!(state.contains("\"proxy\": true"), "not proxy mode: {state}");

    // The remote host: a TLS stand-in answering under every test name.
    let tag = std::env::var("SBX_BASE_TAG").unwrap_or_else(|_| "latest".into());
    let standin = Standin {
        container: format!("{}-standin", names.container),
        network: format!("{}-standin", names.container),
        holder: names.holder.clone(),
    };
    let made = (0..20).any(|i| {
        let subnet = format!("198.18.{}.0/24", (std::process::id() + i * 17) % 250);
        Command::new("docker")
            .args(["network", "create", "--subnet", &subnet, &standin.network])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert!(made, "no free subnet in 198.18.0.0/16 for the stand-in");
    sh(Command::new("docker").args(["network", "connect", &standin.network, &names.holder]));
    let d = repo.root().join("standin");
    sh(Command::new(bin("sbx-msgapi")).arg("--new-ca").arg(&d));
    std::fs::write(d.join("script.json"), r#"{"turns": []}"#).unwrap();
    let mut run = Command::new("docker");
    run.args(["run", "-d", "--name", &standin.container])
        .args(["--network", &standin.network]);
    for n in [OPEN, APPROVE, DENY, HANG] {
        run.args(["--network-alias", n]);
    }
    sh(run
        .args(["-u", "0", "--entrypoint", "/x/sbx-msgapi"])
        .arg("-v")
        .arg(format!("{}:/x/sbx-msgapi:ro", bin("sbx-msgapi").display()))
        .arg("-v")
        .arg(format!("{}:/d", d.display()))
        .arg(format!("agent-sandbox-base:{tag}"))
        .args(["--script", "/d/script.json", "--log", "/d/log.jsonl"])
        .args(["--listen", "0.0.0.0:443", "--tls"])
        .arg([OPEN, APPROVE, DENY, HANG].join(","))
        .args(["--tls-ca", "/d"]));
    assert!(
        eventually(30, || sh(
            Command::new("docker").args(["logs", &standin.container])
        )
        .contains("listening")),
        "the stand-in did not start"
    );
    let curl = |n: &str| -> Output {
        repo.exec(&format!(
            "curl -sk --noproxy '*' -m 15 -o /dev/null https://{n}/"
        ))
    };

    // 1. A refusal shows in `log --follow --blocked-only` as it happens.
    let mut follow = sbx()
        .args(["log", "--follow", "--blocked-only", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    assert!(!curl(OPEN).status.success(), "{OPEN} was open at the start");
    let t0 = Instant::now();
    let mut seen = None;
    while seen.is_none() && t0.elapsed() < Duration::from_secs(60) {
        if let Ok(l) = rx.recv_timeout(Duration::from_secs(1)) {
            let v: Value = serde_json::from_str(&l).unwrap();
            if v["data"]["target"] == OPEN && v["data"]["origin"] == names.container.as_str() {
                seen = Some(v);
            }
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    let seen = seen.expect("the refusal never showed in log --follow");
    assert_eq!(seen["data"]["result"], "blocked", "{seen}");

    // 2. The agent cannot open it: no root, so sbx-fw refuses (and says so).
    let o = repo.exec(&format!("sbx-fw grant {OPEN} --for 1h"));
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(!curl(OPEN).status.success(), "the agent opened {OPEN}");
    // Its record, sent as sbx-fw from uid 1000, is the guest sink's
    // refusal of it: the attempt shows, under the agent's uid.
    assert!(
        eventually(20, || log().iter().any(|r| r["origin"]
            == names.container.as_str()
            && r["policy"] == "audit-sink"
            && r["reason"]
                .as_str()
                .unwrap_or("")
                .contains("uid 1000 may not send records as sbx-fw"))),
        "the agent's attempt is not in the log"
    );

    // 3. The user opens it; --list shows it; the log has both sides.
    let o = sbx()
        .args(["allow", OPEN, "--for", "1h"])
        .arg(&repo.path)
        .output()
        .unwrap();
    assert!(o.status.success(), "allow: {}", text(&o));
    let o = sbx()
        .args(["allow", "--list"])
        .arg(&repo.path)
        .output()
        .unwrap();
    assert!(
        o.status.success() && text(&o).contains(OPEN) && text(&o).contains("sbx-run allow"),
        "{}",
        text(&o)
    );
    let o = curl(OPEN);
    assert!(o.status.success(), "{OPEN} not open: {}", text(&o));
    let records = log();
    assert!(
        records.iter().any(|r| r["tool"] == "sbx-run"
            && r["operation"] == "allow"
            && r["target"] == OPEN
            && r["result"] == "allowed"
            && r["reason"]
                .as_str()
                .unwrap_or("")
                .contains(&names.container)),
        "no host record of the allow"
    );
    assert!(
        records.iter().any(|r| r["operation"] == "grant"
            && r["target"] == OPEN
            && r["result"] == "allowed"
            && r["peer"]["uid"] == 0),
        "no sandbox record of the grant"
    );

    // 4. --revoke closes it at once.
    let o = sbx()
        .args(["allow", "--revoke", OPEN])
        .arg(&repo.path)
        .output()
        .unwrap();
    assert!(o.status.success(), "revoke: {}", text(&o));
    assert!(!curl(OPEN).status.success(), "{OPEN} open after --revoke");

    // 5. --for: open, then closed with nothing run to close it.
    let o = sbx()
        .args(["allow", OPEN, "--for", "40s"])
        .arg(&repo.path)
        .output()
        .unwrap();
    assert!(o.status.success(), "allow --for: {}", text(&o));
    assert!(curl(OPEN).status.success(), "{OPEN} not open for 40s");
    assert!(
        eventually(180, || !curl(OPEN).status.success()),
        "{OPEN} still open long after --for 40s"
    );

    // 6. on-block, while `sbx-run shell` runs (a script on its stdin).
    let script = format!(
        "for n in {APPROVE} {DENY} {HANG}; do curl -sk --noproxy '*' -m 15 -o /dev/null https://$n/; echo \"first $n $?\"; done\n\
         i=0; until curl -sk --noproxy '*' -m 15 -o /dev/null https://{APPROVE}/; do i=$((i+1)); [ $i -gt 180 ] && break; sleep 1; done; echo \"approve after $i\"\n\
         i=0; until [ -e /tmp/h44d-done ] || [ $i -gt 600 ]; do i=$((i+1)); sleep 1; done\n\
         curl -sk --noproxy '*' -m 15 -o /dev/null https://{DENY}/; echo \"deny after $?\"\n\
         curl -sk --noproxy '*' -m 15 -o /dev/null https://{HANG}/; echo \"hang after $?\"\n\
         exit\n"
    );
    let mut shell = sbx()
        .args(["shell"])
        .arg(&repo.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    shell
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let decided = |name: &str, result: &str, why: &str| {
        log().iter().any(|r| {
            r["tool"] == "sbx-run"
                && r["operation"] == "on-block"
                && r["target"] == name
                && r["result"] == result
                && r["reason"].as_str().unwrap_or("").contains(why)
                && r["reason"]
                    .as_str()
                    .unwrap_or("")
                    .contains(&names.container)
        })
    };
    let all = eventually(240, || {
        decided(APPROVE, "allowed", "opened for 10m")
            && decided(DENY, "blocked", "refused (exit 1)")
            && decided(HANG, "blocked", "no answer within 3s")
    });
    sh(Command::new("docker").args([
        "exec",
        "-u",
        "0",
        &names.container,
        "touch",
        "/tmp/h44d-done",
    ]));
    let o = shell.wait_with_output().unwrap();
    let said = text(&o);
    assert!(all, "on-block's decisions are not all in the log:\n{said}");
    assert!(said.contains("first approve.sbx-e2e.test 6"), "{said}");
    let approved = said
        .lines()
        .find_map(|l| l.strip_prefix("approve after "))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(approved.trim().parse::<u32>().unwrap() <= 180, "{said}");
    assert!(!said.contains("deny after 0"), "{said}");
    assert!(!said.contains("hang after 0"), "{said}");
    // The program got the refusal as data on stdin, and one argument: the
    // one the config gave it.
    let asked = std::fs::read_to_string(asks.join("asked.jsonl")).unwrap();
    for n in [APPROVE, DENY, HANG] {
        let rec = asked
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["name"] == n)
            .unwrap_or_else(|| panic!("{n} not asked: {asked}"));
        assert_eq!(rec["sandbox"], names.container.as_str(), "{rec}");
    }
    let argc = std::fs::read_to_string(asks.join("argc")).unwrap();
    assert!(argc.lines().all(|l| l == "1"), "{argc}");
}
