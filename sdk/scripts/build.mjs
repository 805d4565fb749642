//! Builds dist/: the minified ES module (esbuild) and the type declarations (tsc).
//! `node scripts/build.mjs --bundle-only OUTFILE` writes only the bundle, to OUTFILE (used by the staleness test).

import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

/** The one set of bundle options; dist/index.js is committed, so it must be reproducible. */
export const bundleOptions = (outfile) => ({
  absWorkingDir: root,
  entryPoints: ['src/index.ts'],
  outfile,
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['es2020'],
  minify: true,
  legalComments: 'none',
  banner: { js: `/*! @service/player-sdk ${version} | MIT */` },
  logLevel: 'warning',
});

const args = process.argv.slice(2);
if (args[0] === '--bundle-only') {
  await build(bundleOptions(args[1]));
} else if (import.meta.url === `file://${process.argv[1]}`) {
  rmSync(join(root, 'dist'), { recursive: true, force: true });
  await build(bundleOptions(join(root, 'dist/index.js')));
  execFileSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.json')], {
    stdio: 'inherit',
  });
}
