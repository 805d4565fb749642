//! Reads a form's controls into the plain `Field` records that serialize.ts turns into JSON.

import type { Field } from './serialize';

type Control = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

const SKIPPED = new Set(['submit', 'button', 'reset', 'image', 'file']);

export function readFields(form: HTMLFormElement): Field[] {
  const fields: Field[] = [];
  for (const el of Array.from(form.elements) as Control[]) {
    if (!el.name || el.disabled || !('value' in el) || SKIPPED.has(el.type)) continue;
    const base = {
      name: el.name,
      value: el.value,
      type: el.dataset.type ?? null,
      required: el.required,
      emptyAsNull: el.dataset.emptyAs === 'null',
    };
    if (el instanceof HTMLSelectElement && el.multiple) {
      fields.push({ ...base, control: 'multiple', selected: Array.from(el.selectedOptions, (o) => o.value) });
    } else if (el instanceof HTMLInputElement && (el.type === 'checkbox' || el.type === 'radio')) {
      fields.push({ ...base, control: el.type, checked: el.checked });
    } else {
      fields.push({ ...base, control: 'text' });
    }
  }
  return fields;
}
