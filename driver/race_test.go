//go:build race

package driver

// raceEnabled is true under -race, where sync.Pool drops items at random,
// so allocation counts are not meaningful.
const raceEnabled = true
