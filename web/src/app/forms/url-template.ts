//! `data-redirect="/app/streams/{id}"`: fills `{name}` from the response body.

/**
 * The filled path, or null when a placeholder has no value in the body or the result would
 * leave this origin (a value is URL-encoded, so it cannot add a path or a host).
 */
export function fillUrl(template: string, body: unknown, base: string): string | null {
  const values = (body && typeof body === 'object' ? body : {}) as Record<string, unknown>;
  let missing = false;
  const path = template.replace(/\{(\w+)\}/g, (_, key: string) => {
    const v = values[key];
    if (typeof v !== 'string' && typeof v !== 'number') {
      missing = true;
      return '';
    }
    return encodeURIComponent(String(v));
  });
  if (missing) return null;
  const url = new URL(path, base);
  return url.origin === new URL(base).origin ? url.href : null;
}
