//! The dashboard's one module (`/assets/app.js`): every page loads it, and it enhances what the
//! page declares with data attributes (README.md beside this file). Module scripts run after
//! the document is parsed, so the page's elements are all there.

import { initAnnouncer } from './announce';
import { initAutosubmit } from './autosubmit';
import { enhanceCharts } from './charts/chart-figure';
import { initCopyButtons } from './copy-button';
import { initApiForms } from './forms/api-form';
import { localizeTimes, startRelativeClock } from './local-time';

localizeTimes(document);
startRelativeClock();
initAnnouncer();
initApiForms();
initCopyButtons();
initAutosubmit();
enhanceCharts(document);
