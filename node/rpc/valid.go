package rpc

// ValidJSON reports whether data is exactly one JSON value with optional
// surrounding whitespace, using the same validating scanner as inbound
// frames. Other node packages check JSON that arrives by another door with
// it (the cluster relay), so every door accepts the same grammar.
func ValidJSON(data []byte) bool { return validJSON(data) }
