package pagedkv

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/config"
)

// TestReadmeConfigTable keeps the README's configuration table true: one row
// per knob, in config.Keys() order, with the variable, file key, default,
// allowed values and description the config package itself reports.
func TestReadmeConfigTable(t *testing.T) {
	data, err := os.ReadFile("README.md")
	require.NoError(t, err)
	var rows [][]string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `PAGEDKV_") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		rows = append(rows, cells)
	}
	keys := config.Keys()
	require.Len(t, rows, len(keys), "README configuration rows")
	for i, k := range keys {
		want := []string{k.Env, k.File, k.Default, k.Allowed, k.Description}
		assert.Equal(t, want, rows[i], "README row %d (%s)", i, k.Env)
	}
}
