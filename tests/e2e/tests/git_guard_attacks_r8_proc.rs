//! Round-eight attacks on the git guard (issue 15), process layer: what
//! git reads besides a commit's object when it walks history. From
//! inside a real sandbox as the agent, judged by their effect: no branch
//! (local, or the remote's) holds MARKER, and the remote's main still
//! holds the commit it had.

use sbx_e2e::{Repo, attack_repo, started, text};

/// pre-commit as git's sample writes it: the index against `HEAD`, named.
const REFUSE_MARKER_HEAD: &str = "#!/bin/sh\n\
    if git diff-index -p --cached HEAD -- | grep -q MARKER; then echo MARKER refused >&2; exit 1; fi\n\
    if git diff --cached HEAD | grep -q MARKER; then echo MARKER refused >&2; exit 1; fi\n";

/// `python3 .forge.py tree COMMIT TREE` writes a commit-graph (version 1,
/// no generation-data chunk) of COMMIT's history that says COMMIT's root
/// tree is TREE; `python3 .forge.py parent COMMIT EXTRA` one of COMMIT's
/// and EXTRA's that gives COMMIT EXTRA as a second parent, its level
/// above EXTRA's. Written without git, which writes no graph with
/// `core.commitGraph=false`; git checks no graph's checksum on reading.
const FORGE: &str = r#"import hashlib, os, struct, subprocess, sys
what, commit, other = sys.argv[1:4]
tips = [commit] + ([other] if what == "parent" else [])
log = subprocess.run(["git", "log", "--format=%H %T %ct %P"] + tips, capture_output=True, check=True).stdout.decode()
info = {}
for line in log.splitlines():
    h, t, d, *ps = line.split()
    info[h] = [t, int(d), ps]
oids = sorted(info)
pos = {h: i for i, h in enumerate(oids)}
level = {}
for h in reversed(log.split("\n")[:-1]):
    h = h.split()[0]
    level[h] = 1 + max([level[p] for p in info[h][2]], default=0)
if what == "tree":
    info[commit][0] = other
else:
    info[commit][2] = info[commit][2][:1] + [other]
    level[commit] = level[other] + 1
NONE = 0x70000000
cdat = b""
for h in oids:
    t, d, ps = info[h]
    p = [pos[x] for x in ps] + [NONE, NONE]
    cdat += bytes.fromhex(t) + struct.pack(">IIII", p[0], p[1], (level[h] << 2) | (d >> 32), d & 0xffffffff)
fan = b"".join(struct.pack(">I", sum(1 for h in oids if int(h[:2], 16) <= i)) for i in range(256))
oidl = b"".join(bytes.fromhex(h) for h in oids)
off = 8 + 12 * 4
toc = b""
for cid, body in ((b"OIDF", fan), (b"OIDL", oidl), (b"CDAT", cdat)):
    toc += cid + struct.pack(">Q", off)
    off += len(body)
toc += b"\0\0\0\0" + struct.pack(">Q", off)
data = b"CGPH" + bytes([1, 1, 3, 0]) + toc + fan + oidl + cdat
p = ".git/objects/info/commit-graph"
if os.path.exists(p):
    os.chmod(p, 0o644)
open(p, "wb").write(data + hashlib.sha1(data).digest())
"#;

/// `python3 .ct.py INDEX TREE` makes INDEX's cache-tree say its root is
/// TREE (valid, one node, every entry), checksum recomputed.
const CACHE_TREE: &str = r#"import hashlib, struct, sys
# cachetree.py INDEX TREE: the index's cache-tree root says TREE, valid
p, tree = sys.argv[1], sys.argv[2]
b = open(p, "rb").read()[:-20]
sig, ver, n = struct.unpack(">4sII", b[:12])
assert sig == b"DIRC" and ver in (2, 3)
off = 12
for _ in range(n):
    flags = struct.unpack(">H", b[off + 60:off + 62])[0]
    ext = 2 if ver == 3 and flags & 0x4000 else 0
    name_end = b.index(b"\0", off + 62 + ext)
    length = name_end - off
    off += (length + 8) & ~7
exts = b[off:]
out = b""
i = 0
root = b"\0%d 0\n" % n + bytes.fromhex(tree)
found = False
while i < len(exts):
    s, size = exts[i:i + 4], struct.unpack(">I", exts[i + 4:i + 8])[0]
    if s != b"TREE":
        out += exts[i:i + 8 + size]
    i += 8 + size
out = b[:off] + b"TREE" + struct.pack(">I", len(root)) + root + out
open(p, "wb").write(out + hashlib.sha1(out).digest())
"#;

fn repo() -> Repo {
    let repo = attack_repo(
        "gattack8",
        &["-qm", "one"],
        &["/.forge.py", "/.ct.py"],
        &[("pre-commit", REFUSE_MARKER_HEAD)],
    );
    std::fs::write(repo.path.join(".forge.py"), FORGE).unwrap();
    std::fs::write(repo.path.join(".ct.py"), CACHE_TREE).unwrap();
    repo.give_to_agent();
    repo
}

struct Sandbox {
    repo: Repo,
}

impl Sandbox {
    fn start() -> Option<Sandbox> {
        let sb = started(repo).map(|repo| Sandbox { repo })?;
        Some(sb)
    }

    fn agent(&self, script: &str) -> String {
        text(&self.repo.agent(script))
    }
}

