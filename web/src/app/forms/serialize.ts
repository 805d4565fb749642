//! Form fields → the JSON body the API expects (interface.md, alerts.md). Pure: the DOM is read
//! into plain `Field` records first (read-fields.ts), so the rules are unit-tested in node.

/** One named form control, as read from the page. */
export interface Field {
  name: string;
  value: string;
  /** `checkbox` and `radio` carry `checked`; `multiple` is a `<select multiple>`. */
  control: 'text' | 'checkbox' | 'radio' | 'multiple';
  checked?: boolean;
  /** The chosen options of a `<select multiple>`. */
  selected?: string[];
  /** `data-type`: `number`, `boolean`, `csv-list`; anything else (or none) is a string. */
  type?: string | null;
  required?: boolean;
  /** `data-empty-as="null"`: an empty value is sent as `null` (clears an optional field). */
  emptyAsNull?: boolean;
}

export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

/** Converts one non-empty value by its `data-type`. */
export function convert(value: string, type?: string | null): Json {
  switch (type) {
    case 'number': {
      const n = Number(value.trim());
      // Not a number: sent as typed, so the server answers with its own field message.
      return Number.isFinite(n) ? n : value;
    }
    case 'boolean':
      return value === 'true' || value === 'on' || value === '1';
    case 'csv-list':
      return value
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
    default:
      return value;
  }
}

/**
 * The JSON object of a form: every named field once; several controls of one name (a group
 * of checkboxes) or a `<select multiple>` give an array; a lone checkbox gives a boolean.
 * Empty optional fields are omitted, so a PATCH leaves them unchanged; empty required fields
 * are sent as `""` so the server's message is shown; `emptyAsNull` sends `null`.
 */
export function serializeFields(fields: Field[]): Record<string, Json> {
  const groups = new Map<string, Field[]>();
  for (const f of fields) groups.set(f.name, [...(groups.get(f.name) ?? []), f]);

  const out: Record<string, Json> = {};
  for (const [name, group] of groups) {
    const first = group[0];
    if (first.control === 'multiple') {
      out[name] = (first.selected ?? []).map((v) => convert(v, first.type));
    } else if (first.control === 'checkbox' && group.length > 1) {
      out[name] = group.filter((f) => f.checked).map((f) => convert(f.value, f.type));
    } else if (first.control === 'checkbox') {
      out[name] = Boolean(first.checked);
    } else {
      const chosen = first.control === 'radio' ? group.find((f) => f.checked) : first;
      if (!chosen) continue;
      if (chosen.value.trim() !== '') out[name] = convert(chosen.value, chosen.type);
      else if (chosen.emptyAsNull) out[name] = null;
      else if (chosen.required) out[name] = '';
    }
  }
  return out;
}
