//! Attacks on snapshots as they are built now (issue 43, a43s): one
//! `docker commit` of the running sandbox, cleaned by the guest at the
//! start of a sandbox made from it (`sbx-guest init --from-snapshot`),
//! exported and imported as a `docker save` archive. Each test is one
//! route a hostile agent (or an archive it rewrote) takes; each fails
//! while its hole is open.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sbx_e2e::{Repo, base_image, sbx, sh, text};

fn run(repo: &Repo, args: &[&str]) -> Output {
    sbx().args(args).arg("-C").arg(&repo.path).output().unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn as_root(repo: &Repo, script: &str) -> Output {
    sbx()
        .args(["exec", "--root", "-C"])
        .arg(&repo.path)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

fn container_of(repo: &Repo) -> String {
    let o = sh(Command::new("docker").args([
        "ps",
        "-a",
        "--filter",
        &format!("label=sbx.workspace={}", repo.path.display()),
        "--format",
        "{{.Names}}",
    ]));
    o.lines()
        .find(|l| !l.contains("holder") && !l.ends_with("-net") && !l.is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// Snapshot `repo` (tag `tag`), remove its container, start it anew from
/// the snapshot; the snapshot's image.
fn snapshot_and_restore(repo: &Repo, tag: &str) -> String {
    let o = run(repo, &["snapshot", "--tag", tag]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(repo, &["--json", "snapshots"]);
    let v: serde_json::Value = serde_json::from_str(out(&o).lines().last().unwrap()).unwrap();
    let image = v["data"]["image"].as_str().unwrap().to_owned();
    sh(Command::new("docker").args(["rm", "--force", &container_of(repo)]));
    let o = run(repo, &["start", "--from-snapshot", tag]);
    assert!(o.status.success(), "{}", text(&o));
    image
}

/// Removes the workspaces' sandboxes, snapshots and the images named.
struct Cleanup<'a>(Vec<&'a Repo>, Vec<String>);
impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for r in &self.0 {
            let _ = run(r, &["rm", "--volumes"]);
        }
        for i in &self.1 {
            let _ = Command::new("docker")
                .args(["image", "rm", "--force", "--no-prune", i])
                .output();
        }
    }
}

/// Route: names and file types the walk might trip on or follow, in every
/// directory the agent can write on the image (/tmp, /var/tmp, /run/lock
/// and /var/lock through its link): names that are not UTF-8 or hold a
/// newline, a socket, links to root's files and to the guards' state, a
/// link loop, hard links of its own files across directories, a link to a
/// root file (refused by the kernel here, tried anyway), a sticky
/// directory of its own, a setuid file of its own, a tree shaped like the
/// guest's runtime directories. The restored sandbox has none of it,
/// root's files are whole, and the flag that runs the cleanup is in the
/// container's argv and in the image's own entry point. Held: a
/// regression guard (it fails with the guest's cleanup switched off).
#[test]
fn the_start_from_a_snapshot_removes_every_odd_thing_the_agent_planted() {
    if !base_image() {
        return;
    }
    let repo = sbx_e2e::started_repo("odd");
    let mut guard = Cleanup(vec![&repo], vec![]);
    let o = repo.exec(
        r#"set -e
        for d in /tmp /var/tmp /run/lock; do
          printf x > "$d/$(printf 'bad\377utf8')"
          printf x > "$d/$(printf 'new\nline')"
          python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$d/sock"
          ln -s /etc/shadow "$d/shadow"
          ln -s /run/sbx-fw "$d/fw"
          ln -s loop1 "$d/loop2"; ln -s loop2 "$d/loop1"
          mkdir -m 1777 "$d/sticky"; printf x > "$d/sticky/f"
          printf '#!/bin/sh\nid\n' > "$d/suid"; chmod 4755 "$d/suid"
          mkdir -p "$d/run/sbx-fw"; printf '{}' > "$d/run/sbx-fw/state.json"
          mkdir "$d/...";  printf x > "$d/.../f"
        done
        printf x > /tmp/mine; ln /tmp/mine /var/tmp/mine-link
        ln /etc/passwd /var/tmp/passwd-link 2>/dev/null || echo no-hardlink-to-root
        printf x > /var/lock/via-link
        echo ok"#,
    );
    let t = text(&o);
    assert!(t.contains("ok"), "{t}");
    // Before: root's files as they are.
    let before = out(&as_root(
        &repo,
        "sha256sum /etc/shadow /etc/passwd | cut -c1-64; stat -c %a /var/tmp /tmp /run/lock",
    ));
    let image = snapshot_and_restore(&repo, "odd");
    guard.1.push(image.clone());

    let o = repo.exec("ls -A /tmp /var/tmp /run/lock | grep -av : | grep -av '^$' | wc -l");
    assert_eq!(out(&o), "0", "left in the restored sandbox: {}", text(&o));
    let after = out(&as_root(
        &repo,
        "sha256sum /etc/shadow /etc/passwd | cut -c1-64; stat -c %a /var/tmp /tmp /run/lock",
    ));
    assert_eq!(before, after, "root's files or modes changed");
    let o = as_root(
        &repo,
        "test -s /run/sbx-fw/state.json && test -S /run/sbx-audit/audit.sock && echo ok",
    );
    assert_eq!(out(&o), "ok", "{}", text(&o));
    // The guest said what it removed.
    let logs = Command::new("docker")
        .args(["logs", &container_of(&repo)])
        .output()
        .unwrap();
    assert!(text(&logs).contains("snapshot cleanup:"), "{}", text(&logs));
    // The flag is in what docker runs, and in the image's entry point for
    // a `docker run` by hand.
    let args =
        sh(Command::new("docker").args(["inspect", "-f", "{{json .Args}}", &container_of(&repo)]));
    assert!(args.contains("--from-snapshot"), "{args}");
    let ep = sh(Command::new("docker").args([
        "image",
        "inspect",
        "-f",
        "{{json .Config.Entrypoint}}",
        &image,
    ]));
    assert!(ep.contains("--from-snapshot"), "{ep}");
}

/// Route: the agent rewrites a snapshot archive it can reach. An export
/// written into the workspace (or through a link the agent made there) is
/// the agent's to change: a layer it adds holds root-owned files, which
/// an import would run as they are (the start's cleanup removes only what
/// the agent owns). The export and the import refuse a path inside a
/// workspace, as given or as it resolves. With the hole open, the
/// tampered archive's root file shows up in the sandbox made from it.
#[test]
fn an_archive_inside_a_workspace_is_neither_written_nor_imported() {
    if !base_image() {
        return;
    }
    let repo = sbx_e2e::started_repo("arch");
    let other = Repo::new("other");
    other.git(&["init", "-q", "-b", "main"]);
    let mut guard = Cleanup(vec![&repo, &other], vec![]);
    let o = run(&repo, &["snapshot", "--tag", "t"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&repo, &["--json", "snapshots"]);
    let v: serde_json::Value = serde_json::from_str(out(&o).lines().last().unwrap()).unwrap();
    let image = v["data"]["image"].as_str().unwrap().to_owned();
    guard.1.push(image.clone());

    // Every hole is reported, not only the first.
    let mut holes: Vec<String> = Vec::new();
    // Into the workspace: refused, nothing written.
    let inside = repo.path.join("snap.tar");
    let o = run(
        &repo,
        &["snapshot", "export", "t", "-o", inside.to_str().unwrap()],
    );
    if o.status.code() != Some(65) || inside.exists() {
        holes.push(format!("an export into the workspace: {}", text(&o)));
        let _ = std::fs::remove_file(&inside);
    }
    // Through the agent's link to a directory outside: refused, nothing
    // written there.
    let outside = repo.root().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let o = repo.exec(&format!("ln -s {} out", outside.display()));
    assert!(o.status.success(), "{}", text(&o));
    let via = repo.path.join("out/snap.tar");
    let o = run(
        &repo,
        &["snapshot", "export", "t", "-o", via.to_str().unwrap()],
    );
    if o.status.code() != Some(65) || std::fs::read_dir(&outside).unwrap().next().is_some() {
        holes.push(format!("an export followed the agent's link: {}", text(&o)));
    }

    // Written outside, then copied into the workspace by the user: the
    // agent adds a layer holding a root-owned file.
    let good = repo.root().join("snap.tar");
    let o = run(
        &repo,
        &["snapshot", "export", "t", "-o", good.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    std::fs::copy(&good, &inside).unwrap();
    let o = repo.exec(TAMPER);
    assert_eq!(out(&o), "rewritten", "{}", text(&o));
    // As on another machine: the snapshot's own image is not there.
    sh(Command::new("docker").args(["image", "rm", "--no-prune", &image]));
    // Imported from there, or through the user's own link into it: refused.
    let o = run(&other, &["snapshot", "import", inside.to_str().unwrap()]);
    let link = repo.root().join("link");
    std::os::unix::fs::symlink(&repo.path, &link).unwrap();
    let o2 = run(
        &other,
        &[
            "snapshot",
            "import",
            link.join("snap.tar").to_str().unwrap(),
        ],
    );
    if o.status.success() || o2.status.success() {
        // The hole: what the agent put in the archive is root's there.
        let s = run(&other, &["start", "--from-snapshot", "t"]);
        let e = other.exec("stat -c %U:%a /etc/sbx-agent-was-here 2>&1");
        holes.push(format!(
            "an archive the agent rewrote was imported; started: {}; its file in the sandbox: {}",
            s.status,
            text(&e)
        ));
        let _ = run(&other, &["rm", "--volumes"]);
    } else {
        assert_eq!(o.status.code(), Some(65), "{}", text(&o));
        assert_eq!(o2.status.code(), Some(65), "{}", text(&o2));
        assert!(text(&o).contains("agent writes"), "{}", text(&o));
    }
    assert!(holes.is_empty(), "{}", holes.join("\n"));
    // The export the user kept outside still imports.
    let o = run(&other, &["snapshot", "import", good.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&other, &["--json", "snapshots"]);
    let v: serde_json::Value = serde_json::from_str(out(&o).lines().last().unwrap()).unwrap();
    guard
        .1
        .push(v["data"]["image"].as_str().unwrap().to_owned());
}

/// The agent's rewrite of `snap.tar` in the workspace: a new layer with
/// /etc/sbx-agent-was-here (root's, 0644), the config's diff ids and the
/// manifest to match, the record first as before.
const TAMPER: &str = r#"python3 - <<'EOF'
import tarfile, json, hashlib, io, os
t = tarfile.open('snap.tar')
ms = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]
data = dict((m.name, d) for m, d in ms)
man = json.loads(data['manifest.json'])
cfgname = man[0]['Config']
cfg = json.loads(data[cfgname])
lb = io.BytesIO()
lt = tarfile.open(fileobj=lb, mode='w')
body = b'agent\n'
ti = tarfile.TarInfo('etc/sbx-agent-was-here'); ti.size = len(body); ti.mode = 0o644
lt.addfile(ti, io.BytesIO(body)); lt.close()
layer = lb.getvalue(); lh = hashlib.sha256(layer).hexdigest()
cfg['rootfs']['diff_ids'].append('sha256:' + lh)
cb = json.dumps(cfg).encode(); ch = hashlib.sha256(cb).hexdigest()
man[0]['Config'] = ch + '.json'; man[0]['Layers'].append(lh + '/layer.tar')
o = tarfile.open('snap.tar.new', 'w')
for m, d in ms:
    if m.name in ('manifest.json', cfgname):
        continue
    o.addfile(m, io.BytesIO(d) if d is not None else None)
for n, b in ((ch + '.json', cb), (lh + '/layer.tar', layer), ('manifest.json', json.dumps(man).encode())):
    ti = tarfile.TarInfo(n); ti.size = len(b); o.addfile(ti, io.BytesIO(b))
o.close()
os.replace('snap.tar.new', 'snap.tar')
print('rewritten')
EOF"#;

/// An empty image `name` (docker import) without a command, with `label`
/// so two differ.
fn tiny_image(name: &str, label: &str) -> String {
    tiny_image_with(name, label, "LABEL a43s-cmd=none")
}

/// [`tiny_image`] with one more `--change`.
fn tiny_image_with(name: &str, label: &str, change: &str) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar cf - -T /dev/null | docker import --change 'LABEL a43s={label}' --change '{change}' - {name}"
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    sh(Command::new("docker").args(["image", "inspect", "-f", "{{.Id}}", name]))
        .trim()
        .to_owned()
}

/// An archive as `snapshot export` writes it (the record first, then
/// `docker save` of `image`), with `extra` (name, body) appended by GNU
/// tar under exactly that name.
fn archive(dir: &Path, image: &str, id: &str, extra: &[(&str, &str)]) -> PathBuf {
    let rec = serde_json::json!({
        "id": id, "tag": null, "workspace": "/elsewhere", "image": image,
        "created": 1, "size": 0, "home_backup": null,
    });
    archive_with(dir, image, id, &rec, extra)
}

fn archive_with(
    dir: &Path,
    image: &str,
    id: &str,
    rec: &serde_json::Value,
    extra: &[(&str, &str)],
) -> PathBuf {
    let work = dir.join(format!("w-{id}"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("sbx-snapshot.json"), rec.to_string()).unwrap();
    let arch = dir.join(format!("{id}.tar"));
    let saved = dir.join(format!("{id}.saved.tar"));
    sh(Command::new("docker")
        .args(["save", "-o"])
        .arg(&saved)
        .arg(image));
    sh(Command::new("tar")
        .arg("-cf")
        .arg(&arch)
        .arg("-C")
        .arg(&work)
        .arg("sbx-snapshot.json"));
    sh(Command::new("tar").arg("-Af").arg(&arch).arg(&saved));
    for (name, body) in extra {
        std::fs::write(work.join("x"), body).unwrap();
        sh(Command::new("tar")
            .arg("-rf")
            .arg(&arch)
            .arg("-C")
            .arg(&work)
            .arg(format!("--transform=s|^x$|{name}|"))
            .arg("x"));
    }
    arch
}

/// Route: an archive whose manifest docker reads is not the one sbx-run
/// checked (a second one, spelled `./manifest.json`, comes later and
/// docker's loader takes the last) tags another image on this machine:
/// here a stand-in for the per-repo or base image, which would then be the
/// archive's. And one whose manifest names another image's id as its
/// config: when the import then failed (an image without a command cannot
/// be labelled), sbx-run removed that other image by force. Both refused;
/// the other image is untouched.
#[test]
fn an_archive_cannot_retag_or_remove_another_image() {
    if !sbx_e2e::prerequisite(sbx_e2e::docker_ready(), "a Docker engine") {
        return;
    }
    let pid = std::process::id();
    let ws = Repo::new("importer");
    ws.git(&["init", "-q", "-b", "main"]);
    let victim = format!("a43s-victim-{pid}:v");
    let tiny = format!("a43s-tiny-{pid}-snap:retag{pid}");
    let liar = format!("a43s-liar-{pid}-snap:liar{pid}");
    let _g = Cleanup(vec![&ws], vec![victim.clone(), tiny.clone(), liar.clone()]);
    let victim_id = tiny_image(&victim, "victim");
    let victim_tag = || {
        Command::new("docker")
            .args(["image", "inspect", "-f", "{{.Id}}", &victim])
            .output()
            .map(|o| out(&o))
            .unwrap_or_default()
    };

    // 1. A second manifest, `./manifest.json`, naming the victim's tag too.
    let tiny_id = tiny_image(&tiny, "tiny");
    let cfg = format!("{}.json", tiny_id.trim_start_matches("sha256:"));
    let saved = sh(Command::new("sh")
        .arg("-c")
        .arg(format!("docker save {tiny} | tar -xOf - manifest.json")));
    let mut m: serde_json::Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(m[0]["Config"], cfg.as_str(), "{saved}");
    m[0]["RepoTags"] = serde_json::json!([tiny, victim]);
    let arch = archive(
        ws.root(),
        &tiny,
        &format!("retag{pid}"),
        &[("./manifest.json", &m.to_string())],
    );
    sh(Command::new("docker").args(["image", "rm", &tiny]));
    let mut holes: Vec<String> = Vec::new();
    let o = run(&ws, &["snapshot", "import", arch.to_str().unwrap()]);
    if victim_tag() != victim_id || o.status.code() != Some(65) {
        holes.push(format!("a second manifest moved {victim}: {}", text(&o)));
        // Back, for the second route.
        sh(Command::new("docker").args(["tag", &victim_id, &victim]));
    }

    // 2. A manifest naming the victim's id as its config (docker names the
    // image by its config's digest, so it loads under another id).
    let liar_id = tiny_image(&liar, "liar");
    let dir = ws.root().join("liar");
    std::fs::create_dir_all(&dir).unwrap();
    sh(Command::new("sh").arg("-c").arg(format!(
        "docker save {liar} | tar -xf - -C {}",
        dir.display()
    )));
    let vhex = victim_id.trim_start_matches("sha256:");
    let lhex = liar_id.trim_start_matches("sha256:");
    std::fs::rename(
        dir.join(format!("{lhex}.json")),
        dir.join(format!("{vhex}.json")),
    )
    .unwrap();
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    m[0]["Config"] = format!("{vhex}.json").into();
    std::fs::write(dir.join("manifest.json"), m.to_string()).unwrap();
    let rec = serde_json::json!({
        "id": format!("liar{pid}"), "tag": null, "workspace": "/elsewhere", "image": liar,
        "created": 1, "size": 0, "home_backup": null,
    });
    std::fs::write(dir.join("sbx-snapshot.json"), rec.to_string()).unwrap();
    sh(Command::new("docker").args(["image", "rm", &liar]));
    let arch = ws.root().join("liar.tar");
    sh(Command::new("sh").arg("-c").arg(format!(
        "cd {} && tar -cf {} sbx-snapshot.json $(ls | grep -v '^sbx-snapshot.json$')",
        dir.display(),
        arch.display()
    )));
    let o = run(&ws, &["snapshot", "import", arch.to_str().unwrap()]);
    if victim_tag() != victim_id || o.status.code() != Some(65) {
        holes.push(format!(
            "a manifest naming {victim}'s id: {victim} is now {:?}: {}",
            victim_tag(),
            text(&o)
        ));
    }
    // What the failed import loaded is gone too.
    let left = Command::new("docker")
        .args(["image", "inspect", &liar])
        .output()
        .unwrap();
    if left.status.success() {
        holes.push(format!("{liar} was left behind"));
    }
    assert!(holes.is_empty(), "{}", holes.join("\n"));
}

/// Route: the record an archive carries is printed on the host's terminal
/// (`snapshots`: its tag) and its home backup id is passed to sbx-backup
/// (`restore --snapshot`): a tag with escape sequences, an id that reads
/// as an option. Both refused (65), nothing listed.
#[test]
fn an_archive_s_record_is_plain_text() {
    if !sbx_e2e::prerequisite(sbx_e2e::docker_ready(), "a Docker engine") {
        return;
    }
    let pid = std::process::id();
    let ws = Repo::new("records");
    ws.git(&["init", "-q", "-b", "main"]);
    let rows: [(&str, serde_json::Value, serde_json::Value); 2] = [
        (
            "esc",
            "\u{1b}]0;owned\u{7}\u{1b}[2J".into(),
            serde_json::Value::Null,
        ),
        ("opt", serde_json::Value::Null, "--store=/elsewhere".into()),
    ];
    let mut images = Vec::new();
    let mut holes = Vec::new();
    for (what, tag, backup) in rows {
        let id = format!("{what}{pid}");
        let image = format!("a43s-rec-{pid}-snap:{id}");
        // A command, so that only the record can stop the import.
        tiny_image_with(&image, what, r#"CMD ["/none"]"#);
        images.push(image.clone());
        let rec = serde_json::json!({
            "id": id, "tag": tag, "workspace": "/elsewhere", "image": image,
            "created": 1, "size": 0, "home_backup": backup,
        });
        let arch = archive_with(ws.root(), &image, &id, &rec, &[]);
        sh(Command::new("docker").args(["image", "rm", &image]));
        let o = run(&ws, &["snapshot", "import", arch.to_str().unwrap()]);
        if o.status.code() != Some(65) {
            holes.push(format!("a record with a bad {what}: {}", text(&o)));
        }
    }
    let _g = Cleanup(vec![&ws], images);
    let o = run(&ws, &["snapshots"]);
    assert!(
        holes.is_empty() && out(&o).is_empty(),
        "{}\nlisted: {:?}",
        holes.join("\n"),
        out(&o)
    );
}
