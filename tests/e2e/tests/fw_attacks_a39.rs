//! The firewall's socket-family guard (issue 39), tried in a real sandbox
//! from where sbx-guest does not start the process itself: git and the
//! hooks the git broker (root) runs as the agent. A user's pre-commit hook
//! that runs a script in the workspace (a linter, a test runner) runs code
//! the agent wrote; under the broker it must get only the socket families
//! the rules see, as the agent's own processes do.

use std::process::Command;

use sbx_e2e::{Repo, base_image, sbx, sh, text};

/// The agent's "linter": a socket of each family no rule sees (vsock,
/// packet, uevent netlink, AF_ALG) and an io_uring (whose IORING_OP_SOCKET
/// makes sockets no socket filter sees), each line `made X` or `refused X`.
const LINT: &str = r#"import ctypes, socket
out = []
for name, fam, ty, proto in [("vsock", 40, 1, 0), ("packet", 17, 3, 0x300),
                             ("uevent", 16, 3, 15), ("alg", 38, 5, 0)]:
    try:
        socket.socket(fam, ty, proto).close()
        out.append("made " + name)
    except OSError as e:
        out.append("refused %s %d" % (name, e.errno))
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 4, params)
out.append("made io_uring" if fd >= 0 else "refused io_uring %d" % ctypes.get_errno())
open("/tmp/in-hook", "w").write("\n".join(out) + "\n")
"#;

/// `sbx-run init`, the mode said either way (proxy, the default, or
/// address), `sbx-run start`.
fn start(repo: &Repo, proxy: bool) {
    sh(sbx().args(["-q", "init"]).arg(&repo.path));
    let mode = if proxy { "proxy" } else { "address" };
    let cfg = repo.path.join(".agent-sandbox/config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let line = format!("\n[network]\nmode = \"{mode}\"\n");
    let text = if text.contains("\n[network]\n") {
        text.replacen("\n[network]\n", &line, 1)
    } else {
        format!("{text}{line}")
    };
    std::fs::write(&cfg, text).unwrap();
    sh(sbx().arg("start").arg(&repo.path));
}

fn hook_sockets(proxy: bool) {
    if !base_image() {
        return;
    }
    let repo = Repo::new("fwhook");
    sh(Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo.path));
    // The user's hook runs the workspace's own check script.
    repo.hook("pre-commit", "#!/bin/sh\nexec python3 ./lint.py\n");
    repo.give_to_agent();
    start(&repo, proxy);
    if proxy {
        let o = repo.exec(
            "for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $c; echo; done | grep '^[^ ]*/sbx-fw proxy'",
        );
        assert!(o.status.success(), "no proxy running: {}", text(&o));
    }
    // The agent writes the script and commits: the hook runs it.
    let o = repo.agent(&format!(
        "cat > lint.py <<'EOF'\n{LINT}EOF\n\
         git add lint.py && git commit -qm lint && cat /tmp/in-hook"
    ));
    let hook = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        hook.lines().count(),
        5,
        "the hook did not run: {}",
        text(&o)
    );
    assert!(!hook.contains("made"), "sockets made in the hook:\n{hook}");
    // The same script run by the agent itself, for comparison.
    let o = repo.agent("rm -f /tmp/in-hook; python3 ./lint.py; cat /tmp/in-hook");
    let direct = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(direct.lines().count(), 5, "{}", text(&o));
    assert!(!direct.contains("made"), "{direct}");
}

#[test]
fn hooks_the_broker_runs_get_the_agents_socket_filter() {
    hook_sockets(false);
}

#[test]
fn proxy_hooks_the_broker_runs_get_the_agents_socket_filter() {
    hook_sockets(true);
}
