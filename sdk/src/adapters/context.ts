//! What an adapter gets from its telemetry instance: a way to emit events and to end the session.

import type { EventType, PayloadMap, SessionEndReason } from '../events';
import type { Log } from '../session';

export interface AdapterContext {
  emit<K extends EventType>(type: K, payload: PayloadMap[K]): void;
  end(reason: SessionEndReason): unknown;
  contentId: string;
  log: Log;
  /** Monotonic ms clock. */
  now(): number;
}
