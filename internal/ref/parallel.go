package ref

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// forEach calls f(i) for every i in [0, n), spread over GOMAXPROCS
// goroutines: the references compute each output row on its own, so the
// GPU tests' float64 checks of large problems take seconds, not minutes.
// f must write only what belongs to its i, and must not panic (the
// references check their arguments before they call it).
func forEach(n int, f func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}
