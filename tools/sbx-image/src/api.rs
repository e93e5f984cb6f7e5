//! `docker run --detach …` as two engine API calls (create, start), for
//! when sbx-run can reach the engine's socket itself: one docker CLI start
//! costs ~25 ms, a local request well under 1 ms.
//!
//! The body is translated from the very argv that `show-run` prints, so
//! what is shown stays what is run. Only the flags `spec::build` emits are
//! understood; anything else returns None and the caller runs the CLI.

use std::collections::BTreeMap;
use std::ffi::OsString;

use serde_json::{Map, Value, json};

/// The container name and the `POST /containers/create` body for a
/// `run --detach` argv, or None when the argv uses anything unknown here.
/// `env` answers `--env NAME` (no value) the way the CLI's environment would.
pub fn create_body(
    argv: &[String],
    env: impl Fn(&str) -> Option<OsString>,
) -> Option<(String, Value)> {
    let mut it = argv.iter().map(String::as_str);
    if it.next()? != "run" {
        return None;
    }
    let mut name = None;
    let mut cfg = Map::new();
    let mut host = Map::new();
    let mut labels = Map::new();
    let mut envs: Vec<String> = Vec::new();
    let mut caps_add: Vec<&str> = Vec::new();
    let mut caps_drop: Vec<&str> = Vec::new();
    let mut sec: Vec<&str> = Vec::new();
    let mut mounts: Vec<Value> = Vec::new();
    let mut exposed = Map::new();
    let mut bindings: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut detached = false;
    let image = loop {
        let flag = it.next()?;
        if !flag.starts_with("--") {
            break flag;
        }
        match flag {
            "--detach" => {
                detached = true;
                continue;
            }
            "--read-only" => {
                host.insert("ReadonlyRootfs".into(), json!(true));
                continue;
            }
            // What the CLI sends for it.
            "--no-healthcheck" => {
                cfg.insert("Healthcheck".into(), json!({"Test": ["NONE"]}));
                continue;
            }
            _ => {}
        }
        let v = it.next()?;
        match flag {
            "--name" => name = Some(v.to_owned()),
            "--hostname" => {
                cfg.insert("Hostname".into(), json!(v));
            }
            "--workdir" => {
                cfg.insert("WorkingDir".into(), json!(v));
            }
            "--user" => {
                cfg.insert("User".into(), json!(v));
            }
            "--entrypoint" => {
                cfg.insert("Entrypoint".into(), json!([v]));
            }
            "--stop-timeout" => {
                cfg.insert("StopTimeout".into(), json!(v.parse::<i64>().ok()?));
            }
            "--label" => {
                let (k, val) = v.split_once('=').unwrap_or((v, ""));
                labels.insert(k.into(), json!(val));
            }
            "--env" => match v.split_once('=') {
                Some(_) => envs.push(v.to_owned()),
                // `--env NAME`: the value from the client's environment, or
                // nothing at all when it is unset.
                None => {
                    if let Some(val) = env(v) {
                        envs.push(format!("{v}={}", val.into_string().ok()?));
                    }
                }
            },
            "--cap-add" => caps_add.push(v),
            "--cap-drop" => caps_drop.push(v),
            "--security-opt" => sec.push(v),
            "--memory" => {
                host.insert("Memory".into(), json!(bytes(v)?));
            }
            "--memory-swap" => {
                host.insert("MemorySwap".into(), json!(bytes(v)?));
            }
            "--cpus" => {
                let c: f64 = v.parse().ok()?;
                host.insert("NanoCpus".into(), json!((c * 1e9).round() as i64));
            }
            "--pids-limit" => {
                host.insert("PidsLimit".into(), json!(v.parse::<i64>().ok()?));
            }
            "--network" => {
                host.insert("NetworkMode".into(), json!(v));
            }
            "--publish" => {
                let (ip, host_port, container) = publish(v)?;
                exposed.insert(container.clone(), json!({}));
                bindings
                    .entry(container)
                    .or_default()
                    .push(json!({"HostIp": ip, "HostPort": host_port}));
            }
            "--mount" => mounts.push(mount(v)?),
            _ => return None,
        }
    };
    if !detached {
        return None;
    }
    // Words after the image are the command, else the image's own runs.
    let cmd: Vec<&str> = it.collect();
    if !cmd.is_empty() {
        cfg.insert("Cmd".into(), json!(cmd));
    }
    cfg.insert("Image".into(), json!(image));
    cfg.insert("Labels".into(), Value::Object(labels));
    cfg.insert("Env".into(), json!(envs));
    if !exposed.is_empty() {
        cfg.insert("ExposedPorts".into(), Value::Object(exposed));
    }
    host.insert("CapAdd".into(), json!(caps(&caps_add)));
    host.insert("CapDrop".into(), json!(caps(&caps_drop)));
    host.insert("SecurityOpt".into(), json!(sec));
    host.insert("Mounts".into(), json!(mounts));
    host.insert("PortBindings".into(), json!(bindings));
    // What the CLI sends when these are not given, so that `docker inspect`
    // shows the same container either way.
    host.insert("RestartPolicy".into(), json!({"Name": "no"}));
    for k in [
        "Dns",
        "DnsOptions",
        "DnsSearch",
        "BlkioWeightDevice",
        "BlkioDeviceReadBps",
        "BlkioDeviceWriteBps",
        "BlkioDeviceReadIOps",
        "BlkioDeviceWriteIOps",
        "Devices",
        "Ulimits",
    ] {
        host.insert(k.into(), json!([]));
    }
    cfg.insert("HostConfig".into(), Value::Object(host));
    Some((name?, Value::Object(cfg)))
}

