//! The event buffer: batches by size and by timer, splits batches to fit keepalive, retries with backoff, stays bounded.

import { backoffMs, MAX_ATTEMPTS, type Outcome } from './retry';
import { byteLength } from './send';
import type { TelemetryEvent } from '../events';
import type { Log } from '../session';

/** Largest body one batch is cut to, bytes; below the 64 KiB keepalive budget. */
export const MAX_BODY_BYTES = 60 * 1024;

export interface BatcherOptions {
  maxBatchSize: number;
  flushIntervalMs: number;
  /** Bound on events held (queued plus awaiting retry). */
  maxBuffered: number;
  /** Sends one batch; never rejects. */
  send: (events: TelemetryEvent[]) => Promise<Outcome>;
  /** JSON size of the envelope around the events, bytes; asked per batch (the context can grow). */
  envelopeBytes: () => number;
  log: Log;
  random?: () => number;
}

interface Pending {
  events: TelemetryEvent[];
  attempt: number;
  timer: ReturnType<typeof setTimeout>;
}

export class Batcher {
  private queue: TelemetryEvent[] = [];
  private retrying: Pending[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Events given up on: dropped by the bound, refused by the server, or out of retries. */
  dropped = 0;

  constructor(private readonly o: BatcherOptions) {}

  /** Buffers one event; sends at `maxBatchSize`, else arms the interval timer. */
  push(ev: TelemetryEvent): void {
    this.queue.push(ev);
    this.trim();
    if (this.queue.length >= this.o.maxBatchSize) void this.flush();
    else if (this.timer === undefined) this.timer = setTimeout(() => void this.flush(), this.o.flushIntervalMs);
  }

  /** Events held now, queued plus awaiting retry. */
  get size(): number {
    return this.retrying.reduce((n, p) => n + p.events.length, this.queue.length);
  }

  /**
   * Sends everything queued now. With `all`, batches waiting for a retry are sent now as
   * well (page going away: their timers would never fire). Resolves when these attempts
   * have settled; never rejects.
   */
  flush(all = false): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    const sends: Promise<void>[] = [];
    if (all) {
      for (const p of this.retrying.splice(0)) {
        clearTimeout(p.timer);
        sends.push(this.attempt(p.events, p.attempt));
      }
    }
    while (this.queue.length) sends.push(this.attempt(this.take(), 0));
    return Promise.all(sends).then(
      () => undefined,
      (e) => this.o.log('internal error', e),
    );
  }

  /** Stops the interval timer (retries already scheduled still run). */
  close(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Takes the next batch off the queue: at most maxBatchSize events and MAX_BODY_BYTES. */
  private take(): TelemetryEvent[] {
    let bytes = this.o.envelopeBytes();
    let n = 0;
    while (n < this.queue.length && n < this.o.maxBatchSize) {
      bytes += byteLength(JSON.stringify(this.queue[n])) + 1;
      if (n > 0 && bytes > MAX_BODY_BYTES) break;
      n++;
    }
    return this.queue.splice(0, n);
  }

  private attempt(events: TelemetryEvent[], previous: number): Promise<void> {
    const attempt = previous + 1;
    return this.o.send(events).catch((): Outcome => 'retry').then((outcome) => {
      if (outcome === 'ok') return;
      if (outcome === 'retry' && attempt < MAX_ATTEMPTS) {
        const p: Pending = {
          events,
          attempt,
          timer: setTimeout(() => {
            this.retrying = this.retrying.filter((x) => x !== p);
            void this.attempt(p.events, p.attempt);
          }, backoffMs(attempt, this.o.random)),
        };
        this.retrying.push(p);
        this.trim();
        return;
      }
      this.drop(events.length, outcome === 'retry' ? 'out of retries' : 'refused by the server');
    });
  }

  /** Enforces the bound by dropping the oldest events: those awaiting retry, then the queue. */
  private trim(): void {
    let over = this.size - this.o.maxBuffered;
    if (over <= 0) return;
    this.drop(over, 'buffer full');
    while (over > 0) {
      const p = this.retrying[0];
      if (p) {
        const cut = Math.min(over, p.events.length);
        p.events = p.events.slice(cut);
        over -= cut;
        if (!p.events.length) {
          clearTimeout(p.timer);
          this.retrying.shift();
        }
      } else {
        this.queue.splice(0, over);
        over = 0;
      }
    }
  }

  private drop(n: number, why: string): void {
    this.dropped += n;
    this.o.log(`dropped ${n} event(s): ${why} (${this.dropped} dropped in this session)`);
  }
}
