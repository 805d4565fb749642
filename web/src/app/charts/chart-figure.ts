//! `<figure class="chart" data-chart="kind" data-src="/api/...">`: fetches the same JSON the
//! API serves, draws it with uPlot inside the figure, and keeps it fitted to the figure's width
//! and to the color scheme. Empty data and failures become a sentence in the figure.

import uPlot from 'uplot';
import { latencyModel, timelineModel, timeseriesModel } from './chart-data';
import type { AgentFeedBody, TimelineBody, TimeseriesBody } from './chart-data';
import {
  latencyOptions,
  sparklineColumns,
  sparklineOptions,
  timelineOptions,
  timeseriesColumns,
  timeseriesOptions,
} from './chart-options';
import type { Size } from './chart-options';
import { readTheme } from './chart-theme';
import type { ChartTheme } from './chart-theme';

interface Drawing {
  empty: boolean;
  data: uPlot.AlignedData;
  options: (theme: ChartTheme, size: Size) => uPlot.Options;
}

interface Kind {
  emptyText: string;
  prepare: (body: unknown, fig: HTMLElement) => Drawing;
}

const KINDS: Record<string, Kind> = {
  timeseries: {
    emptyText: 'No views in this time range.',
    prepare: (body, fig) => {
      const m = timeseriesModel(body as TimeseriesBody);
      return { empty: m.empty, data: timeseriesColumns(m), options: (t, s) => timeseriesOptions(m, t, s, fig.dataset.label) };
    },
  },
  sparkline: {
    emptyText: 'No data',
    prepare: (body) => {
      const m = timeseriesModel(body as TimeseriesBody);
      return { empty: m.empty, data: sparklineColumns(m), options: (t, s) => sparklineOptions(m, t, s) };
    },
  },
  latency: {
    emptyText: 'No probes yet.',
    prepare: (body, fig) => {
      const m = latencyModel(body as AgentFeedBody, fig.dataset.streamId);
      return { empty: m.empty, data: m.columns as uPlot.AlignedData, options: (t, s) => latencyOptions(m, t, s) };
    },
  },
  timeline: {
    emptyText: 'No probes and no views in this time range.',
    prepare: (body) => {
      const m = timelineModel(body as TimelineBody);
      return { empty: m.empty, data: m.columns as uPlot.AlignedData, options: (t, s) => timelineOptions(m, t, s) };
    },
  },
};

const darkQuery = matchMedia('(prefers-color-scheme: dark)');

/** Replaces the figure's plot or message with a sentence (empty data, failure). */
function showMessage(fig: HTMLElement, text: string, state: 'empty' | 'error'): void {
  fig.querySelector('.chart-plot, .chart-message')?.remove();
  const p = document.createElement('p');
  p.className = `chart-message chart-${state}`;
  p.textContent = text;
  placeInFigure(fig, p);
  fig.dataset.chartState = state;
}

/** Content goes after a leading figcaption, or before a trailing one. */
function placeInFigure(fig: HTMLElement, el: HTMLElement): void {
  const caption = fig.querySelector(':scope > figcaption');
  if (caption && caption === fig.firstElementChild) fig.append(el);
  else fig.prepend(el);
}

async function load(src: string): Promise<{ body: unknown } | { error: string }> {
  let res: Response;
  try {
    res = await fetch(src, { credentials: 'same-origin', headers: { accept: 'application/json' } });
  } catch {
    return { error: 'Could not load the chart data (network error).' };
  }
  if (!res.ok) return { error: `Could not load the chart data (HTTP ${res.status}).` };
  try {
    return { body: await res.json() };
  } catch {
    return { error: 'The chart data could not be read.' };
  }
}

/** The plot height in CSS pixels: `--chart-height` (app.css sets one per kind). */
function plotHeight(fig: HTMLElement): number {
  const h = parseFloat(getComputedStyle(fig).getPropertyValue('--chart-height'));
  return Number.isFinite(h) && h > 0 ? h : 220;
}

function draw(fig: HTMLElement, drawing: Drawing): void {
  const host = document.createElement('div');
  host.className = 'chart-plot';
  // The numbers are already in the page (table or caption); the canvas adds only a picture.
  host.setAttribute('aria-hidden', 'true');
  fig.querySelector('.chart-message')?.remove();
  placeInFigure(fig, host);
  fig.dataset.chartState = 'drawn';

  const size = (): Size => ({ width: Math.max(1, Math.floor(host.clientWidth)), height: plotHeight(fig) });
  let plot = new uPlot(drawing.options(readTheme(fig), size()), drawing.data, host);

  let frame = 0;
  new ResizeObserver(() => {
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => {
      const next = size();
      if (next.width !== plot.width || next.height !== plot.height) plot.setSize(next);
    });
  }).observe(host);

  // Colors are baked into the options, so a scheme change builds the plot again.
  darkQuery.addEventListener('change', () => {
    plot.destroy();
    plot = new uPlot(drawing.options(readTheme(fig), size()), drawing.data, host);
  });
}

async function enhance(fig: HTMLElement): Promise<void> {
  const kind = KINDS[fig.dataset.chart ?? ''];
  const src = fig.dataset.src;
  if (!kind || !src) {
    showMessage(fig, 'This chart is not available.', 'error');
    return;
  }
  fig.setAttribute('aria-busy', 'true');
  const loaded = await load(src);
  fig.removeAttribute('aria-busy');
  if ('error' in loaded) {
    showMessage(fig, loaded.error, 'error');
    return;
  }
  const drawing = kind.prepare(loaded.body, fig);
  if (drawing.empty) showMessage(fig, fig.dataset.empty || kind.emptyText, 'empty');
  else draw(fig, drawing);
}

/** Enhances every chart figure under `root` (each once). */
export function enhanceCharts(root: ParentNode): void {
  root.querySelectorAll<HTMLElement>('figure[data-chart]:not([data-chart-state])').forEach((fig) => {
    fig.dataset.chartState = 'loading';
    void enhance(fig);
  });
}
