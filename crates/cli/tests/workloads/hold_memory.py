"""Processes that hold real data in anonymous memory, for `zmem advise
--system`'s tests.

    python3 hold_memory.py KIND MIB

KIND is one of:
- words: a Python heap of the Linux source's words (a list of str objects
  and a dict counting them), read from Debian's linux-source tarball, or,
  where it is missing, from the text files under /usr/share;
- binaries: the bytes of the files under /usr/lib and /usr/bin, in
  bytearrays;
- same: pages that are zero or filled with one repeated 8-byte value
  (what zram stores without memory), with a tenth of random pages;
- touch: MIB of memory, every page written once, then the first half read
  and written every second and the second half never (for --watch).

It holds about MIB MiB, prints "ready PAGES" on stdout and sleeps until its
standard input closes (the test ends or dies), so it never outlives the test.
"""

import glob
import lzma
import mmap
import os
import random
import sys
import tarfile
import threading
import time

PAGE = 4096


def rss_anon():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def words(target):
    held, counts = [], {}
    tarball = "/usr/src/linux-source-6.1.tar.xz"

    def texts():
        if os.path.exists(tarball):
            with tarfile.open(tarball, "r:xz") as tar:
                for m in tar:
                    if m.isfile() and m.name.endswith((".c", ".h", ".rst", ".txt")):
                        yield tar.extractfile(m).read()
        for path in glob.iglob("/usr/share/**/*", recursive=True):
            if os.path.isfile(path) and path.endswith((".txt", ".html", ".py", ".pl")):
                with open(path, "rb") as f:
                    yield f.read()

    while True:
        for data in texts():
            for w in data.decode("utf-8", "replace").split():
                held.append(w)
                counts[w] = counts.get(w, 0) + 1
            if rss_anon() >= target:
                return held, counts


def binaries(target):
    held, total = [], 0
    while True:
        for d in ("/usr/lib", "/usr/bin"):
            for root, _, files in os.walk(d):
                for name in files:
                    path = os.path.join(root, name)
                    if os.path.islink(path) or not os.path.isfile(path):
                        continue
                    try:
                        with open(path, "rb") as f:
                            b = bytearray(f.read(target - total))
                    except OSError:
                        continue
                    held.append(b)
                    total += len(b)
                    if total >= target:
                        return held


def same(target):
    rnd = random.Random(7)
    pages = target // PAGE
    buf = mmap.mmap(-1, pages * PAGE, flags=mmap.MAP_PRIVATE)
    for i in range(pages):
        r = rnd.random()
        if r < 0.5:
            page = bytes(PAGE)
        elif r < 0.9:
            page = rnd.getrandbits(64).to_bytes(8, "little") * (PAGE // 8)
        else:
            page = rnd.randbytes(PAGE)
        buf[i * PAGE:(i + 1) * PAGE] = page
    return buf


def touch(target):
    pages = target // PAGE
    buf = mmap.mmap(-1, pages * PAGE, flags=mmap.MAP_PRIVATE)
    for i in range(pages):
        buf[i * PAGE] = 1
    half = pages // 2

    def loop():
        while True:
            start = time.monotonic()
            for i in range(half):
                buf[i * PAGE] = (buf[i * PAGE] + 1) & 0xFF
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start)))

    threading.Thread(target=loop, daemon=True).start()
    return buf


def main():
    kind, mib = sys.argv[1], int(sys.argv[2])
    target = mib << 20
    held = {"words": words, "binaries": binaries, "same": same, "touch": touch}[kind](target)
    print("ready", rss_anon() // PAGE, flush=True)
    sys.stdin.read()
    del held


if __name__ == "__main__":
    main()
