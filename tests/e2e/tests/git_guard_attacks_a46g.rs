//! A fresh attack on the ledger's approvals (issue 46, a46g), from inside
//! a real sandbox as the agent, judged by what the agent's branches and
//! the remote hold.

use sbx_e2e::{PLUMBED, REFUSE_MARKER, Repo, SUBJECT_OK, attack_repo, started, text};

fn sandbox(name: &str) -> Option<Repo> {
    started(|| {
        let repo = attack_repo(
            name,
            &["-qm", "one OK"],
            &[],
            &[("pre-commit", REFUSE_MARKER), ("commit-msg", SUBJECT_OK)],
        );
        repo.give_to_agent();
        repo
    })
}

fn agent(repo: &Repo, script: &str) -> String {
    text(&repo.agent(script))
}

/// The broker's wire format spoken by hand (broker/proto.rs): a `Ledger`
/// request (kind 4) for the ids in argv, with the environment a guard
/// step would send: the call's private index (`SBX_GUARD_PRIVATE_INDEX`,
/// which git passes to every program it starts), or `SBX_GUARD_SENT=1`
/// with `--sent`. Prints the broker's reply.
const ASK: &str = r#"import array, os, socket, sys
args = sys.argv[1:]
if args and args[0] == '--sent':
    env = [(b'SBX_GUARD_SENT', b'1')]; args = args[1:]
else:
    env = [(b'SBX_GUARD_PRIVATE_INDEX', os.environb.get(b'SBX_GUARD_PRIVATE_INDEX', b''))]
put = lambda b: len(b).to_bytes(4, 'little') + b
body = b'SBXG' + bytes([1, 4]) + (0o22).to_bytes(4, 'little')
body += len(args).to_bytes(4, 'little') + b''.join(put(a.encode()) for a in args)
body += len(env).to_bytes(4, 'little') + b''.join(put(k) + put(v) for k, v in env)
s = socket.socket(socket.AF_UNIX)
s.connect('/run/sbx-git/broker.sock')
cwd = os.open('.', os.O_PATH)
s.sendmsg([len(body).to_bytes(4, 'little') + body],
          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [0, 1, 2, cwd]))])
print('broker:', s.recv(4096)[4:], file=sys.stderr)
"#;

/// Known open route (issue 46, a46g): an editor git starts for `git
/// commit` has git's group and the call's private index, so it could ask
/// the broker itself to add any commit to the ledger; a branch then moves
/// onto a commit of MARKER no hook saw, and a push sends it.
#[test]
fn an_editor_git_starts_adds_no_commit_to_the_ledger() {
    let Some(repo) = sandbox("ga46gedit") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "cat > /tmp/ask.py <<'EOF'\n{ASK}EOF\n\
             printf '#!/bin/sh\\npython3 /tmp/ask.py $(cat /tmp/C)\\necho \"edited OK\" > \"$1\"\\n' > /tmp/ed && \
             chmod +x /tmp/ed && {PLUMBED} && echo $C > /tmp/C && echo 2 > b && git add b && \
             GIT_EDITOR=/tmp/ed git commit -q; git log -1 --format=%s; \
             git branch evil $C && git push -q origin evil; \
             git grep -q MARKER evil -- 2>/dev/null && echo LANDED; \
             git -C remote.git grep -q MARKER evil -- 2>/dev/null && echo PUSHED; true"
        ),
    );
    eprintln!("{o}");
    assert!(o.contains("edited OK"), "control: the commit is made: {o}");
    assert!(!o.contains("LANDED"), "{o}");
    assert!(!o.contains("PUSHED"), "{o}");
}

