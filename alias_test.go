package pagedkv

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/driver"
)

// aliasCase is one op's argument struct for the aliasing table: a valid
// value, the buffers the op writes, and the buffers it does not touch at
// all on the path that value takes.
type aliasCase struct {
	good      func() any // a pointer to a valid argument struct
	outputs   []string
	untouched []string
}

var aliasCases = []aliasCase{
	{func() any { a := goodDecode(); return &a }, []string{"Out", "LSE", "Workspace"}, nil},
	{func() any { a := goodVarlen(); return &a }, []string{"Out", "LSE", "Workspace"}, nil},
	{func() any { a := goodSequence(); return &a }, []string{"Out", "LSE", "Workspace"}, []string{"KVLens"}},
	{func() any { a := goodSequence(); a.QLen = 1; a.KVLens = fakeBuffer(4); return &a }, []string{"Out", "LSE", "Workspace"}, nil},
	{func() any { a := goodAppend(); return &a }, []string{"KCache", "VCache"}, nil},
	{func() any { a := goodGather(); return &a }, []string{"KOut", "VOut"}, nil},
	{func() any { a := goodRope(); return &a }, []string{"QOut", "KOut", "ZerosOut", "KCache", "VCache"}, nil},
	{func() any { a := goodQKV(); return &a }, []string{"QOut", "KCache", "VCache"}, []string{"QNormWeight", "KNormWeight"}},
	{func() any { a := goodMLA(); return &a }, []string{"QOut", "KNopeOut", "KRopeOut"}, nil},
	{func() any { a := goodConcat(); return &a }, []string{"Out"}, nil},
}

// bufferFields returns the names of the Buffer fields of the struct v
// points to.
func bufferFields(v reflect.Value) []string {
	var names []string
	t := v.Elem().Type()
	for i := range t.NumField() {
		if t.Field(i).Type == reflect.TypeFor[Buffer]() {
			names = append(names, t.Field(i).Name)
		}
	}
	return names
}

// withOptionals returns c's valid value with every optional buffer it left
// out given (a large one at its own address), where Validate still accepts
// it, so the aliasing pairs cover the optional buffers too.
func withOptionals(t *testing.T, c aliasCase) reflect.Value {
	v := reflect.ValueOf(c.good())
	require.NoError(t, errOrNil(v), "the table's value is valid")
	for _, f := range bufferFields(v) {
		fv := v.Elem().FieldByName(f)
		if !fv.Interface().(Buffer).IsZero() {
			continue
		}
		fv.Set(reflect.ValueOf(fakeBuffer(1 << 30)))
		if errOrNil(v) != nil {
			fv.Set(reflect.ValueOf(Buffer{}))
		}
	}
	return v
}

// errOrNil calls Validate on the argument struct v points to.
func errOrNil(v reflect.Value) error {
	err, _ := v.MethodByName("Validate").Call(nil)[0].Interface().(error)
	return err
}

// TestAliasing feeds every op every pair of its buffers made to overlap
// (one placed at the other's address): a pair with an output is
// ErrAliasing naming both fields; two inputs may overlap.
func TestAliasing(t *testing.T) {
	pairs := 0
	for _, c := range aliasCases {
		base := withOptionals(t, c)
		arg := base.Elem().Type().Name()
		fields := bufferFields(base)
		for _, x := range fields {
			for _, y := range fields {
				if x == y {
					continue
				}
				v := reflect.New(base.Elem().Type())
				v.Elem().Set(base.Elem())
				bx := v.Elem().FieldByName(x).Interface().(Buffer)
				by := v.Elem().FieldByName(y)
				if bx.IsZero() || by.Interface().(Buffer).IsZero() || slices.Contains(c.untouched, x) || slices.Contains(c.untouched, y) {
					continue
				}
				b := by.Interface().(Buffer)
				b.Ptr = bx.Ptr
				by.Set(reflect.ValueOf(b))
				err := errOrNil(v)
				name := arg + "/" + y + "@" + x
				if !slices.Contains(c.outputs, x) && !slices.Contains(c.outputs, y) {
					assert.NoError(t, err, "%s: inputs may overlap", name)
					continue
				}
				pairs++
				if assert.ErrorIs(t, err, ErrAliasing, name) {
					assert.ErrorIs(t, err, ErrInvalidArgument, name)
					assert.Contains(t, err.Error(), arg+"."+x, name)
					assert.Contains(t, err.Error(), arg+"."+y, name)
				}
			}
		}
	}
	assert.Greater(t, pairs, 100, "aliasing pairs checked")
}

// TestAliasingEdges checks the ranges compared: the bytes each buffer's
// shape reaches, not the Buffer's size, so outputs may sit just past an
// input's last byte inside one allocation.
func TestAliasingEdges(t *testing.T) {
	a := goodDecode()
	need := int64(a.NumSeqs * a.NumQHeads * a.HeadDim * 2)
	arena := fakeBuffer(4 * need)
	a.Q = Buffer{Ptr: arena.Ptr, Bytes: 4 * need} // more than it reads
	a.Out = Buffer{Ptr: arena.Ptr + driver.DevicePtr(need), Bytes: need}
	require.NoError(t, a.Validate(), "Out right after the bytes Q reaches")
	a.Out.Ptr -= 16
	err := a.Validate()
	require.ErrorIs(t, err, ErrAliasing)
	assert.True(t, strings.HasPrefix(err.Error(), "pagedkv: DecodeArgs.Out ["), err.Error())
}
