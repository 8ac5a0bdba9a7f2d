"""What the children of a process see of its descriptors: an unserved one,
served ones started by vfork and by fork, one started by posix_spawn with
descriptor 0 closed, and one whose region cannot start. `zmem run`'s tests
compare this output with the plain run's."""
import os, subprocess, sys
# One descriptor passed on purpose: inheritable, at a number of its own.
given = os.dup2(os.open(os.devnull, os.O_RDONLY), 40)
os.set_inheritable(given, True)
check = "import os\nfds = []\nfor fd in range(256):\n    try:\n        os.fstat(fd)\n        fds.append(fd)\n    except OSError:\n        pass\nprint(fds)"
def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)
# An unserved program (no preload) sees what it inherited.
print("inherited", run(["env", "-u", "LD_PRELOAD", "ls", "/proc/self/fd"], close_fds=False).stdout.split())
# A served one sees nothing of its own region in the first 256 numbers,
# whether started by vfork/exec or by fork/exec (preexec_fn forces fork).
print("served", run([sys.executable, "-c", check], close_fds=False).stdout.strip())
print("forked", run([sys.executable, "-c", check], pass_fds=[given], preexec_fn=lambda: None).stdout.strip())
# posix_spawn with fd 0 closed: the new program must find 0 closed.
r, w = os.pipe()
pid = os.posix_spawn(sys.executable, [sys.executable, "-c",
    "import os\ntry:\n    os.fstat(0); print('0 open')\nexcept OSError as e:\n    print('0 closed', e.errno)"],
    os.environ, file_actions=[(os.POSIX_SPAWN_CLOSE, 0), (os.POSIX_SPAWN_DUP2, w, 1)])
os.close(w)
os.waitpid(pid, 0)
print("spawned", os.read(r, 100).decode().strip())
# A process that cannot make its region says so in the statistics only.
bad = run([sys.executable, "-c", "print('ok')"], env={**os.environ, "ZMEM_RUN_SOFT_DIRTY": "maybe"})
print("unserved", bad.stdout.strip(), repr(bad.stderr))
