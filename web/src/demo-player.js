// The demo player page's script (web/demo/player.html): plays `src` with the hls.js build this
// service serves and attaches the player SDK. It loads no script named by the parameters: both
// imports are fixed paths on this origin. What goes wrong is said on the page, in words: the
// state (loading, playing, paused, ended, failed) and, on failure, why — with the likely cause
// when the browser was not allowed to read the stream (CORS).
import Hls from '/assets/vendor/hls.js@1.7.4/hls.light.min.mjs';
import { createTelemetry } from '/sdk/@service/player-sdk@0.2.0/dist/index.js';

// The fragment keeps the key out of server logs and Referer headers; the query still works.
const params = new URLSearchParams(location.search);
for (const [k, v] of new URLSearchParams(location.hash.slice(1))) params.set(k, v);
const src = params.get('src');
const key = params.get('key');
const status = document.getElementById('status');
const stateEl = document.getElementById('state');
const errorEl = document.getElementById('error');
const video = document.getElementById('video');
const say = (text) => (status.textContent = text);
document.getElementById('src').value = src || '';
document.getElementById('key').value = key || '';

// Play sends the parameters in the fragment, not the query.
document.getElementById('play').addEventListener('submit', (e) => {
  e.preventDefault();
  const next = new URLSearchParams();
  for (const name of ['src', 'key']) next.set(name, document.getElementById(name).value.trim());
  if (params.get('content')) next.set('content', params.get('content'));
  location.hash = next.toString();
  location.reload();
});

const STATES = {
  idle: 'waiting for a stream and a key',
  loading: 'loading',
  playing: 'playing',
  paused: 'paused',
  ended: 'ended',
  failed: 'failed',
};
let failed = false;
function setState(state) {
  if (failed) return; // a failure stays on the page
  stateEl.dataset.state = state;
  stateEl.textContent = STATES[state];
}
function fail(message) {
  setState('failed');
  failed = true;
  errorEl.textContent = message;
  errorEl.hidden = false;
}

/** What a failed load of `what` (the manifest, a playlist, a segment) means, in words. */
function loadFailure(what, url, code) {
  let origin = url;
  try {
    origin = new URL(url, location.href).origin;
  } catch {
    // keep the raw text
  }
  if (code === 0 || code === undefined) {
    return (
      `Could not load the ${what} from ${origin}: the browser got no answer it may read. ` +
      `The origin probably needs CORS: it must answer with "Access-Control-Allow-Origin: ${location.origin}" (or "*"). ` +
      'Otherwise it is unreachable from this browser.'
    );
  }
  return `Could not load the ${what}: HTTP ${code} from ${url}.`;
}

/** hls.js fatal errors, as a sentence (hls.js names them in `details`). */
function hlsFailure(data) {
  const url = data.url || data.context?.url || data.frag?.url || src;
  const code = data.response?.code;
  const what = /^manifest/.test(data.details) ? 'manifest' : /^level|^audioTrack|^subtitleTrack/.test(data.details) ? 'playlist' : 'media segment';
  if (/LoadError$/.test(data.details)) return loadFailure(what, url, code);
  if (/LoadTimeOut$/.test(data.details)) return `Loading the ${what} from ${url} timed out.`;
  if (data.details === 'manifestParsingError') return `The manifest at ${url} is not a valid HLS playlist (${data.reason || data.error?.message || 'unreadable'}).`;
  if (data.type === 'mediaError') return `The browser could not play the media (${data.details}).`;
  return `Playback failed (${data.type}: ${data.details}).`;
}

function main() {
  if (!src || !key) return;
  setState('loading');
  const telemetry = createTelemetry({
    apiKey: key,
    ingestUrl: `${location.origin}/api/v1/telemetry`,
    session: { contentId: params.get('content') || src, tags: { page: 'demo' } },
    options: { flushIntervalMs: 2000, debug: true },
  });
  video.addEventListener('playing', () => setState('playing'));
  video.addEventListener('pause', () => !video.ended && setState('paused'));
  video.addEventListener('waiting', () => setState('loading'));
  video.addEventListener('ended', () => setState('ended'));
  let hls = null;
  if (Hls.isSupported()) {
    hls = new Hls();
    hls.on(Hls.Events.ERROR, (_event, data) => {
      if (data.fatal) fail(hlsFailure(data));
    });
    hls.loadSource(src);
    hls.attachMedia(video);
  } else if (video.canPlayType('application/vnd.apple.mpegurl')) {
    video.addEventListener('error', () => fail(`Playback failed: ${video.error?.message || `media error ${video.error?.code}`}. If the stream plays elsewhere, its origin probably needs CORS for ${location.origin}.`));
    video.src = src; // native HLS (Safari)
  } else {
    fail('This browser cannot play HLS.');
    return;
  }
  telemetry.attach(video, { hls: hls || undefined });
  window.__sw = { telemetry, hls, video };
  say(`session ${telemetry.sessionId}\nevents go to ${location.origin}/api/v1/telemetry`);
  video.play().catch(() => {
    if (!failed) {
      setState('paused');
      say(`session ${telemetry.sessionId}\npress play to start`);
    }
  });
}

try {
  main();
} catch (e) {
  fail(`The player could not start: ${e && e.message}`);
}
