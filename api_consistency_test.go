package pagedkv

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// argTypes are the exported argument structs of every op.
var argTypes = []any{
	AppendArgs{}, GatherArgs{}, RopeCacheArgs{}, QKVNormRopeArgs{}, MLARopeQuantArgs{},
	MLAConcatQArgs{}, DecodeArgs{}, VarlenArgs{}, SequenceArgs{},
}

// namingTable is docs/design.md's "Names" table: the Go type of each name
// (by reflect's name, CacheLayout for dispatch.Layout), and the names that
// must not be used.
type namingTable struct {
	types map[string]string
	not   map[string]string // forbidden name → the concept's name
}

func readNamingTable(t *testing.T) namingTable {
	t.Helper()
	data, err := os.ReadFile("docs/design.md")
	require.NoError(t, err)
	text := string(data)
	at := strings.Index(text, "\n## Names")
	require.NotEqual(t, -1, at, "docs/design.md has no Names section")
	nt := namingTable{types: map[string]string{}, not: map[string]string{}}
	names := func(cell string) []string {
		var out []string
		for _, f := range strings.Split(cell, ",") {
			if f = strings.Trim(strings.TrimSpace(f), "`"); f != "" {
				out = append(out, f)
			}
		}
		return out
	}
	rows := 0
	for _, line := range strings.Split(text[at+1:], "\n")[1:] {
		if strings.HasPrefix(line, "## ") {
			break
		}
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| concept") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := strings.Split(strings.TrimSpace(strings.Trim(line, "|")), "|")
		require.Len(t, cells, 4, "Names row %q", line)
		goType := strings.Trim(strings.TrimSpace(cells[2]), "`")
		for _, n := range names(cells[1]) {
			if goType != "" {
				nt.types[n] = goType
			}
		}
		for _, n := range names(cells[3]) {
			nt.not[n] = strings.TrimSpace(cells[1])
		}
		rows++
	}
	require.Greater(t, rows, 20, "the Names table")
	return nt
}

// typeName is how the table writes t.
func typeName(t reflect.Type) string {
	switch {
	case t.Kind() == reflect.Slice:
		return "[]" + typeName(t.Elem())
	case t.Name() == "Layout":
		return "CacheLayout"
	}
	return t.Name()
}

// TestAPINames holds every exported argument struct to docs/design.md's
// naming table: no field takes a name from its "not this" column, every
// field the table names has the table's type, a field name has one type
// across every struct, and no struct embeds anything.
func TestAPINames(t *testing.T) {
	nt := readNamingTable(t)
	seen := map[string]string{} // field → "Struct: type"
	for _, v := range argTypes {
		st := reflect.TypeOf(v)
		for i := range st.NumField() {
			f := st.Field(i)
			assert.False(t, f.Anonymous, "%s embeds %s", st.Name(), f.Name)
			if !f.IsExported() {
				continue
			}
			got := typeName(f.Type)
			if concept, bad := nt.not[f.Name]; bad {
				t.Errorf("%s.%s: the naming table says %s", st.Name(), f.Name, concept)
			}
			if want, ok := nt.types[f.Name]; ok {
				assert.Equal(t, want, got, "%s.%s's type (docs/design.md, Names)", st.Name(), f.Name)
			}
			if strings.HasPrefix(f.Name, "Host") {
				assert.Equal(t, "[]int32", got, "%s.%s: host index slices are []int32", st.Name(), f.Name)
			}
			if prev, ok := seen[f.Name]; ok {
				assert.True(t, strings.HasSuffix(prev, ": "+got), "%s.%s is %s, but %s", st.Name(), f.Name, got, prev)
			} else {
				seen[f.Name] = st.Name() + ": " + got
			}
		}
	}
}

// TestAPIWorkspaceEverywhere: every attention op takes a graph capacity and
// its own scratch the same way.
func TestAPIWorkspaceEverywhere(t *testing.T) {
	for _, v := range []any{DecodeArgs{}, VarlenArgs{}, SequenceArgs{}} {
		st := reflect.TypeOf(v)
		for name, typ := range map[string]string{"KVCapacity": "int", "Workspace": "Buffer", "Scale": "float32", "Layout": "CacheLayout"} {
			f, ok := st.FieldByName(name)
			if assert.True(t, ok, "%s has no %s", st.Name(), name) {
				assert.Equal(t, typ, typeName(f.Type), "%s.%s", st.Name(), name)
			}
		}
	}
}
