import { afterEach, describe, expect, it, vi } from 'vitest';
import { KEEPALIVE_BUDGET, postBatch } from '../../src/transport/send';
import { fakeFetch } from '../helpers';

afterEach(() => vi.unstubAllGlobals());

const body = (n = 1) => JSON.stringify({ apiKey: 'svc_k', sessionId: 's', events: Array(n).fill({ type: 'x' }) });

describe('postBatch', () => {
  it('posts JSON with the bearer key and keepalive, without cookies', async () => {
    const f = fakeFetch();
    expect(await postBatch('https://h/api/v1/telemetry', 'svc_k', body(), () => {})).toBe('ok');
    const { url, init } = f.calls[0];
    expect(url).toBe('https://h/api/v1/telemetry');
    expect(init.method).toBe('POST');
    expect(init.keepalive).toBe(true);
    expect(init.credentials).toBe('omit');
    expect(init.headers).toEqual({ 'content-type': 'application/json', authorization: 'Bearer svc_k' });
  });

  it('reports a network error as retryable', async () => {
    fakeFetch(() => new TypeError('Failed to fetch'));
    expect(await postBatch('u', 'k', body(), () => {})).toBe('retry');
  });

  it('reports 500 as retryable and 400/401 as dropped, logging the status', async () => {
    const log = vi.fn();
    for (const [status, outcome] of [[500, 'retry'], [400, 'drop'], [401, 'drop']] as const) {
      fakeFetch(() => status);
      expect(await postBatch('u', 'k', body(), log)).toBe(outcome);
      expect(log).toHaveBeenLastCalledWith(expect.stringContaining(String(status)));
    }
  });

  it('keeps keepalive bodies in flight under 64 KiB', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const seen: boolean[] = [];
    vi.stubGlobal('fetch', async (_u: string, init: RequestInit) => {
      seen.push(init.keepalive!);
      await gate;
      return { status: 204 } as Response;
    });
    const big = 'x'.repeat(40 * 1024);
    const a = postBatch('u', 'k', big, () => {});
    const b = postBatch('u', 'k', big, () => {});
    release();
    await Promise.all([a, b]);
    expect(seen).toEqual([true, false]);
    // the budget is given back once the requests settle
    await postBatch('u', 'k', big, () => {});
    expect(seen[2]).toBe(true);
    expect(KEEPALIVE_BUDGET).toBe(65536);
  });
});
