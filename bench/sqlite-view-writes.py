#!/usr/bin/env python3
"""What a refresher step's view writes cost SQLite, statement by statement, on the embedded
store's own schema (migrations/telemetry-sqlite), outside the server: VIEWS stored views (two
tags each), then HOT of them written again in transactions of 256, as a step writes the
views that changed. Prints microseconds per view for each way of writing them:

- the replace the refresher used before (`SELECT version`, `INSERT OR REPLACE`, tags deleted
  and inserted again), views in any order;
- the same in the table's key order;
- an `UPDATE` by the table's key (what the refresher does now for a stored view whose
  `started_at` is unchanged), in key order, with and without the read of its tags that
  decides whether they are rewritten, and in any order.

Usage: bench/sqlite-view-writes.py [--views 100000] [--hot 20000] [--dir /tmp]
Python's sqlite3 adds a few microseconds per statement: compare the rows, not the server.
docs/benchmarks.md, "The refresher's view writes", has a run.
"""
import argparse
import os
import random
import sqlite3
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIGRATIONS = os.path.join(ROOT, "migrations", "telemetry-sqlite")
COLUMNS = (
    "owner, session_id, started_at, ended_at, started, first_frame_at, startup_ms, failed, "
    "failed_at, startup_failure, exit_before_start, rebuffer_count, rebuffer_ms, paused_ms, "
    "watch_time_ms, bitrate_weighted_sum, bitrate_covered_ms, rendition_switches, upshifts, "
    "downshifts, error_count, fatal_error_code, content_id, src, sdk, player, browser, os, "
    "device_type, batch_rows, event_rows, version, derived_at"
).split(", ")
REPLACE = "INSERT OR REPLACE INTO qoe_views (%s) VALUES (%s)" % (
    ", ".join(COLUMNS),
    ", ".join("?" * len(COLUMNS)),
)
UPDATE = "UPDATE qoe_views SET %s WHERE owner = ? AND started_at = ? AND session_id = ? " \
    "AND version <= ?" % ", ".join(c + " = ?" for c in COLUMNS[3:])
T0 = 1_714_521_600_000


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--views", type=int, default=100_000)
    p.add_argument("--hot", type=int, default=20_000)
    p.add_argument("--dir", default=tempfile.gettempdir())
    a = p.parse_args()
    rng = random.Random(7)
    d = tempfile.mkdtemp(dir=a.dir)
    db = sqlite3.connect(os.path.join(d, "views.db"), isolation_level=None)
    # The server's writer settings (ingest/src/sink/sqlite.rs).
    db.execute("PRAGMA page_size = 4096")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("PRAGMA cache_size = -16384")
    for f in sorted(os.listdir(MIGRATIONS)):
        db.executescript(open(os.path.join(MIGRATIONS, f)).read())
    owner = str(uuid.UUID(int=rng.getrandbits(128)))
    sessions = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(a.views)]
    start = {s: T0 + rng.randrange(86_400_000) for s in sessions}
    content = {s: rng.randrange(200) for s in sessions}

    def row(s, v):
        return (
            owner, s, start[s], start[s] + v * 1000, 1, start[s] + 500, 500.0, 0, None, 0, 0,
            1, 200, 0, v * 1000, 3e6 * v, v * 1000, 2, 1, 1, 0, None,
            "content-%d" % content[s], "https://cdn.example/live/%d/master.m3u8" % content[s],
            "streamwatch-js/0.2.0", "hls.js 1.5", "Chrome", "Windows", "desktop",
            v, v * 5, v * 2**32 + v * 5, 0,
        )

    def tags(s):
        for name, value in (("plan", "pro"), ("region", "eu")):
            db.execute("INSERT INTO qoe_view_tags VALUES (?, ?, ?, ?)", (owner, s, name, value))

    db.execute("BEGIN")
    for s in sessions:
        db.execute(REPLACE, row(s, 1))
        tags(s)
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    hot = rng.sample(sessions, a.hot)
    version = [1]

    def version_of(s):
        return db.execute(
            "SELECT version FROM qoe_views WHERE owner = ? AND session_id = ?", (owner, s)
        ).fetchone()

    def replace(s):
        version_of(s)
        db.execute(REPLACE, row(s, version[0]))
        db.execute("DELETE FROM qoe_view_tags WHERE owner = ? AND session_id = ?", (owner, s))
        tags(s)

    def update(s):
        r = row(s, version[0])
        db.execute(UPDATE, r[3:] + (owner, start[s], s, r[31]))

    def update_and_read_tags(s):
        update(s)
        db.execute(
            "SELECT name, value FROM qoe_view_tags WHERE owner = ? AND session_id = ? "
            "ORDER BY name",
            (owner, s),
        ).fetchall()

    def run(name, write, order):
        version[0] += 1
        if order == "key":
            hot.sort(key=lambda s: (-start[s], s))
        else:
            rng.shuffle(hot)
        t = time.perf_counter()
        for i in range(0, len(hot), 256):
            db.execute("BEGIN IMMEDIATE")
            for s in hot[i:i + 256]:
                write(s)
            db.execute("COMMIT")
        us = (time.perf_counter() - t) / len(hot) * 1e6
        print("%-44s %6.1f us/view" % ("%s, %s order" % (name, order), us))

    print("%d stored views, %d written again in 256-view transactions" % (a.views, a.hot))
    run("select + replace + tags (before)", replace, "any")
    run("select + replace + tags", replace, "key")
    run("update by key + read tags (now)", update_and_read_tags, "key")
    run("update by key", update, "key")
    run("update by key", update, "any")
    db.close()
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    os.rmdir(d)


if __name__ == "__main__":
    main()
