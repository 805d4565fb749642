import { describe, expect, it } from 'vitest';
import { convert, serializeFields } from '../../../src/app/forms/serialize';
import type { Field } from '../../../src/app/forms/serialize';

const text = (name: string, value: string, more: Partial<Field> = {}): Field => ({ name, value, control: 'text', ...more });

describe('serializeFields', () => {
  it('sends a stream as the StreamCreate body, omitting empty optional fields', () => {
    expect(
      serializeFields([
        text('sourceUrl', 'https://cdn.example.com/live/master.m3u8', { required: true }),
        text('name', 'Main channel'),
        text('targetRegion', ''),
      ]),
    ).toEqual({ sourceUrl: 'https://cdn.example.com/live/master.m3u8', name: 'Main channel' });
  });

  it('sends an empty required field as "" so the server explains it', () => {
    expect(serializeFields([text('label', '', { required: true })])).toEqual({ label: '' });
  });

  it('sends null for an empty field marked data-empty-as="null"', () => {
    expect(serializeFields([text('remindEvery', '', { emptyAsNull: true })])).toEqual({ remindEvery: null });
  });

  it('converts by data-type: a QoE alert rule', () => {
    expect(
      serializeFields([
        text('name', 'Failures EU'),
        text('kind', 'qoe'),
        text('metric', 'playbackFailurePct'),
        text('threshold', ' 5.5 ', { type: 'number' }),
        text('minViews', '25', { type: 'number' }),
        text('filter', 'deviceType:mobile, !browser:Safari,', { type: 'csv-list' }),
        { name: 'channelIds', value: 'ch_1', control: 'checkbox', checked: true },
        { name: 'channelIds', value: 'ch_2', control: 'checkbox', checked: false },
        { name: 'enabled', value: 'on', control: 'checkbox', checked: false },
      ]),
    ).toEqual({
      name: 'Failures EU',
      kind: 'qoe',
      metric: 'playbackFailurePct',
      threshold: 5.5,
      minViews: 25,
      filter: ['deviceType:mobile', '!browser:Safari'],
      channelIds: ['ch_1'],
      enabled: false,
    });
  });

  it('gives the checked radio, or nothing when none is checked', () => {
    const radios = (checked: string | null): Field[] =>
      ['webhook', 'slack'].map((v) => ({ name: 'type', value: v, control: 'radio', checked: v === checked }));
    expect(serializeFields(radios('slack'))).toEqual({ type: 'slack' });
    expect(serializeFields(radios(null))).toEqual({});
  });

  it('gives an array for a select multiple, even with one choice', () => {
    expect(serializeFields([{ name: 'channelIds', value: 'a', control: 'multiple', selected: ['a'] }])).toEqual({
      channelIds: ['a'],
    });
  });

  it('does not turn a blank number into 0', () => {
    expect(serializeFields([text('failAfter', '  ', { type: 'number' })])).toEqual({});
  });
});

describe('convert', () => {
  it('keeps what is not a number as typed, for the server to reject with its message', () => {
    expect(convert('3x', 'number')).toBe('3x');
  });
  it('reads select values of data-type boolean', () => {
    expect(convert('true', 'boolean')).toBe(true);
    expect(convert('false', 'boolean')).toBe(false);
  });
});
