package check

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/ref"
)

// TestDTypeMatchesRef ties internal/ref's DType to dispatch's (pagedkv.DType
// is an alias of it): the checks convert one to the other by number
// (ref.DType(c.DType)), so every dtype must have the same number, name and
// size in both, and neither may have one the other lacks.
func TestDTypeMatchesRef(t *testing.T) {
	pairs := []struct {
		d dispatch.DType
		r ref.DType
	}{
		{dispatch.F16, ref.F16},
		{dispatch.BF16, ref.BF16},
		{dispatch.E4M3, ref.E4M3},
	}
	for _, p := range pairs {
		assert.Equal(t, int(p.d), int(p.r), "number of %s", p.d)
		assert.Equal(t, p.d.String(), p.r.String(), "name of dtype %d", int(p.d))
		assert.Equal(t, p.d.Size(), p.r.Size(), "size of %s", p.d)
		parsed, err := dispatch.ParseDType(p.r.String())
		if assert.NoError(t, err) {
			assert.Equal(t, p.d, parsed)
		}
	}
	// Every number either names the same dtype in both packages or is
	// invalid in both (ref's String falls back to "DType(n)" like
	// dispatch's).
	valid := 0
	for n := range 256 {
		d, r := dispatch.DType(n), ref.DType(n)
		assert.Equal(t, d.String(), r.String(), "dtype number %d", n)
		if d.Valid() {
			valid++
		}
	}
	assert.Equal(t, len(pairs), valid, "dispatch has a dtype this test does not pair with internal/ref's")
}
