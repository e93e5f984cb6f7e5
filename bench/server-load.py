#!/usr/bin/env python3
"""Load client for sbx-server (bench/server.sh runs it): bounded, stops by itself.

Phase 1: CLIENTS clients (threads spread over PROCS processes, so the GIL
does not queue them) each log in, then for SECONDS loop over list, get and
healthz (the baseline: HTTP plus one database round trip, no token),
logging in again every ROUNDS rounds; every latency is kept.
Phase 2: CREATE users at once each create a project and start it; each must
reach `running`. Then every project made here is deleted.
Prints a markdown table; exits 1 when a target is missed.
"""

import argparse
import http.client
import json
import math
import multiprocessing as mp
import os
import sys
import threading
import time
import urllib.parse

PASSWORD = "load-test-password"


class Client:
    """One keep-alive HTTP connection, as a browser or app holds one."""

    def __init__(self, base):
        u = urllib.parse.urlsplit(base)
        self.host, self.port = u.hostname, u.port
        self.conn = None
        self.token = None

    def call(self, method, path, body=None, timeout=30):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        headers = {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        if self.token:
            headers["authorization"] = "Bearer " + self.token
        try:
            self.conn.request(method, path, body=data, headers=headers)
            r = self.conn.getresponse()
            raw = r.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        return r.status, (json.loads(raw) if raw else None)

    def login(self, email):
        self.token = None
        st, b = self.call("POST", "/auth/login", {"email": email, "password": PASSWORD})
        if st != 200:
            raise RuntimeError(f"login {email}: {st} {b}")
        self.token = b["access_token"]


def register(base, email):
    st, b = Client(base).call("POST", "/auth/register", {"email": email, "password": PASSWORD})
    if st != 201:
        raise RuntimeError(f"register {email}: {st} {b}")


def timed(samples, errors, op, f):
    t = time.perf_counter()
    try:
        st, _ = f()
        ok = 200 <= st < 300
    except Exception as e:  # noqa: BLE001: every failure is an error to count
        ok, st = False, repr(e)
    samples.setdefault(op, []).append(time.perf_counter() - t)
    if not ok:
        errors.append(f"{op}: {st}")


def worker(base, users, deadline, rounds, think, out):
    """Threads for `users` (email, project id) in one process."""
    samples, errors = {}, []
    lock = threading.Lock()

    def one(email, pid):
        s, e = {}, []
        c = Client(base)
        n = 0
        while time.time() < deadline:
            if n % rounds == 0:
                t = time.perf_counter()
                try:
                    c.login(email)
                except Exception as x:  # noqa: BLE001
                    e.append(f"login: {x!r}")
                s.setdefault("login", []).append(time.perf_counter() - t)
            timed(s, e, "list", lambda: c.call("GET", "/projects"))
            time.sleep(think)
            timed(s, e, "get", lambda: c.call("GET", f"/projects/{pid}"))
            time.sleep(think)
            timed(s, e, "healthz", lambda: c.call("GET", "/healthz"))
            time.sleep(think)
            n += 1
        with lock:
            for k, v in s.items():
                samples.setdefault(k, []).extend(v)
            errors.extend(e)

    ts = [threading.Thread(target=one, args=u) for u in users]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((samples, errors))


def pct(v, p):
    v = sorted(v)
    return v[max(0, math.ceil(p * len(v)) - 1)] * 1000


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def tree(root):
    """root and its descendants' pids."""
    kids = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d))
        except (ValueError, OSError, IndexError):
            pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def schedstat(roots):
    """Seconds on a CPU and waiting in the runqueue, summed over every
    thread of `roots` and their descendants (threads that exited are not
    counted)."""
    run = wait = 0
    for r in roots:
        for p in tree(r):
            try:
                for t in os.listdir(f"/proc/{p}/task"):
                    with open(f"/proc/{p}/task/{t}/schedstat") as f:
                        a, b, _ = f.read().split()
                    run, wait = run + int(a), wait + int(b)
            except OSError:
                pass
    return run / 1e9, wait / 1e9


def setup(base, prefix, n, project=True):
    """n users (registered at once) and, with `project`, one project each."""
    out = [None] * n
    errs = []

    def one(i):
        email = f"{prefix}{i}@load.test"
        try:
            register(base, email)
            pid = None
            if project:
                c = Client(base)
                c.login(email)
                st, b = c.call("POST", "/projects", {"name": f"p{i}"})
                if st != 201:
                    raise RuntimeError(f"create: {st} {b}")
                pid = b["id"]
            out[i] = (email, pid)
        except Exception as e:  # noqa: BLE001
            errs.append(repr(e))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        sys.exit(f"set-up failed: {errs[:3]}")
    return out


