package runs

// CountByStatus returns how many runs this replica holds per status
// (StatusRunning, StatusFinished, StatusFailed,
// StatusCancelled), for metrics. Safe for concurrent use.
func (m *Module) CountByStatus() map[string]int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := map[string]int{}
	for _, r := range m.runs {
		out[r.status()]++
	}
	return out
}
