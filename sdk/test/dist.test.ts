//! The committed bundle: fresh (the server embeds dist/index.js as committed) and within the size budget.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist/index.js');
/** Budget for dist/index.js, minified and gzipped, bytes. */
const BUDGET_GZIP_BYTES = 5120;

describe('dist/index.js', () => {
  it('is what a fresh build produces (run `npm run build` and commit dist/index.js)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'player-sdk-build-'));
    try {
      const out = join(dir, 'index.js');
      execFileSync(process.execPath, [join(root, 'scripts/build.mjs'), '--bundle-only', out]);
      expect(readFileSync(dist, 'utf8') === readFileSync(out, 'utf8'), 'dist/index.js is stale').toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it(`is at most ${BUDGET_GZIP_BYTES} bytes minified and gzipped`, () => {
    const size = gzipSync(readFileSync(dist), { level: 9 }).length;
    console.log(`dist/index.js: ${readFileSync(dist).length} bytes, ${size} bytes gzipped`);
    expect(size).toBeLessThanOrEqual(BUDGET_GZIP_BYTES);
  });

  it('is a self-contained ES module exporting createTelemetry', async () => {
    const src = readFileSync(dist, 'utf8');
    expect(src).not.toMatch(/\bimport\s*[\s{*"']|require\(/);
    const mod = await import(dist);
    expect(Object.keys(mod)).toEqual(['createTelemetry']);
    expect(mod.createTelemetry({ apiKey: 'k', ingestUrl: 'u' }).sessionId).toBeTypeOf('string');
  });
});
