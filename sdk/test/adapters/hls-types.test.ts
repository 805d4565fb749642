//! Compile-time: a real hls.js instance is accepted by attach (checked by `npm run typecheck`).

import type Hls from 'hls.js';
import { describe, expect, it } from 'vitest';
import type { AttachOptions, TelemetryHandle } from '../../src/index';

describe('types', () => {
  it('accepts a real Hls instance as AttachOptions.hls', () => {
    const attachReal = (t: TelemetryHandle, video: HTMLVideoElement, hls: Hls) => t.attach(video, { hls });
    const opts: AttachOptions = { hls: undefined };
    expect(typeof attachReal).toBe('function');
    expect(opts.hls).toBeUndefined();
  });
});