/// Capabilities as the CLI normalises them: `CAP_` names, sorted ("ALL" stays).
fn caps(v: &[&str]) -> Vec<String> {
    let mut c: Vec<String> = v
        .iter()
        .map(|c| {
            let c = c.to_ascii_uppercase();
            if c == "ALL" || c.starts_with("CAP_") {
                c
            } else {
                format!("CAP_{c}")
            }
        })
        .collect();
    c.sort();
    c.dedup();
    c
}

/// docker's memory notation: a number with an optional b/k/m/g/t/p suffix
/// (binary units), as the CLI's RAMInBytes reads it.
fn bytes(s: &str) -> Option<i64> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (num, shift) = match t.char_indices().last()? {
        (i, 'k') => (&t[..i], 10),
        (i, 'm') => (&t[..i], 20),
        (i, 'g') => (&t[..i], 30),
        (i, 't') => (&t[..i], 40),
        (i, 'p') => (&t[..i], 50),
        _ => (t, 0),
    };
    let n: f64 = num.parse().ok()?;
    (n >= 0.0).then(|| (n * (1u64 << shift) as f64) as i64)
}

/// `[ip:][host:]container[/proto]` as the config allows it (no ranges).
fn publish(s: &str) -> Option<(String, String, String)> {
    let (ports, proto) = s.split_once('/').unwrap_or((s, "tcp"));
    let parts: Vec<&str> = ports.rsplitn(3, ':').collect();
    let (ip, host, container) = match parts.as_slice() {
        [c] => ("", "", *c),
        [c, h] => ("", *h, *c),
        [c, h, ip] => (*ip, *h, *c),
        _ => return None,
    };
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    Some((ip.into(), host.into(), format!("{container}/{proto}")))
}

