// Package fanout delivers MAP events to subscriptions (map-protocol.md §5.5–5.7):
// map/subscribe, map/unsubscribe, map/replay, map/subscribe.ack and map/ack,
// and the `map/event` and `map/subscription.overflow` notifications.
//
// Sources. Registry events (agent_*, scope_*, participant_*, ...) come from
// the replicated event log of node/registry, identical on every node; the
// Hub's Run loop tails it (registry.Reader.EventsAfter / Notify). Message
// events (message_sent / _delivered / _failed) come from node/router through
// PublishEphemeral: they are not in the log, so they are delivered live to
// the subscriptions of this node only, never replayed, and not seen by
// subscribers attached to other nodes.
//
// Subscriptions are replicated (SUBSCRIPTION_ADD / _REMOVE): a session that
// reconnects to any node gets the same subscription ids back through
// Attach, which replays what it missed from the subscription's cursor and
// continues its sequenceNumber from the cursor's. Cursors are proposed in
// batches (one SUBSCRIPTION_CURSOR per CursorFlushInterval, and at Detach),
// never per event. The cursor is the last registry event the client
// acknowledged (map/subscribe.ack, map/ack) or, for a client that never
// acknowledges, the last one handed to its connection; delivery is
// therefore at-least-once across node loss and clients deduplicate by
// eventId. sequenceNumber starts at 1 and grows by one per delivered event,
// so after a node loss numbering can repeat values the client already saw
// for events delivered after the last flush.
//
// Filters: AND across fields, OR within one; eventTypes match snake_case
// names and their dotted aliases (agent.state.changed == agent_state_changed)
// and accept a trailing "*" ("agent.*", "*"); agents/fromAgents match the
// agents an event is about or its source (a trailing "*" is a prefix);
// roles, scopes, metadataMatch and environmentMatch (dotted paths) look at
// the event's agents in the registry (or data.agent once unregistered);
// priorities apply to message events (others count as "normal");
// correlationIds match data.correlationId. mail and trajectory are accepted
// and not applied (this node emits no such events); unknown fields are -32602.
//
// Backpressure. Connections never block the hub: NotifyRaw fails fast when
// a connection's queue is full. A subscription that cannot take a registry
// event stays at its log position and is retried every RetryInterval, so
// it lags instead of losing events; only ephemeral events (held up to
// QueueLimit events and QueueBytes per subscription) and log events that age out of the retained
// window before a lagging subscription reads them are dropped. Drops are
// reported with map/subscription.overflow {subscriptionId, eventsDropped,
// oldestDroppedId?, newestDroppedId?, totalDropped, recommendation:
// "reduce_filter_scope", timestamp}; eventsDropped counts log positions for
// aged-out events (an upper bound of what the filter would have passed) and
// the notice then carries reason "replay_window_exceeded". A subscription
// that drops again after a warning reached it, or keeps dropping for
// OverflowCloseAfter, is closed: a final notice with recommendation
// "resubscribe" and closed:true, and the subscription is removed.
//
// The first events of a new or restored subscription are held until the
// reply that created it is queued (Config.AfterReply) or ActivationDelay
// has passed, because the SDK drops events for subscription ids it has not
// seen yet.
//
// Who calls it: node/mapsvc (the map/* methods, Attach on connect/resume,
// Detach when a connection ends); node/router (PublishEphemeral,
// HasSubscribers); the node composition root runs Run.
package fanout
