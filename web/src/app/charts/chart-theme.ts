//! Chart colors come from CSS custom properties (app.css), so one stylesheet decides them for
//! light and dark; they are read again whenever the color scheme changes.

export interface ChartTheme {
  text: string;
  grid: string;
  line: string;
  lineFill: string;
  second: string;
  secondFill: string;
  third: string;
  healthy: string;
  degraded: string;
  failing: string;
}

const VARS: Record<keyof ChartTheme, string> = {
  text: '--chart-text',
  grid: '--chart-grid',
  line: '--chart-line',
  lineFill: '--chart-line-fill',
  second: '--chart-second',
  secondFill: '--chart-second-fill',
  third: '--chart-third',
  healthy: '--status-healthy',
  degraded: '--status-degraded',
  failing: '--status-failing',
};

/** The theme as computed for `el` (a figure may override any variable). */
export function readTheme(el: Element): ChartTheme {
  const style = getComputedStyle(el);
  const theme = {} as ChartTheme;
  for (const key of Object.keys(VARS) as (keyof ChartTheme)[]) {
    theme[key] = style.getPropertyValue(VARS[key]).trim() || '#888888';
  }
  return theme;
}