/// The same from a push's credential helper (or any program a push
/// starts): it asks the broker to record the commit as a tip a pre-push
/// step let go, and a hand-written receive-pack request then moves a
/// branch of the workspace onto it (round ten admits a receiving branch's
/// move onto such a tip).
#[test]
fn a_program_a_push_starts_records_no_tip_as_sent() {
    let Some(repo) = sandbox("ga46gsent") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "cat > /tmp/ask.py <<'EOF'\n{ASK}EOF\n\
             printf '#!/bin/sh\\npython3 /tmp/ask.py --sent $(cat /tmp/C)\\necho \"edited OK\" > \"$1\"\\n' > /tmp/ed && \
             chmod +x /tmp/ed && {PLUMBED} && echo $C > /tmp/C && echo 2 > b && git add b && \
             GIT_EDITOR=/tmp/ed git commit -q; git log -1 --format=%s; python3 -c \"
import hashlib, sys
z = '0' * 40
line = ('%s %s refs/heads/evil' % (z, sys.argv[1])).encode() + b'\\0report-status\\n'
pkt = b'%04x' % (len(line) + 4) + line + b'0000'
pack = b'PACK' + (2).to_bytes(4, 'big') + (0).to_bytes(4, 'big')
sys.stdout.buffer.write(pkt + pack + hashlib.sha1(pack).digest())
\" $C > /tmp/req || exit 1; git receive-pack . < /tmp/req | tr -d '\\0'; echo; \
             git grep -q MARKER evil -- 2>/dev/null && echo LANDED; true"
        ),
    );
    eprintln!("{o}");
    assert!(o.contains("edited OK"), "control: the commit is made: {o}");
    assert!(!o.contains("LANDED"), "{o}");
}

/// A daemon an editor leaves behind: once commit-msg passed (its
/// approval appears in the call's private directory), it renames a
/// message the hook refuses over that approval and over
/// `.git/COMMIT_EDITMSG`, which git re-reads.
const SWAP: &str = r#"import os, time
d = os.environ['SBX_GUARD_PRIVATE_INDEX'] + '.msg'
a = d + '/commit-msg.approved'
end = time.time() + 20
while time.time() < end and not os.path.exists(a):
    pass
end = time.time() + 0.3
while time.time() < end:
    for p in (a, '.git/COMMIT_EDITMSG'):
        try:
            open(p + '.x', 'w').write('no ticket\n')
            os.rename(p + '.x', p)
        except OSError:
            pass
"#;

/// A program git starts during the commit shares the call's private
/// directory: after commit-msg passed, a message the hook refuses,
/// written over the approval and over `.git/COMMIT_EDITMSG`, was
/// committed. Up to 25 tries, until the swap has raced git's re-read once
/// and one commit has landed: since pre-commit runs in the broker's
/// worker the commit is quicker, and 8 tries on a loaded machine once
/// saw no race at all.
#[test]
fn a_daemon_git_started_does_not_rewrite_the_approved_message() {
    let Some(repo) = sandbox("ga46gmsg") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "cat > /tmp/swap.py <<'EOF'\n{SWAP}EOF\n\
             printf '#!/bin/sh\\n(setsid python3 /tmp/swap.py </dev/null >/dev/null 2>&1 &)\\necho \"edited OK\" > \"$1\"\\n' > /tmp/ed && \
             chmod +x /tmp/ed && for i in $(seq 25); do echo $i > b && git add b && \
             GIT_EDITOR=/tmp/ed git commit -q 2>/tmp/err; cat /tmp/err; sleep 0.4; \
             git log -1 --format=%s | grep -q 'no ticket' && echo LANDED && break; \
             grep -q 'not the one commit-msg passed' /tmp/err && r=1; \
             git log -1 --format=%s | grep -q 'edited OK' && e=1; \
             [ -n \"$r\" ] && [ -n \"$e\" ] && break; done; \
             git log --format=%s | head -3"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
    assert!(o.contains("edited OK"), "control: a commit is made: {o}");
    assert!(
        o.contains("not the one commit-msg passed"),
        "the swap raced git's re-read at least once and was refused: {o}"
    );
}

