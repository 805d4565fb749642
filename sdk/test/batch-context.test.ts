import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { CONTEXT_LIMITS, manifestUrl, playerName, SDK_NAME, SDK_VERSION, wireContext, wireTags } from '../src/batch-context';
import { FakeHls, FakeVideo } from './helpers';

const pkg = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), '../package.json'), 'utf8'));

describe('SDK_VERSION', () => {
  it('is the package.json version, and context.sdk is name@version', () => {
    expect(SDK_VERSION).toBe(pkg.version);
    expect(SDK_NAME).toBe(`${pkg.name}@${pkg.version}`);
  });
});

describe('wireTags', () => {
  it('keeps string values under non-empty keys, in order, the first 20', () => {
    const tags: Record<string, unknown> = { a: '1', b: 2, '': 'x', c: null, d: '' };
    for (let i = 0; i < 25; i++) tags[`t${i}`] = 'v';
    const out = wireTags(tags);
    expect(Object.keys(out)).toEqual(['a', 'd', ...Array.from({ length: 18 }, (_, i) => `t${i}`)]);
    expect(Object.keys(out)).toHaveLength(CONTEXT_LIMITS.tags);
  });

  it('cuts keys to 64 and values to 256 characters (code points); a key colliding after the cut is skipped', () => {
    const long = '😀'.repeat(64);
    const out = wireTags({ [long + 'a']: 'first', [long + 'b']: 'second', v: 'é'.repeat(257) });
    expect(out).toEqual({ [long]: 'first', v: 'é'.repeat(256) });
  });

  it('keeps a tag named __proto__ as an ordinary entry, and takes no tags from a non-object', () => {
    const out = wireTags(JSON.parse('{"__proto__":"x","a":"b"}'));
    expect(Object.keys(out)).toEqual(['__proto__', 'a']);
    expect(JSON.stringify(out)).toBe('{"__proto__":"x","a":"b"}');
    for (const bad of [undefined, null, 'a=b', 3]) expect(Object.keys(wireTags(bad))).toEqual([]);
  });
});

describe('playerName', () => {
  it('is "hls.js <Hls.version>" with an hls.js instance, "hls.js" without a version, else "native"', () => {
    expect(playerName(new FakeHls())).toBe('hls.js 1.7.4');
    expect(playerName({})).toBe('hls.js');
    expect(playerName(undefined)).toBe('native');
  });
});

describe('manifestUrl', () => {
  it("is hls.js's url with hls.js, else the element's currentSrc; never a blob: URL", () => {
    const v = new FakeVideo();
    v.currentSrc = 'https://cdn.example.com/v.m3u8';
    expect(manifestUrl(v.asMedia())).toBe('https://cdn.example.com/v.m3u8');
    const hls = new FakeHls();
    expect(manifestUrl(v.asMedia(), hls)).toBe('');
    hls.url = 'https://cdn.example.com/h.m3u8';
    expect(manifestUrl(v.asMedia(), hls)).toBe('https://cdn.example.com/h.m3u8');
    v.currentSrc = 'BLOB:https://app.example/1';
    expect(manifestUrl(v.asMedia())).toBe('');
  });
});

describe('wireContext', () => {
  it('sends sdk always and every other field only when it has a value, cut to its limit', () => {
    expect(wireContext('', {}, '', '')).toEqual({ sdk: SDK_NAME });
    expect(wireContext('c'.repeat(300), { a: 'b' }, 'p'.repeat(70), 's'.repeat(3000))).toEqual({
      sdk: SDK_NAME,
      player: 'p'.repeat(64),
      contentId: 'c'.repeat(256),
      src: 's'.repeat(2048),
      tags: { a: 'b' },
    });
  });
});
