//! Server pages print timestamps in UTC; this shows them in the viewer's own zone (or as
//! "3 minutes ago") and keeps the exact UTC value in the `title`, so nothing is lost.

/**
 * Short date and time in the viewer's zone, e.g. "11/23/26, 3:30 PM"; `precise` adds the
 * seconds ("11/23/26, 3:30:05 PM") for events seconds apart.
 */
export function formatLocal(date: Date, locale?: string, timeZone?: string, precise = false): string {
  return new Intl.DateTimeFormat(locale, { dateStyle: 'short', timeStyle: precise ? 'medium' : 'short', timeZone }).format(date);
}

/** The exact instant in UTC, e.g. "2026-11-23 10:00:00 UTC" (what the server stored). */
export function formatUtc(date: Date): string {
  return `${date.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

const UNITS: [Intl.RelativeTimeFormatUnit, number][] = [
  ['year', 365 * 86400],
  ['month', 30 * 86400],
  ['day', 86400],
  ['hour', 3600],
  ['minute', 60],
  ['second', 1],
];

/** "3 minutes ago", "yesterday", "in 2 hours": the largest unit that is at least one. */
export function formatRelative(date: Date, now: Date, locale?: string): string {
  const seconds = (date.getTime() - now.getTime()) / 1000;
  const fmt = new Intl.RelativeTimeFormat(locale, { numeric: 'auto' });
  // Clock skew between server and viewer makes "in 2 seconds" for a fresh probe; say "now".
  if (Math.abs(seconds) < 10) return fmt.format(0, 'second');
  for (const [unit, size] of UNITS) {
    if (Math.abs(seconds) >= size) return fmt.format(Math.round(seconds / size), unit);
  }
  return fmt.format(0, 'second');
}

/**
 * A `datetime` that names an instant ("2026-11-23T10:00:00.000Z"); a date alone has no zone to
 * convert from, so it is left as the server wrote it.
 */
export function parseInstant(value: string | null): Date | null {
  if (!value || !value.includes('T')) return null;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? null : new Date(ms);
}

function render(el: HTMLTimeElement, now: Date): void {
  const date = parseInstant(el.getAttribute('datetime'));
  if (!date) return;
  const local = formatLocal(date, undefined, undefined, el.hasAttribute('data-precise'));
  if (el.hasAttribute('data-relative')) {
    el.textContent = formatRelative(date, now);
    el.title = `${local} (${formatUtc(date)})`;
  } else {
    el.textContent = local;
    el.title = formatUtc(date);
  }
}

/** Rewrites every `<time datetime>` under `root` in the viewer's zone. */
export function localizeTimes(root: ParentNode, now = new Date()): void {
  root.querySelectorAll<HTMLTimeElement>('time[datetime]').forEach((el) => render(el, now));
}

/** Keeps "n minutes ago" true while the page stays open. */
export function startRelativeClock(): void {
  setInterval(() => {
    const now = new Date();
    document.querySelectorAll<HTMLTimeElement>('time[datetime][data-relative]').forEach((el) => render(el, now));
  }, 30_000);
}
