//go:build !linux && !windows

package driver

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// assertNoDriverText checks the no-driver error of a platform without CUDA:
// one sentence saying so, with no library names or advice.
func assertNoDriverText(t *testing.T, err error) {
	t.Helper()
	assert.Equal(t, ErrNoDriver.Error()+": CUDA is not available on "+runtime.GOOS, err.Error())
}
