package kafka

// Helpers of the internal tests, for the engine tests (package kafka_test).
var (
	ReadAllForTest     = readAll
	CopiesByKeyForTest = copiesByKey
)
