package backup

// RecordKindForTest exposes recordKind to the external tests.
var RecordKindForTest = recordKind
