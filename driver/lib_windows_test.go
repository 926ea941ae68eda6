package driver

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertNoDriverText checks the windows no-driver error: it names
// nvcuda.dll and the driver version needed; PATH plays no part, since only
// the system folder is searched.
func assertNoDriverText(t *testing.T, err error) {
	t.Helper()
	assert.Contains(t, err.Error(), "nvcuda.dll")
	assert.Contains(t, err.Error(), "11.8")
	assert.NotContains(t, err.Error(), "LD_LIBRARY_PATH")
}

func TestOpenLibraryNamesTried(t *testing.T) {
	_, _, err := openLibrary([]string{"pagedkv-does-not-exist.dll"})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoDriver)
	assert.Contains(t, err.Error(), "could not open pagedkv-does-not-exist.dll (")
	assert.Contains(t, err.Error(), "11.8")
}
