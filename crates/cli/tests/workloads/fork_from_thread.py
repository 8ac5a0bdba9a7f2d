# A thread that is not the main one forks; the child prints what CPython's
# threading module says of its main thread and returns (its one thread ends).
import os, threading, sys
def func():
    pid = os.fork()
    if pid == 0:
        main = threading.main_thread()
        print(main.name)
        print(main.ident == threading.current_thread().ident)
        print(main.ident == threading.get_ident())
        sys.stdout.flush()
    else:
        _, st = os.waitpid(pid, 0)
        print("child status", st)
th = threading.Thread(target=func)
th.start()
th.join()
