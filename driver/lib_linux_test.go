package driver

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertNoDriverText checks the linux no-driver error: one sentence naming
// every library tried, the driver version needed and LD_LIBRARY_PATH.
func assertNoDriverText(t *testing.T, err error) {
	t.Helper()
	for _, want := range []string{"could not open libcuda.so.1", " or libcuda.so ", "11.8", "LD_LIBRARY_PATH"} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestOpenLibraryNamesTried(t *testing.T) {
	_, _, err := openLibrary([]string{"libpagedkv-does-not-exist.so.1", "libpagedkv-nor-this.so"})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoDriver)
	msg := err.Error()
	assert.Contains(t, msg, "libpagedkv-does-not-exist.so.1 or libpagedkv-nor-this.so (")
	assert.Contains(t, msg, "LD_LIBRARY_PATH")
	assert.Contains(t, msg, "11.8")
	assert.Equal(t, 1, strings.Count(msg, "cannot open shared object file"), "the shared reason is said once: %s", msg)
	assert.Equal(t, 1, strings.Count(msg, "; "), "one piece of advice: %s", msg)
}
