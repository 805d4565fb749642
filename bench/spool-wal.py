"""The spool's commit latency with its WAL file cut back at each restart
(`journal_size_limit = 0`, the spool before) against kept and written over
(8 MiB, ingest/src/spool/store.rs), alternating, on the spool's settings
(exclusive locking, WAL, synchronous=FULL, 4 KiB pages, incremental auto-vacuum).

Each commit appends 8 records of 1,000 bytes (a small group commit) and removes
the oldest past 4,000 held, as the drainer does. Prints p50/p90/p99/max commit
latency and the total per run. The spool's code is not involved (Python's
sqlite3, the system's SQLite): this measures the file-system effect alone.

With --busy, a thread writes and fsyncs 256 KiB files in a loop meanwhile (as
ClickHouse's new parts do on the same disk: the filesystem's journal is shared).

Usage: python3 bench/spool-wal.py [rounds (2)] [--busy]
Runs in /tmp/spool-wal or $SPOOL_WAL_DIR (removed and made again per run).
"""
import sqlite3, os, time, sys, shutil, threading
def run(limit, n=1500, size=1000):
    d=os.environ.get('SPOOL_WAL_DIR', '/tmp/spool-wal'); shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
    c=sqlite3.connect(d+'/spool.db', isolation_level=None)
    c.execute('PRAGMA locking_mode=EXCLUSIVE'); c.execute('PRAGMA page_size=4096'); c.execute('PRAGMA auto_vacuum=INCREMENTAL')
    c.execute('PRAGMA journal_mode=WAL'); c.execute('PRAGMA synchronous=FULL'); c.execute(f'PRAGMA journal_size_limit={limit}')
    c.execute('CREATE TABLE records(id INTEGER PRIMARY KEY, payload BLOB)')
    p=os.urandom(size); ts=[]; rid=0
    for i in range(n):
        t=time.perf_counter()
        c.execute('BEGIN'); 
        for k in range(8): rid+=1; c.execute('INSERT INTO records VALUES(?,?)',(rid,p))
        if rid>4000: c.execute('DELETE FROM records WHERE id<=?',(rid-4000,))
        c.execute('COMMIT'); ts.append((time.perf_counter()-t)*1000)
    c.close(); ts.sort()
    return f"limit {limit:>8}: p50 {ts[n//2]:.2f} p90 {ts[int(n*.9)]:.2f} p99 {ts[int(n*.99)]:.2f} max {ts[-1]:.1f} ms, total {sum(ts)/1000:.1f} s"
def busy(stop, d):
    os.makedirs(d, exist_ok=True)
    block, i = b'\0' * (256 << 10), 0
    while not stop.is_set():
        with open(f'{d}/f{i % 200}', 'wb') as f:
            f.write(block); f.flush(); os.fsync(f.fileno())
        i += 1

args = [a for a in sys.argv[1:] if a != '--busy']
stop = threading.Event()
if '--busy' in sys.argv:
    threading.Thread(target=busy, args=(stop, os.environ.get('SPOOL_WAL_DIR', '/tmp/spool-wal') + '-busy'), daemon=True).start()
for r in range(int(args[0]) if args else 2):
    for lim in (0, 8<<20):
        print(run(lim), flush=True)
stop.set()