/// A commit-graph is a cache git trusts: a commit it lists is read from it
/// (parents, root tree), not from its object, and the agent can write one.
/// One that gave HEAD the tree of the staged MARKER made the hook's `git
/// diff-index --cached HEAD` (git's sample pre-commit's form) and `git
/// diff --cached HEAD` print nothing, and MARKER was committed. Every git
/// call through the guard now runs with `-c core.commitGraph=false`, which
/// git exports to its hooks and so to their own git.
#[test]
fn a_forged_commit_graph_does_not_hide_staged_content_from_pre_commit() {
    let Some(sb) = Sandbox::start() else { return };
    // Control: the hook sees staged MARKER without a forged graph.
    let o = sb.agent(
        "echo MARKER > a && git add a && git commit -qm x; \
         git grep -q MARKER main -- && echo LANDED; git reset -q --hard",
    );
    assert!(
        o.contains("MARKER refused") && !o.contains("LANDED"),
        "control: {o}"
    );
    let o = sb.agent(
        "echo MARKER > a && git add a && t=$(git write-tree) && \
         python3 .forge.py tree $(git rev-parse HEAD) $t && git commit -qm x; \
         git grep -q MARKER main -- && echo LANDED",
    );
    assert!(
        !o.contains("LANDED"),
        "MARKER committed past pre-commit: {o}"
    );
}

/// A forged commit-graph that gave a rewound main's parent the remote's
/// tip as a second parent made the pre-push step's `git merge-base
/// --is-ancestor` (and git's own check) read the rewind as a
/// fast-forward: the remote's main lost a commit, no `--force` given.
#[test]
fn a_forged_commit_graph_does_not_make_a_rewind_a_fast_forward() {
    let Some(sb) = Sandbox::start() else { return };
    // The remote's main gets a second commit; main is then rewound and
    // given another one. Control: a plain push of that is refused.
    let o = sb.agent(
        "echo 2 > a && git commit -qam two && git push -q origin main && git rev-parse main > /tmp/o && \
         git reset -q --hard HEAD~1 && echo p > b && git add b && git commit -qm p && \
         git push -q origin main; git -C remote.git merge-base --is-ancestor $(cat /tmp/o) main && echo KEPT",
    );
    assert!(o.contains("KEPT"), "control: {o}");
    let o = sb.agent(
        "python3 .forge.py parent $(git rev-parse HEAD~1) $(cat /tmp/o) && git push -q origin main; \
         git -C remote.git -c core.commitGraph=false merge-base --is-ancestor $(cat /tmp/o) main && echo KEPT",
    );
    assert!(o.contains("KEPT"), "the remote's main rewound: {o}");
}

/// git commits the tree ids the index's cache-tree (its `TREE`
/// extension) marks valid, not its entries, and the index is the
/// agent's file: one whose cache-tree named a tree holding MARKER, its
/// entries holding none, passed pre-commit (its `git diff --cached`
/// compares the entries) and MARKER was committed. The broker's private
/// copy of the index no longer has a cache-tree; git builds the tree from
/// the entries the hook saw.
#[test]
fn a_cache_tree_written_by_hand_is_not_what_git_commits() {
    let Some(sb) = Sandbox::start() else { return };
    let o = sb.agent(
        "echo MARKER > a && git add a && t=$(git write-tree) && git reset -q && \
         echo fine > b && git add b && python3 .ct.py .git/index $t && git commit -qm x; \
         git grep -q MARKER main -- && echo LANDED; git log -1 --stat --format=%s main",
    );
    assert!(
        !o.contains("LANDED"),
        "MARKER committed past pre-commit: {o}"
    );
    // What the hook saw is what was committed.
    assert!(o.contains(" b | 1 +"), "control: {o}");
}

/// Still open (a limit, README "Limits" 1): git does not check a blob's
/// hash when it reads one, and the object store is the agent's. Staged
/// MARKER's loose object rewritten to hold `ok` (the work tree file made
/// to differ, so git's diff does not read the file instead) made the
/// hook's `git diff --cached` and `git grep --cached` read `ok`; git
/// commits the blob by its id, and the object put back afterwards holds
/// MARKER again (a pack whose index names other content by the blob's
/// id does the same, set up before the commit, no race). A fix needs
/// the hooks to read objects the agent cannot
/// write while they run (a private object directory whose pack git
/// searches first): not done. The boundary check reads the restored
/// object and refuses the commit; a remote receiving the swapped content
/// rejects it (its hash differs).
#[test]
#[ignore = "open: a blob swapped under its own id during pre-commit"]
fn a_blob_swapped_under_its_id_is_not_what_pre_commit_reads() {
    let Some(sb) = Sandbox::start() else { return };
    let o = sb.agent(
        "echo MARKER > a && git add a && m=$(git rev-parse :a) && f=.git/objects/${m%${m#??}}/${m#??} && \
         cp $f /tmp/good && python3 -c \"import sys, zlib; b = b'ok\\n'; \
         open(sys.argv[1], 'wb').write(zlib.compress(b'blob %d\\0' % len(b) + b))\" $f.new && mv -f $f.new $f && \
         echo other > a && git commit -qm x; \
         cp /tmp/good $f.new && mv -f $f.new $f; git grep -q MARKER main -- && echo LANDED",
    );
    assert!(
        !o.contains("LANDED"),
        "MARKER committed past pre-commit: {o}"
    );
}
