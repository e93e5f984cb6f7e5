#!/usr/bin/env python3
"""Run commands interleaved (each round every command once, in a random
order) and print min / p25 / median wall time per command, in ms.

Usage: interleave.py [--prepare COMMAND] RUNS NAME=COMMAND... (COMMAND
split on spaces; a --prepare command runs, untimed, before each timed one;
leading VAR=VALUE words are added to this process's environment, as
env(1) would, without an env process in between). Under load the machine's noise
changes from second to second; interleaving spreads it evenly over the
commands, so their differences are meaningful even when the absolute
times are not. The launcher's own cost (posix_spawn + waitpid) is the
same for every command.
"""

import os
import random
import sys
import time


def main() -> int:
    args = sys.argv[1:]
    prep = None
    if args[0] == "--prepare":
        prep = args[1].split()
        args = args[2:]
    runs = int(args[0])
    cmds = []
    for spec in args[1:]:
        name, _, line = spec.partition("=")
        words = line.split()
        extra = {}
        while words and "=" in words[0]:
            k, _, v = words.pop(0).partition("=")
            extra[k] = v
        cmds.append((name, words, extra))
    times = {c[0]: [] for c in cmds}
    devnull = os.open(os.devnull, os.O_RDWR)
    fa = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1)]
    warm = 10
    for i in range(runs + warm):
        order = list(cmds)
        random.shuffle(order)
        for name, argv, extra in order:
            env = {**os.environ, **extra}
            if prep:
                pid = os.posix_spawn(prep[0], prep, os.environ, file_actions=fa)
                _, status = os.waitpid(pid, 0)
                if os.waitstatus_to_exitcode(status) != 0:
                    print(f"--prepare: exit {os.waitstatus_to_exitcode(status)}", file=sys.stderr)
                    return 1
            t0 = time.perf_counter_ns()
            pid = os.posix_spawn(argv[0], argv, env, file_actions=fa)
            _, status = os.waitpid(pid, 0)
            t1 = time.perf_counter_ns()
            if os.waitstatus_to_exitcode(status) != 0:
                print(f"{name}: exit {os.waitstatus_to_exitcode(status)}", file=sys.stderr)
                return 1
            if i >= warm:
                times[name].append((t1 - t0) / 1e6)
    for name, *_ in cmds:
        t = sorted(times[name])
        q = lambda p: t[min(len(t) - 1, int(p * len(t)))]
        print(f"{name} {t[0]:.3f} {q(0.25):.3f} {q(0.5):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
