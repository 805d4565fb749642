//! E2E media: an HLS VOD with two renditions made with ffmpeg, and a static file server with CORS `*`.

import { execFileSync } from 'node:child_process';
import { createReadStream, existsSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, normalize } from 'node:path';

const TYPES = {
  '.m3u8': 'application/vnd.apple.mpegurl',
  '.ts': 'video/mp2t',
  '.mjs': 'text/javascript',
  '.js': 'text/javascript',
  '.html': 'text/html; charset=utf-8',
  '.map': 'application/json',
};

/**
 * Writes an ~8 s HLS VOD into `dir`: 640x360 @ 400 kbit/s and 1280x720 @ 1500 kbit/s,
 * H.264, 2 s segments, master.m3u8 with BANDWIDTH and RESOLUTION.
 */
export function makeHls(dir, ffmpeg = process.env.FFMPEG_BIN || '/usr/bin/ffmpeg', seconds = 8) {
  execFileSync(
    ffmpeg,
    [
      '-hide_banner', '-loglevel', 'error', '-y',
      '-f', 'lavfi', '-i', `testsrc=size=1280x720:rate=25:duration=${seconds}`,
      '-filter_complex', '[0:v]split=2[a][b];[a]scale=640:360[v0];[b]scale=1280:720[v1]',
      '-map', '[v0]', '-map', '[v1]',
      '-c:v', 'libx264', '-preset', 'veryfast', '-profile:v', 'main', '-pix_fmt', 'yuv420p',
      '-g', '50', '-keyint_min', '50', '-sc_threshold', '0',
      '-b:v:0', '400k', '-maxrate:v:0', '440k', '-bufsize:v:0', '800k',
      '-b:v:1', '1500k', '-maxrate:v:1', '1650k', '-bufsize:v:1', '3000k',
      '-f', 'hls', '-hls_time', '2', '-hls_playlist_type', 'vod',
      '-hls_segment_filename', join(dir, 'v%v/seg%d.ts'),
      '-master_pl_name', 'master.m3u8',
      '-var_stream_map', 'v:0 v:1',
      join(dir, 'v%v/index.m3u8'),
    ],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  const master = join(dir, 'master.m3u8');
  if (!existsSync(master)) throw new Error('ffmpeg wrote no master.m3u8');
  return master;
}

/**
 * Serves `mounts` ({ '/prefix': '/dir' }) on 127.0.0.1:<random> with CORS `*`. Resolves to
 * { url, close, hold, release }: `hold(re)` makes every request whose path matches `re` wait
 * (unanswered) until `release()`, so a test forces a stall at a known place without guessing
 * how long one takes; `held()` tells how many requests are waiting.
 */
export function serveStatic(mounts) {
  let holding = null;
  let waiting = [];
  const serve = (req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    for (const [prefix, dir] of Object.entries(mounts)) {
      if (!path.startsWith(prefix + '/')) continue;
      const file = normalize(join(dir, path.slice(prefix.length)));
      if (!file.startsWith(dir) || !existsSync(file) || !statSync(file).isFile()) break;
      res.writeHead(200, { 'content-type': TYPES[extname(file)] || 'application/octet-stream' });
      return createReadStream(file).pipe(res);
    }
    res.writeHead(404).end('not found');
  };
  const server = createServer((req, res) => {
    res.setHeader('access-control-allow-origin', '*');
    if (req.method === 'OPTIONS') return res.writeHead(204).end();
    if (holding && holding.test(new URL(req.url, 'http://x').pathname)) {
      waiting.push(() => serve(req, res));
      return;
    }
    serve(req, res);
  });
  const release = () => {
    holding = null;
    const go = waiting;
    waiting = [];
    for (const g of go) g();
  };
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${server.address().port}`,
        hold: (re) => (holding = re),
        held: () => waiting.length,
        release,
        close: () => {
          release();
          server.closeAllConnections();
          return new Promise((r) => server.close(r));
        },
      }),
    ),
  );
}
