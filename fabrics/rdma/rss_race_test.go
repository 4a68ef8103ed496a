//go:build race

package rdma_test

// raceEnabled: the race detector's shadow memory and slowdown make the
// target's RSS figures meaningless.
const raceEnabled = true
