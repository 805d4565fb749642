import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Batcher, MAX_BODY_BYTES } from '../../src/transport/batcher';
import { MAX_ATTEMPTS, type Outcome } from '../../src/transport/retry';
import type { TelemetryEvent } from '../../src/events';

const ev = (i: number, pad = ''): TelemetryEvent => ({
  type: 'error',
  ts: new Date(1_700_000_000_000 + i).toISOString(),
  payload: { code: `c${i}`, message: pad, fatal: false },
});

function make(opts: Partial<ConstructorParameters<typeof Batcher>[0]> = {}, answer: (n: number) => Outcome = () => 'ok') {
  const sent: TelemetryEvent[][] = [];
  const send = vi.fn(async (events: TelemetryEvent[]) => {
    sent.push([...events]);
    return answer(sent.length);
  });
  const log = vi.fn();
  const b = new Batcher({ maxBatchSize: 5, flushIntervalMs: 10_000, maxBuffered: 100, envelopeBytes: () => 60, send, log, random: () => 1, ...opts });
  return { b, sent, send, log };
}

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

describe('Batcher', () => {
  it('sends a batch as soon as maxBatchSize events are buffered', async () => {
    const { b, sent } = make();
    for (let i = 0; i < 4; i++) b.push(ev(i));
    expect(sent).toHaveLength(0);
    b.push(ev(4));
    await vi.advanceTimersByTimeAsync(0);
    expect(sent).toEqual([[ev(0), ev(1), ev(2), ev(3), ev(4)]]);
  });

  it('sends what is buffered every flushIntervalMs', async () => {
    const { b, sent } = make();
    b.push(ev(0));
    b.push(ev(1));
    await vi.advanceTimersByTimeAsync(9_999);
    expect(sent).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(sent).toEqual([[ev(0), ev(1)]]);
    // nothing buffered: no empty batch
    await vi.advanceTimersByTimeAsync(30_000);
    expect(sent).toHaveLength(1);
    b.push(ev(2));
    await vi.advanceTimersByTimeAsync(10_000);
    expect(sent[1]).toEqual([ev(2)]);
  });

  it('flush sends everything buffered in batches of at most maxBatchSize', async () => {
    const { b, sent } = make({ maxBatchSize: 1000 });
    for (let i = 0; i < 12; i++) b.push(ev(i));
    await b.flush();
    expect(sent.map((s) => s.length)).toEqual([12]);
    // with maxBatchSize 5, pushes send two full batches, flush sends the last 2
    const { b: b2, sent: sent2 } = make({ maxBatchSize: 5 });
    for (let i = 0; i < 12; i++) b2.push(ev(i));
    await b2.flush();
    expect(sent2.map((s) => s.length)).toEqual([5, 5, 2]);
  });

  it('cuts batches so that a body stays under the keepalive limit', async () => {
    const { b, sent } = make({ maxBatchSize: 1000, maxBuffered: 1000 });
    const pad = 'x'.repeat(1000);
    for (let i = 0; i < 150; i++) b.push(ev(i, pad));
    await b.flush();
    expect(sent.length).toBeGreaterThan(1);
    for (const batch of sent) {
      expect(JSON.stringify({ apiKey: 'k', sessionId: 's', events: batch }).length).toBeLessThanOrEqual(MAX_BODY_BYTES);
    }
    expect(sent.flat()).toHaveLength(150);
  });

  it('asks for the envelope size at every batch, so a growing context still fits', async () => {
    let envelope = 60;
    const { b, sent } = make({ maxBatchSize: 1000, maxBuffered: 1000, envelopeBytes: () => envelope });
    const pad = 'x'.repeat(1000);
    const perEvent = JSON.stringify(ev(0, pad)).length + 1;
    for (let i = 0; i < 100; i++) b.push(ev(i, pad));
    await b.flush();
    const small = Math.floor((MAX_BODY_BYTES - 60) / perEvent);
    expect(sent.map((s) => s.length)).toEqual([small, 100 - small]);
    envelope = 20_000; // e.g. a long src became known
    sent.length = 0;
    for (let i = 0; i < 100; i++) b.push(ev(i, pad));
    await b.flush();
    const big = Math.floor((MAX_BODY_BYTES - 20_000) / perEvent);
    expect(sent.map((s) => s.length)).toEqual([big, big, 100 - 2 * big]);
  });

  it('retries a failed batch with growing jittered delays, the same events each time', async () => {
    const { b, sent } = make({}, (n) => (n <= 3 ? 'retry' : 'ok'));
    b.push(ev(0));
    await b.flush();
    expect(sent).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(999); // first retry after 1 s (random=1)
    expect(sent).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(sent).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(1999); // then 2 s
    expect(sent).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(sent).toHaveLength(3);
    await vi.advanceTimersByTimeAsync(4000); // then 4 s, answered ok
    expect(sent).toHaveLength(4);
    await vi.advanceTimersByTimeAsync(120_000);
    expect(sent).toHaveLength(4);
    expect(new Set(sent.map((s) => JSON.stringify(s))).size).toBe(1);
    expect(b.dropped).toBe(0);
  });

  it('applies jitter: a random of 0 halves the delay', async () => {
    const { b, sent } = make({ random: () => 0 }, (n) => (n === 1 ? 'retry' : 'ok'));
    b.push(ev(0));
    await b.flush();
    await vi.advanceTimersByTimeAsync(500);
    expect(sent).toHaveLength(2);
  });

  it('gives up after MAX_ATTEMPTS and counts the events as dropped', async () => {
    const { b, sent } = make({}, () => 'retry');
    b.push(ev(0));
    b.push(ev(1));
    await b.flush();
    await vi.advanceTimersByTimeAsync(10 * 60_000);
    expect(sent).toHaveLength(MAX_ATTEMPTS);
    expect(b.dropped).toBe(2);
    expect(b.size).toBe(0);
  });

  it('does not retry a refused batch (400/401)', async () => {
    const { b, sent, log } = make({}, () => 'drop');
    b.push(ev(0));
    await b.flush();
    await vi.advanceTimersByTimeAsync(10 * 60_000);
    expect(sent).toHaveLength(1);
    expect(b.dropped).toBe(1);
    expect(log).toHaveBeenCalledWith(expect.stringContaining('refused by the server'));
  });

  it('flush(all) sends batches waiting for a retry at once', async () => {
    const { b, sent } = make({}, (n) => (n === 1 ? 'retry' : 'ok'));
    b.push(ev(0));
    await b.flush();
    b.push(ev(1));
    await b.flush(true);
    expect(sent).toEqual([[ev(0)], [ev(0)], [ev(1)]]);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(sent).toHaveLength(3);
  });

  it('holds at most maxBuffered events, dropping the oldest and counting them', async () => {
    const { b, sent, log } = make({ maxBuffered: 10, maxBatchSize: 1000 });
    for (let i = 0; i < 25; i++) b.push(ev(i));
    expect(b.size).toBe(10);
    expect(b.dropped).toBe(15);
    expect(log).toHaveBeenCalledWith(expect.stringContaining('buffer full'));
    await b.flush();
    expect(sent).toEqual([Array.from({ length: 10 }, (_, i) => ev(15 + i))]);
  });

  it('counts events awaiting retry against the bound and drops those first', async () => {
    const { b, sent } = make({ maxBuffered: 6, maxBatchSize: 4 }, (n) => (n === 1 ? 'retry' : 'ok'));
    for (let i = 0; i < 4; i++) b.push(ev(i)); // batch 0..3 fails, awaits retry
    await vi.advanceTimersByTimeAsync(0);
    expect(b.size).toBe(4);
    b.push(ev(4));
    b.push(ev(5));
    b.push(ev(6)); // 7 held > 6: ev(0) goes
    expect(b.size).toBe(6);
    expect(b.dropped).toBe(1);
    await b.flush(true);
    expect(sent.slice(1).flat()).toEqual([1, 2, 3, 4, 5, 6].map((i) => ev(i)));
  });

  it('close stops the interval timer', async () => {
    const { b, sent } = make();
    b.push(ev(0));
    b.close();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(sent).toHaveLength(0);
  });
});
