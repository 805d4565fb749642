"""The disk's sync of a plain file: 8 KiB written then synced, 600 times, 1 ms apart,
appended to a growing file or written over a file of that size written before;
each with fsync and with fdatasync. Prints p50/p90/p99 per case.

The server's SQLite (libsqlite3-sys, bundled, no HAVE_FDATASYNC) syncs with fsync;
Debian's (Python's sqlite3) with fdatasync: this says whether that matters for
bytes written over (docs/benchmarks.md, "The spool's fsync: writing over its WAL").

Usage: python3 bench/fsync-overwrite.py [rounds (2)]   (file: /tmp/fsync-overwrite)
"""
import os, sys, time
def run(path, mode, sync, n=600, size=8192):
    fd = os.open(path, os.O_RDWR|os.O_CREAT|os.O_TRUNC, 0o644)
    if mode == 'overwrite':
        os.write(fd, b'\0'*(size*n)); os.fsync(fd); os.lseek(fd,0,0)
    buf = os.urandom(size); ts=[]
    for i in range(n):
        os.write(fd, buf)
        t=time.perf_counter(); sync(fd); ts.append((time.perf_counter()-t)*1000)
        time.sleep(0.001)
    os.close(fd); os.unlink(path); ts.sort()
    return f"{mode:9} {sync.__name__:9}: p50 {ts[n//2]:.2f} p90 {ts[int(n*.9)]:.2f} p99 {ts[int(n*.99)]:.2f} ms"
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    for mode in ('append','overwrite'):
        for s in (os.fsync, os.fdatasync):
            print(run('/tmp/fsync-overwrite',mode,s), flush=True)
