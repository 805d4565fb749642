//! The committed dashboard bundle: fresh (the server embeds web/dist as committed), within its
//! size budget, self-contained, and free of what the page CSP forbids.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const js = readFileSync(join(root, 'dist/app.js'));
const css = readFileSync(join(root, 'dist/app.css'));
const gz = (b: Buffer) => gzipSync(b, { level: 9 }).length;
/** Budget for everything a dashboard page loads (app.js + app.css), minified and gzipped. */
const BUDGET_GZIP_BYTES = 40 * 1024;

describe('web/dist', () => {
  it('is what a fresh build produces (run `npm run build` in web/ and commit web/dist)', () => {
    execFileSync(process.execPath, [join(root, 'scripts/build.mjs'), '--check'], { stdio: 'pipe' });
  });

  it(`app.js + app.css are at most ${BUDGET_GZIP_BYTES} bytes gzipped`, () => {
    console.log(`app.js ${js.length} B (${gz(js)} B gzip), app.css ${css.length} B (${gz(css)} B gzip)`);
    expect(gz(js) + gz(css)).toBeLessThanOrEqual(BUDGET_GZIP_BYTES);
  });

  it('app.js imports nothing and evaluates no strings', () => {
    const src = js.toString('utf8');
    expect(src).not.toMatch(/\bimport\s*[\s{*"'(]|require\(/);
    expect(src).not.toMatch(/\beval\(|new Function\b|setTimeout\(["'`]/);
  });

  it('app.css loads nothing from elsewhere', () => {
    expect(css.toString('utf8')).not.toMatch(/@import|url\(\s*["']?(https?:)?\/\//);
  });
});
