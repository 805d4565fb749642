import { describe, expect, it } from 'vitest';
import { fillUrl } from '../../../src/app/forms/url-template';

const base = 'https://sw.example.com/app/streams';

describe('fillUrl', () => {
  it('fills placeholders from the response', () => {
    expect(fillUrl('/app/streams/{id}', { id: 'cl_9x' }, base)).toBe('https://sw.example.com/app/streams/cl_9x');
  });
  it('encodes values so they cannot add a path or a host', () => {
    expect(fillUrl('/app/streams/{id}', { id: '../../x?y' }, base)).toBe('https://sw.example.com/app/streams/..%2F..%2Fx%3Fy');
    expect(fillUrl('/{id}', { id: '/evil.example' }, base)).toBe('https://sw.example.com/%2Fevil.example');
  });
  it('gives null when a value is missing (a 204) or the template leaves the origin', () => {
    expect(fillUrl('/app/keys/{id}', null, base)).toBeNull();
    expect(fillUrl('https://elsewhere.example/', {}, base)).toBeNull();
  });
});