/// A `--mount` value (CSV, as docker reads it) as an API mount.
fn mount(s: &str) -> Option<Value> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(s.as_bytes());
    let rec = r.records().next()?.ok()?;
    let mut m = Map::new();
    for field in rec.iter() {
        match field.split_once('=') {
            Some(("type", v)) => m.insert("Type".into(), json!(v)),
            Some(("source" | "src", v)) => m.insert("Source".into(), json!(v)),
            Some(("target" | "dst" | "destination", v)) => m.insert("Target".into(), json!(v)),
            Some(("readonly" | "ro", v)) => {
                m.insert("ReadOnly".into(), json!(v == "true" || v == "1"))
            }
            None if field == "readonly" || field == "ro" => {
                m.insert("ReadOnly".into(), json!(true))
            }
            _ => return None,
        };
    }
    Some(Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn a_run_argv_becomes_the_same_container_config() {
        let a = argv(&[
            "run",
            "--detach",
            "--name",
            "c1",
            "--hostname",
            "sbx-x",
            "--label",
            "sbx.a=b=c",
            "--label",
            "sbx.branch=",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "NET_ADMIN",
            "--security-opt",
            "no-new-privileges",
            "--memory",
            "1.5g",
            "--memory-swap",
            "4g",
            "--cpus",
            "0.5",
            "--pids-limit",
            "1024",
            "--network",
            "net1",
            "--publish",
            "127.0.0.1:8080:3000",
            "--publish",
            "9000/udp",
            "--mount",
            "type=bind,\"source=/a b/c,d\",target=/w,readonly",
            "--mount",
            "type=volume,source=v,target=/h",
            "--env",
            "A=1",
            "--env",
            "SET",
            "--env",
            "UNSET",
            "--workdir",
            "/w",
            "img:latest",
        ]);
        let (name, b) = create_body(&a, |k| (k == "SET").then(|| "x y".into())).unwrap();
        assert_eq!(name, "c1");
        assert_eq!(b["Image"], "img:latest");
        assert_eq!(b["Hostname"], "sbx-x");
        assert_eq!(b["WorkingDir"], "/w");
        assert_eq!(b["Labels"], json!({"sbx.a": "b=c", "sbx.branch": ""}));
        assert_eq!(b["Env"], json!(["A=1", "SET=x y"]));
        let h = &b["HostConfig"];
        assert_eq!(h["CapDrop"], json!(["ALL"]));
        assert_eq!(h["CapAdd"], json!(["CAP_NET_ADMIN"]));
        assert_eq!(h["SecurityOpt"], json!(["no-new-privileges"]));
        assert_eq!(h["Memory"], 1610612736);
        assert_eq!(h["MemorySwap"], 4294967296i64);
        assert_eq!(h["NanoCpus"], 500000000);
        assert_eq!(h["PidsLimit"], 1024);
        assert_eq!(h["NetworkMode"], "net1");
        assert_eq!(
            h["PortBindings"],
            json!({"3000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8080"}],
                   "9000/udp": [{"HostIp": "", "HostPort": ""}]})
        );
        assert_eq!(b["ExposedPorts"], json!({"3000/tcp": {}, "9000/udp": {}}));
        assert_eq!(h["RestartPolicy"], json!({"Name": "no"}));
        assert!(b.get("Cmd").is_none() && b.get("Entrypoint").is_none());
        let holder = argv(&[
            "run",
            "--detach",
            "--name",
            "h",
            "--user",
            "65534:65534",
            "--read-only",
            "--entrypoint",
            "sleep",
            "img",
            "infinity",
        ]);
        let (_, b) = create_body(&holder, |_| None).unwrap();
        assert_eq!(b["User"], "65534:65534");
        assert_eq!(b["HostConfig"]["ReadonlyRootfs"], true);
        assert_eq!(b["Entrypoint"], json!(["sleep"]));
        assert_eq!(b["Cmd"], json!(["infinity"]));
        assert_eq!(
            h["Mounts"],
            json!([
                {"Type": "bind", "Source": "/a b/c,d", "Target": "/w", "ReadOnly": true},
                {"Type": "volume", "Source": "v", "Target": "/h"}
            ])
        );
    }

    #[test]
    fn anything_unknown_is_left_to_the_cli() {
        let env = |_: &str| None;
        assert!(
            create_body(&argv(&["run", "--detach", "--privileged", "x", "img"]), env).is_none()
        );
        assert!(create_body(&argv(&["run", "--name", "c", "img"]), env).is_none());
        // An unknown flag after the image is the command's, not docker's.
        assert!(
            create_body(
                &argv(&["run", "--detach", "--name", "c", "img", "--x"]),
                env
            )
            .is_some()
        );
        assert!(
            create_body(
                &argv(&[
                    "run",
                    "--detach",
                    "--mount",
                    "type=bind,bind-propagation=shared",
                    "--name",
                    "c",
                    "img"
                ]),
                env
            )
            .is_none()
        );
        assert!(create_body(&argv(&["exec", "c"]), env).is_none());
    }

    #[test]
    fn memory_sizes_read_as_the_cli_reads_them() {
        assert_eq!(bytes("4g"), Some(4 << 30));
        assert_eq!(bytes("512M"), Some(512 << 20));
        assert_eq!(bytes("100kb"), Some(100 << 10));
        assert_eq!(bytes("1048576"), Some(1 << 20));
        assert_eq!(bytes("x"), None);
    }
}