def load_phase(a, prefix):
    users = setup(a.base, prefix + "l", a.clients)
    deadline = time.time() + a.seconds
    q = mp.Queue()
    chunks = [users[i :: a.procs] for i in range(a.procs)]
    before = loadavg()
    s0 = schedstat(a.pid)
    ps = [
        mp.Process(target=worker, args=(a.base, c, deadline, a.rounds, a.think / 1000, q))
        for c in chunks
        if c
    ]
    for p in ps:
        p.start()
    samples, errors = {}, []
    for _ in ps:
        s, e = q.get()
        for k, v in s.items():
            samples.setdefault(k, []).extend(v)
        errors.extend(e)
    for p in ps:
        p.join()
    s1 = schedstat(a.pid)
    return samples, errors, before, loadavg(), (s1[0] - s0[0], s1[1] - s0[1])


def create_phase(a, prefix):
    users = setup(a.base, prefix + "c", a.create, project=False)
    barrier = threading.Barrier(a.create)
    res = [None] * a.create
    made = []

    def one(i, email):
        c = Client(a.base)
        c.login(email)
        barrier.wait()
        t = time.perf_counter()
        try:
            st, b = c.call("POST", "/projects", {"name": f"c{i}"}, timeout=600)
            if st != 201:
                raise RuntimeError(f"create: {st} {b}")
            pid = b["id"]
            made.append((c, pid))
            st, b = c.call("POST", f"/projects/{pid}/start", timeout=600)
            st2, g = c.call("GET", f"/projects/{pid}")
            status = g["status"] if st2 == 200 else st2
            res[i] = (time.perf_counter() - t, status, None if st == 200 else b)
        except Exception as e:  # noqa: BLE001
            res[i] = (time.perf_counter() - t, "failed", repr(e))

    before = loadavg()
    ts = [threading.Thread(target=one, args=(i, u[0])) for i, u in enumerate(users)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    after = loadavg()
    deleted = []
    for c, pid in made:
        t = time.perf_counter()
        st, _ = c.call("DELETE", f"/projects/{pid}", timeout=600)
        deleted.append((time.perf_counter() - t, st))
    return res, deleted, before, after


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--procs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rounds", type=int, default=20, help="list/get rounds per login")
    ap.add_argument("--think", type=float, default=0, help="ms between a client's requests")
    ap.add_argument("--create", type=int, default=10, help="concurrent creations (0: none)")
    ap.add_argument("--target-ms", type=float, default=50)
    ap.add_argument(
        "--pid", type=int, action="append", default=[], help="server (and Postgres) to account CPU for"
    )
    a = ap.parse_args()
    prefix = f"u{os.getpid()}-{int(time.time())}-"
    ok = True

    samples, errors, l0, l1, (run, wait) = load_phase(a, prefix)
    secs = a.seconds
    print(
        f"### {a.clients} clients ({a.procs} processes), {secs:.0f} s, think {a.think:g} ms, "
        f"a login every {a.rounds} rounds; load {l0} -> {l1} on {os.cpu_count()} cores\n"
    )
    print("| operation | requests | per s | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|---|")
    for op in ["list", "get", "healthz", "login"]:
        v = samples.get(op, [])
        if not v:
            continue
        print(
            f"| {op}{' (baseline)' if op == 'healthz' else ''} | {len(v)} | {len(v) / secs:.0f} | "
            f"{pct(v, .5):.1f} | {pct(v, .9):.1f} | {pct(v, .99):.1f} | {max(v) * 1000:.1f} |"
        )
        if op in ("list", "get") and pct(v, 0.99) >= a.target_ms:
            ok = False
    print(f"\nerrors: {len(errors)} {errors[:5] if errors else ''}")
    if a.pid:
        print(
            f"server and Postgres (pids {a.pid} and their threads): {run:.1f} s on a CPU, "
            f"{wait:.1f} s ready but waiting for one"
        )
    ok = ok and not errors

    if a.create:
        res, deleted, l0, l1 = create_phase(a, prefix)
        print(f"\n### {a.create} concurrent creations (create + start); load {l0} -> {l1}\n")
        print("| project | seconds to running | status | error |")
        print("|---|---|---|---|")
        for i, (t, st, err) in enumerate(res):
            print(f"| c{i} | {t:.1f} | {st} | {err or ''} |")
            ok = ok and st == "running"
        ts = sorted(r[0] for r in res)
        print(f"\nall running after {ts[-1]:.1f} s (median {ts[len(ts) // 2]:.1f} s)")
        bad = [d for d in deleted if d[1] != 204]
        print(
            f"deleted {len(deleted) - len(bad)}/{len(deleted)}, "
            f"{max((d[0] for d in deleted), default=0):.1f} s at most"
        )
        ok = ok and not bad and len(deleted) == a.create
    print(f"\nresult: {'targets met' if ok else 'TARGET MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
