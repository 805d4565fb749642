//! Frozen releases: the bundles in releases/ are served to pinned integrations and must never change.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * SHA-256 of each frozen bundle, taken from `sdk/dist/index.js` as committed when that version
 * was current (0.1.0: commit b4da657). A page that pinned `@0.1.0` gets these exact bytes forever.
 */
const FROZEN: Record<string, string> = {
  '0.1.0': 'a070db6f54739fc19eb8b1e645d1fc4822c0b991e429926a57587da3f080c25e',
};

describe('releases/', () => {
  for (const [version, sha256] of Object.entries(FROZEN)) {
    it(`releases/${version}/index.js is byte-identical to the ${version} bundle as released`, () => {
      const bytes = readFileSync(join(root, 'releases', version, 'index.js'));
      expect(createHash('sha256').update(bytes).digest('hex')).toBe(sha256);
      expect(bytes.toString('utf8').startsWith(`/*! @service/player-sdk ${version} | MIT */\n`)).toBe(true);
    });
  }
});
