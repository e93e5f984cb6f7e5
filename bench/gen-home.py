#!/usr/bin/env python3
"""A synthetic agent home for bench/backup.sh: ~20,000 files, ~200 MB.

node_modules-like trees of small files, a .git with loose objects and
packs, a few large blobs, dotfiles with tight modes. Deterministic."""
import os, random, sys

root = sys.argv[1]
rnd = random.Random(42)
total = 0

def write(rel, size, mode=0o644):
    global total
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(rnd.randbytes(size))
    os.chmod(p, mode)
    total += size

# 17,000 small files in 400 packages, like node_modules.
for pkg in range(400):
    for i in range(42):
        write(f"project/node_modules/pkg{pkg}/lib/m{i}.js", rnd.randint(200, 4000))
    write(f"project/node_modules/pkg{pkg}/package.json", 600)
# A .git: 2,500 loose objects and three packs.
for i in range(2500):
    h = "%040x" % rnd.getrandbits(160)
    write(f"project/.git/objects/{h[:2]}/{h[2:]}", rnd.randint(100, 3000), 0o444)
for i in range(3):
    write(f"project/.git/objects/pack/pack-{i}.pack", 25 << 20, 0o444)
# Large blobs and some tight-mode dotfiles.
for i in range(3):
    write(f"data/blob{i}.bin", 20 << 20)
write(".ssh/id_ed25519", 400, 0o600)
write(".claude/settings.json", 2000, 0o600)
os.symlink("project/node_modules/pkg0", os.path.join(root, "link-to-pkg0"))
os.makedirs(os.path.join(root, "empty/dir"), exist_ok=True)
n = sum(len(f) for _, _, f in os.walk(root))
print(f"{n} files, {total >> 20} MiB", file=sys.stderr)
