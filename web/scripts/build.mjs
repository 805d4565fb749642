// Builds web/dist, the browser files the streamwatch binary embeds (src/http/assets.rs):
// - the pinned hls.js build the demo player loads (served from the binary, never a CDN, so the
//   page works offline and no third party can swap the script under it);
// - app.js and app.css, the dashboard's one module and stylesheet (src/app/, bundled with
//   uPlot by esbuild: one self-contained file each, no import at run time).
//
// `npm run build` writes web/dist; `npm run check` fails when the committed files differ from
// what a build would write (esbuild's output is deterministic, so a byte compare is exact).
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const check = process.argv.includes('--check');
const version = (pkg) => JSON.parse(readFileSync(join(root, `node_modules/${pkg}/package.json`), 'utf8')).version;
const hlsVersion = version('hls.js');

/** The dashboard bundle: minified ES2020, uPlot included, its licence kept in a banner. */
async function dashboard() {
  const result = await build({
    absWorkingDir: root,
    entryPoints: [
      { in: 'src/app/main.ts', out: 'app' },
      { in: 'src/app/app.css', out: 'app' },
    ],
    outdir: 'dist',
    write: false,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: ['es2020'],
    minify: true,
    legalComments: 'none',
    banner: {
      js: `/*! streamwatch dashboard | includes uPlot ${version('uplot')} (c) Leon Sorokin, MIT */`,
      css: `/*! streamwatch dashboard | includes uPlot ${version('uplot')} styles (c) Leon Sorokin, MIT */`,
    },
    logLevel: 'warning',
  });
  return result.outputFiles.map((f) => [f.path.slice(join(root, 'dist').length + 1), Buffer.from(f.contents)]);
}

/** [output path under dist, bytes] */
const outputs = [
  [`vendor/hls.js@${hlsVersion}/hls.light.min.mjs`, readFileSync(join(root, 'node_modules/hls.js/dist/hls.light.min.mjs'))],
  [`vendor/hls.js@${hlsVersion}/LICENSE`, readFileSync(join(root, 'node_modules/hls.js/LICENSE'))],
  ...(await dashboard()),
];

const sha = (b) => createHash('sha256').update(b).digest('hex');
let stale = [];
for (const [path, bytes] of outputs) {
  const file = join(root, 'dist', path);
  if (check) {
    if (!existsSync(file) || sha(readFileSync(file)) !== sha(bytes)) stale.push(path);
  } else {
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, bytes);
    console.log(`wrote dist/${path} (${bytes.length} bytes)`);
  }
}
if (stale.length) {
  console.error(`web/dist is stale (run npm run build in web/): ${stale.join(', ')}`);
  process.exit(1);
}
if (check) console.log('web/dist is up to date');
