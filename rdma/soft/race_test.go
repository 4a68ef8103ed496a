//go:build race

package soft

// raceEnabled scales the heavier tests down under the race detector.
const raceEnabled = true
