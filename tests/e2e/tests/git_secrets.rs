//! Secrets in git's objects (issue 38, class 3): a masked file that is
//! tracked, or only in history, is refused at `start` (exit 77, one line,
//! audited); accepted with `[filesystem].accept-in-git`, the agent reads
//! its bytes through git and by inflating `.git/objects` by hand, loose
//! and packed, which is what the refusal keeps from happening unasked.

use sbx_e2e::{Repo, base_image, sbx, text};

/// Inflate every loose object and every zlib stream in every pack, as the
/// agent could without git; prints what holds "SECRET-".
const INFLATE: &str = r#"
import glob, zlib
for f in glob.glob('.git/objects/??/*'):
    d = zlib.decompress(open(f, 'rb').read())
    if b'SECRET-' in d: print('loose', d.split(b'\0', 1)[1].decode().strip())
for p in glob.glob('.git/objects/pack/*.pack'):
    d = open(p, 'rb').read()
    for i in range(len(d)):
        if d[i] != 0x78: continue
        try: out = zlib.decompressobj().decompress(d[i:i + 4096])
        except zlib.error: continue
        if out.startswith(b'SECRET-'): print('pack', out.decode().strip())
"#;

/// `.env` tracked (a loose object), `old.key` only in history (packed by
/// `git gc`), both masked by the built-in patterns; and its HEAD.
fn repo_with_secrets() -> (Repo, String) {
    let repo = Repo::new("gs");
    repo.git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.path.join(".gitignore"), "/.agent-sandbox/\n").unwrap();
    std::fs::write(repo.path.join("old.key"), "SECRET-PACK\n").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "a key, by mistake"]);
    repo.git(&["rm", "-q", "old.key"]);
    repo.git(&["commit", "-qm", "no key"]);
    repo.git(&["gc", "-q"]);
    std::fs::write(repo.path.join(".env"), "SECRET-LOOSE\n").unwrap();
    repo.git(&["add", ".env"]);
    repo.git(&["commit", "-qm", "env"]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    repo.give_to_agent();
    (repo, head)
}

#[test]
fn a_masked_file_in_gits_objects_is_refused_at_start() {
    if !base_image() {
        return;
    }
    let (repo, head) = repo_with_secrets();
    let o = sbx().args(["-q", "init"]).arg(&repo.path).output().unwrap();
    assert!(o.status.success(), "init: {}", text(&o));
    let audit = tempfile::tempdir().unwrap();
    let log = audit.path().join("audit.jsonl");
    let o = sbx()
        .arg("start")
        .arg(&repo.path)
        .env("SBX_AUDIT_LOG", &log)
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(77), "start: {out}");
    assert_eq!(out.trim().lines().count(), 1, "one line: {out}");
    for want in [
        ".env (and 1 more: old.key) is in git's objects",
        &format!("in commit {}", &head[..12]),
        "the built-in secret patterns (\".env\")",
        "[filesystem].accept-in-git = [\".env\"]",
    ] {
        assert!(out.contains(want), "{want:?} not in: {out}");
    }
    let rec = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        rec.contains("\"policy\":\"filesystem.accept-in-git\"") && rec.contains("\"blocked\""),
        "not audited: {rec}"
    );
    let o = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=sbx.workspace={}", repo.path.display()))
        .output()
        .unwrap();
    assert!(o.stdout.is_empty(), "a container was made: {}", text(&o));

    // Accepted: the start goes on, and the bytes are the agent's to read
    // four ways. This is what the refusal stops.
    let cfg = repo.path.join(".agent-sandbox/config.toml");
    let mut t = std::fs::read_to_string(&cfg).unwrap();
    assert!(t.contains("\n[filesystem]\n"), "{t}");
    t = t.replacen(
        "\n[filesystem]\n",
        "\n[filesystem]\naccept-in-git = [\".env\", \"old.key\"]\n",
        1,
    );
    std::fs::write(&cfg, t).unwrap();
    let o = sbx().arg("start").arg(&repo.path).output().unwrap();
    assert!(o.status.success(), "accepted start: {}", text(&o));
    let o = repo.agent("cat /workspace/gs/.env");
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "the mask: {}",
        text(&o)
    );
    let o = repo.agent(&format!(
        "cd /workspace/gs; git show HEAD:.env; git cat-file -p HEAD~2:old.key; \
         python3 -c \"{}\"",
        INFLATE.replace('"', "\\\"")
    ));
    let got = text(&o);
    eprintln!("the agent, with the paths accepted:\n{got}");
    for want in ["loose SECRET-LOOSE", "pack SECRET-PACK"] {
        assert!(got.contains(want), "{want:?} not read by hand: {got}");
    }
}
