//go:build race

package api_test

// raceEnabled: under -race, Pebble checks its invariants (it clones the values its flushes
// read), so tests that measure the process's memory measure that instead.
const raceEnabled = true
