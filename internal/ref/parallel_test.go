package ref

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestForEachCoversEveryIndexOnce: each i in [0, n) is handed to f exactly
// once, for n below, at and above the worker count, and with one worker.
func TestForEachCoversEveryIndexOnce(t *testing.T) {
	workers := runtime.GOMAXPROCS(0)
	for _, procs := range []int{1, workers} {
		prev := runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, procs - 1, procs, 3*procs + 1, 10000} {
			counts := make([]atomic.Int32, n)
			forEach(n, func(i int) { counts[i].Add(1) })
			for i := range counts {
				if !assert.Equal(t, int32(1), counts[i].Load(), "GOMAXPROCS %d, n %d, index %d", procs, n, i) {
					break
				}
			}
		}
		runtime.GOMAXPROCS(prev)
	}
}
