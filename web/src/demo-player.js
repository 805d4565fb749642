// The demo player page's script (web/demo/player.html): plays `src` with the hls.js build this
// service serves and attaches the player SDK. It loads no script named by the query string:
// both imports are fixed paths on this origin.
import Hls from '/assets/vendor/hls.js@1.7.4/hls.light.min.mjs';
import { createTelemetry } from '/sdk/@service/player-sdk@0.2.0/dist/index.js';

const q = new URLSearchParams(location.search);
const src = q.get('src');
const key = q.get('key');
const status = document.getElementById('status');
const video = document.getElementById('video');
const say = (text) => (status.textContent = text);
document.getElementById('src').value = src || '';
document.getElementById('key').value = key || '';

function main() {
  if (!src || !key) return;
  const telemetry = createTelemetry({
    apiKey: key,
    ingestUrl: `${location.origin}/api/v1/telemetry`,
    session: { contentId: q.get('content') || src, tags: { page: 'demo' } },
    options: { flushIntervalMs: 2000, debug: true },
  });
  let hls = null;
  if (Hls.isSupported()) {
    hls = new Hls();
    hls.loadSource(src);
    hls.attachMedia(video);
  } else if (video.canPlayType('application/vnd.apple.mpegurl')) {
    video.src = src; // native HLS (Safari)
  } else {
    say('This browser cannot play HLS.');
    return;
  }
  telemetry.attach(video, { hls: hls || undefined });
  window.__sw = { telemetry, hls, video };
  say(`session ${telemetry.sessionId}\nevents go to ${location.origin}/api/v1/telemetry`);
  video.play().catch(() => say(`session ${telemetry.sessionId}\npress play to start`));
}

try {
  main();
} catch (e) {
  say(`failed: ${e && e.message}`);
}
