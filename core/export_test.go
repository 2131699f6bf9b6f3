package core

// WebhooksOffered returns how many orphaned webhooks this engine's sweeps offered again in the
// last WebhookOrphanAfter: 0 on a store that shares no workers. Call it from the goroutine that
// calls Tick.
func (js *Jobs) WebhooksOffered() int {
	if js.shared == nil {
		return 0
	}
	return len(js.shared.offered)
}