/// [`SWAP`], and meanwhile a hook request of its own to the broker:
/// commit-msg from a directory of its own (`exit 0`) on a message file
/// holding the refused message, for the call's private index, so the
/// approval the broker keeps would be that message.
const FORGE: &str = r#"import array, os, socket, threading, time
x = os.environ['SBX_GUARD_PRIVATE_INDEX']
a = x + '.msg/commit-msg.approved'
os.makedirs('/tmp/fake', exist_ok=True)
open('/tmp/fake/commit-msg', 'w').write('#!/bin/sh\nexit 0\n')
os.chmod('/tmp/fake/commit-msg', 0o755)
open('/tmp/bad.msg', 'w').write('no ticket\n')
def ask():
    put = lambda b: len(b).to_bytes(4, 'little') + b
    args = [b'commit-msg', b'/tmp/bad.msg']
    env = [(b'SBX_GUARD_PRIVATE_INDEX', x.encode()), (b'PATH', b'/usr/bin:/bin')]
    body = b'SBXG' + bytes([1, 2]) + (0o22).to_bytes(4, 'little')
    body += len(args).to_bytes(4, 'little') + b''.join(put(a) for a in args)
    body += len(env).to_bytes(4, 'little') + b''.join(put(k) + put(v) for k, v in env)
    s = socket.socket(socket.AF_UNIX)
    s.connect('/run/sbx-git/broker.sock')
    fds = [0, 1, 2, os.open('.', os.O_PATH), os.open('/tmp/fake', os.O_PATH)]
    s.sendmsg([len(body).to_bytes(4, 'little') + body],
              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', fds))])
    s.recv(4096)
end = time.time() + 20
while time.time() < end and not os.path.exists(a):
    pass
t = threading.Thread(target=ask)
t.start()
end = time.time() + 0.3
while time.time() < end:
    try:
        open('.git/COMMIT_EDITMSG.x', 'w').write('no ticket\n')
        os.rename('.git/COMMIT_EDITMSG.x', '.git/COMMIT_EDITMSG')
    except OSError:
        pass
t.join()
"#;

/// The approval is kept by the broker's root process now; a program git
/// started asked the broker to run a commit-msg of its own (`exit 0`,
/// from a directory it made) on the refused message for the call, so the
/// approval kept would have been that message.
#[test]
fn a_daemon_git_started_cannot_have_its_own_commit_msg_approve() {
    let Some(repo) = sandbox("ga46gforge") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "cat > /tmp/forge.py <<'EOF'\n{FORGE}EOF\n\
             printf '#!/bin/sh\\n(setsid python3 /tmp/forge.py </dev/null >/dev/null 2>&1 &)\\necho \"edited OK\" > \"$1\"\\n' > /tmp/ed && \
             chmod +x /tmp/ed && for i in $(seq 8); do echo $i > b && git add b && \
             GIT_EDITOR=/tmp/ed git commit -q; sleep 0.5; \
             git log -1 --format=%s | grep -q 'no ticket' && echo LANDED && break; done; \
             git log --format=%s | head -3"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
    assert!(o.contains("edited OK"), "control: a commit is made: {o}");
}

/// A smudge filter of the agent's `~/.gitconfig` runs during the
/// checkout of `git merge --ff-only C` (C's own `.gitattributes` names
/// it), with git's group and the call's private index: it left the mark a
/// merge's step leaves once pre-commit passed (`pre-commit.passed`, in a
/// repository without commit-msg), and the fast-forward onto C, a commit
/// of MARKER no hook saw, was taken as the merge's own approved commit.
#[test]
fn a_filter_git_runs_during_a_fast_forward_approves_nothing() {
    let Some(repo) = started(|| {
        let repo = attack_repo(
            "ga46gff",
            &["-qm", "one"],
            &[],
            &[("pre-commit", REFUSE_MARKER)],
        );
        repo.give_to_agent();
        repo
    }) else {
        return;
    };
    let o = agent(
        &repo,
        "blob=$(echo MARKER | git hash-object -w --stdin) && \
         attr=$(echo 'a filter=x' | git hash-object -w --stdin) && \
         tree=$(printf '100644 blob %s\\t.gitattributes\\n100644 blob %s\\ta\\n' $attr $blob | git mktree) && \
         C=$(printf 'tree %s\\nparent %s\\nauthor a <a@b> 1 +0000\\ncommitter a <a@b> 1 +0000\\n\\nplumbed\\n' \
             $tree $(git rev-parse HEAD) | python3 -c \"
import hashlib, os, sys, zlib
b = sys.stdin.buffer.read(); o = b'commit %d\\0' % len(b) + b; h = hashlib.sha1(o).hexdigest()
os.makedirs('.git/objects/' + h[:2], exist_ok=True)
open('.git/objects/' + h[:2] + '/' + h[2:], 'wb').write(zlib.compress(o)); print(h)\") && \
         printf '#!/bin/sh\\nmkdir -p \"$SBX_GUARD_PRIVATE_INDEX.msg\"; : > \"$SBX_GUARD_PRIVATE_INDEX.msg/pre-commit.passed\"; cat\\n' > /tmp/smudge && \
         chmod +x /tmp/smudge && printf '[filter \"x\"]\\n\\tsmudge = /tmp/smudge\\n' >> ~/.gitconfig && \
         cat ~/.gitconfig && git merge -q --ff-only $C; \
         git grep -q MARKER main -- && echo LANDED; git log --oneline -2; true",
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
}

/// A daemon that waits for pre-commit's view (`<private index>.msg/view`)
/// and names, in its refs, a commit already holding MARKER as the
/// branch's tip: the hook's `git diff --cached` then shows no change.
const VIEW: &str = r#"import os, sys, time
x = os.environ['SBX_GUARD_PRIVATE_INDEX']
p = x + '.msg/view/packed-refs'
m = open('/tmp/P').read().strip()
end = time.time() + 20
while time.time() < end and not os.path.exists(p):
    pass
end = time.time() + 2
while time.time() < end:
    try:
        open(p + '.x', 'w').write('%s refs/heads/main\n' % m)
        os.rename(p + '.x', p)
    except OSError:
        pass
"#;

/// A clean filter of the agent's `~/.gitconfig` runs while `git commit
/// -a` stages, before pre-commit, with git's group and the call's private
/// index; it leaves a daemon that rewrites pre-commit's view so the hook
/// compares the staged MARKER with a commit already holding it.
#[test]
fn a_filter_git_runs_before_pre_commit_does_not_change_its_view() {
    let Some(repo) = sandbox("ga46gview") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "cat > /tmp/view.py <<'EOF'\n{VIEW}EOF\n{PLUMBED} && echo $C > /tmp/P && \
             printf '#!/bin/sh\\n(setsid python3 /tmp/view.py </dev/null >/dev/null 2>&1 &)\\ncat\\n' > /tmp/clean && \
             chmod +x /tmp/clean && printf '[filter \"x\"]\\n\\tclean = /tmp/clean\\n' >> ~/.gitconfig && \
             echo 'a filter=x' > .gitattributes && \
             for i in 1 2 3 4; do echo MARKER > a && git commit -qam \"$i OK\"; sleep 2.2; \
             git grep -q MARKER main -- && echo LANDED && break; git checkout -q a; done; git log --oneline -3"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
}

/// A daemon that points main at a commit already holding MARKER before
/// pre-commit's step snapshots it, then, once the step pinned that
/// commit, puts main back and rewrites the pin to the parent git took.
/// It flips main before the filter returns (git read HEAD before it ran
/// the filter), so the step's snapshot sees the flip however fast the
/// step is, and puts main back once the pin is written or git has ended.
const PIN: &str = r#"import os, sys, time
x = os.environ['SBX_GUARD_PRIVATE_INDEX']
pin = x + '.msg/pre-commit.head'
git = '/proc/' + sys.argv[1]
m = open('/tmp/P').read().strip()
ref = '.git/refs/heads/main'
real = open(ref).read().strip()
def put(p, v):
    open(p + '.x', 'w').write(v + '\n')
    os.rename(p + '.x', p)
put(ref, m)
open('/tmp/flipped', 'w').close()
end = time.time() + 20
while time.time() < end and not os.path.exists(pin) and os.path.exists(git):
    pass
put(ref, real)
if os.path.exists(pin):
    open(pin + '.x', 'w').write(real)
    os.rename(pin + '.x', pin)
open('/tmp/pin-done', 'w').close()
"#;

/// The clean filter: starts [`PIN`] with the pid of the git it runs for
/// and returns once main is flipped.
const CLEAN: &str = r#"#!/bin/sh
rm -f /tmp/flipped /tmp/pin-done
p=$PPID
while [ "$p" -gt 1 ] && [ "$(cat /proc/$p/comm)" != git ]; do p=$(cut -d' ' -f4 /proc/$p/stat); done
(setsid python3 /tmp/pin.py "$p" </dev/null >/dev/null 2>&1 &)
for _ in $(seq 500); do [ -e /tmp/flipped ] && break; sleep 0.01; done
cat
"#;

/// The parent pre-commit compared with is pinned in the call's private
/// directory: a clean filter's daemon flips main for the step's snapshot
/// and rewrites the pin once the step wrote it: the hook compared the
/// staged MARKER with the flipped commit, and git committed it onto the
/// real parent. The root process keeps the pin now, once.
#[test]
fn a_filter_git_runs_before_pre_commit_does_not_rewrite_the_pin() {
    let Some(repo) = sandbox("ga46gpin") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "cat > /tmp/pin.py <<'EOF'\n{PIN}EOF\n{PLUMBED} && echo $C > /tmp/P && \
             cat > /tmp/clean <<'EOS'\n{CLEAN}EOS\n\
             chmod +x /tmp/clean && printf '[filter \"x\"]\\n\\tclean = /tmp/clean\\n' >> ~/.gitconfig && \
             echo 'a filter=x' > .gitattributes && \
             for i in 1 2 3 4; do echo MARKER > a && git commit -qam \"$i OK\"; \
             for _ in $(seq 250); do [ -e /tmp/pin-done ] && break; sleep 0.1; done; \
             git grep -q MARKER main -- && echo LANDED && break; git reset -q --hard; done; git log --oneline -3"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
}

/// A daemon left with git's group by an earlier call's editor: it finds
/// the verify step's commit-msg in /proc by its argument (a message file
/// in a private view) and rewrites that file with a message the hook
/// passes, before the hook reads it.
const WATCH: &str = r#"import os, time
end = time.time() + 60
while time.time() < end:
    for pid in os.listdir('/proc'):
        try:
            args = open('/proc/%s/cmdline' % pid, 'rb').read().split(b'\0')
        except OSError:
            continue
        for a in args:
            if a.endswith(b'.view/g/COMMIT_EDITMSG'):
                try:
                    open(a + b'.x', 'w').write('swapped OK\n')
                    os.rename(a + b'.x', a)
                except OSError:
                    pass
"#;

/// The verify step ran commit-msg on a file in its private view named on
/// the hook's command line, which any process can read: a daemon with
/// git's group rewrote it while the hook started, and a cherry-picked
/// commit whose message the hook refuses was admitted.
#[test]
fn a_daemon_cannot_rewrite_the_message_the_verify_step_checks() {
    let Some(repo) = sandbox("ga46gverify") else {
        return;
    };
    let o = agent(
        &repo,
        &format!(
            "cat > /tmp/watch.py <<'EOF'\n{WATCH}EOF\n\
             printf '#!/bin/sh\\n(setsid python3 /tmp/watch.py </dev/null >/dev/null 2>&1 &)\\necho \"edited OK\" > \"$1\"\\n' > /tmp/ed && \
             chmod +x /tmp/ed && echo 2 > b && git add b && GIT_EDITOR=/tmp/ed git commit -q && \
             blob=$(echo 3 | git hash-object -w --stdin) && \
             tree=$(printf '100644 blob %s\\ta\\n' $blob | git mktree) && \
             C=$(printf 'tree %s\\nparent %s\\nauthor a <a@b> 1 +0000\\ncommitter a <a@b> 1 +0000\\n\\nno ticket\\n' \
                 $tree $(git rev-parse HEAD~1) | python3 -c \"
import hashlib, os, sys, zlib
b = sys.stdin.buffer.read(); o = b'commit %d\\0' % len(b) + b; h = hashlib.sha1(o).hexdigest()
os.makedirs('.git/objects/' + h[:2], exist_ok=True)
open('.git/objects/' + h[:2] + '/' + h[2:], 'wb').write(zlib.compress(o)); print(h)\") && \
             for i in 1 2 3; do git cherry-pick $C >/dev/null; \
             git log -1 --format=%s | grep -q 'no ticket' && echo LANDED && break; \
             git cherry-pick --abort 2>/dev/null; git reset -q --hard main; done; git log --format=%s | head -3"
        ),
    );
    eprintln!("{o}");
    assert!(!o.contains("LANDED"), "{o}");
    assert!(o.contains("commit-msg"), "refused by commit-msg: {o}");
}
