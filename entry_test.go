package pagedkv

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The entry checks run before anything reaches the driver, so these tests
// need no GPU: a call that got past them would call into a driver that was
// never loaded, and panic.

// handles are the exported types whose methods are entry points.
var handles = []reflect.Type{
	reflect.TypeFor[*Runtime](), reflect.TypeFor[*Stream](), reflect.TypeFor[*Graph](),
	reflect.TypeFor[*Timer](), reflect.TypeFor[*Event](), reflect.TypeFor[*Memory](),
	reflect.TypeFor[*HostMemory](),
}

// releases are the methods that give a handle back: on a nil or closed
// handle they do nothing and return nil.
var releases = map[string]bool{"Close": true, "Free": true}

// call calls method m of recv with args (zero values where args is short)
// and returns its error result, or the panic it raised as an error.
func call(recv reflect.Value, m reflect.Method, args ...reflect.Value) (err error, hasErr bool, panicked any) {
	fn := recv.MethodByName(m.Name)
	ft := fn.Type()
	in := make([]reflect.Value, ft.NumIn())
	for i := range in {
		if i < len(args) && args[i].IsValid() {
			in[i] = args[i]
		} else {
			in[i] = reflect.Zero(ft.In(i))
		}
	}
	defer func() { panicked = recover() }()
	out := fn.Call(in)
	if n := len(out); n > 0 && ft.Out(n-1) == reflect.TypeFor[error]() {
		hasErr = true
		err, _ = out[n-1].Interface().(error)
	}
	return err, hasErr, nil
}

// TestNilHandles calls every exported method of every handle type on a nil
// receiver with zero arguments: none panics; each that returns an error
// returns ErrInvalidArgument, except the releases, which do nothing.
func TestNilHandles(t *testing.T) {
	for _, typ := range handles {
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			t.Run(typ.Elem().Name()+"."+m.Name, func(t *testing.T) {
				err, hasErr, p := call(reflect.Zero(typ), m)
				require.Nil(t, p, "panicked")
				if !hasErr {
					return
				}
				if releases[m.Name] {
					assert.NoError(t, err)
					return
				}
				assert.ErrorIs(t, err, ErrInvalidArgument)
			})
		}
	}
}

// TestClosedRuntime calls every method of a closed Runtime and of a Stream,
// Graph, Timer, Memory and HostMemory of it: each returns ErrClosed (the
// releases nil), before any driver call.
func TestClosedRuntime(t *testing.T) {
	r := &Runtime{}
	r.closed.Store(true)
	s := &Stream{r: r}
	// Fresh handles for each call: a Close must not change the next case.
	recvs := map[reflect.Type]func() reflect.Value{
		reflect.TypeFor[*Runtime]():    func() reflect.Value { return reflect.ValueOf(r) },
		reflect.TypeFor[*Stream]():     func() reflect.Value { return reflect.ValueOf(&Stream{r: r}) },
		reflect.TypeFor[*Graph]():      func() reflect.Value { return reflect.ValueOf(&Graph{r: r}) },
		reflect.TypeFor[*Timer]():      func() reflect.Value { return reflect.ValueOf(&Timer{s: s}) },
		reflect.TypeFor[*Event]():      func() reflect.Value { return reflect.ValueOf(&Event{r: r, e: 1}) },
		reflect.TypeFor[*Memory]():     func() reflect.Value { return reflect.ValueOf(&Memory{r: r}) },
		reflect.TypeFor[*HostMemory](): func() reflect.Value { return reflect.ValueOf(&HostMemory{r: r}) },
	}
	for _, typ := range handles {
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			if _, ok := reflect.TypeFor[Buffer]().MethodByName(m.Name); ok {
				continue // a Buffer's value methods, which no Runtime backs
			}
			t.Run(typ.Elem().Name()+"."+m.Name, func(t *testing.T) {
				// Every *Stream argument is the closed Runtime's stream,
				// every pointer to an argument struct a zero one.
				args := argsFor(m.Type, s, nil)
				err, hasErr, p := call(recvs[typ](), m, args...)
				require.Nil(t, p, "panicked")
				if !hasErr {
					return
				}
				if releases[m.Name] {
					assert.NoError(t, err)
					return
				}
				// Stream.Record/Wait with a zero Event fail on the event
				// first; everything else on the Runtime.
				if !errors.Is(err, ErrClosed) {
					require.ErrorIs(t, err, ErrInvalidArgument)
					assert.Contains(t, err.Error(), "event")
				}
			})
		}
	}
}

// argsFor returns arguments for the parameters of method type mt (its first
// parameter is the receiver): s for every *Stream, args for every pointer to
// an argument struct (a zero one when args is nil), zero values otherwise.
func argsFor(mt reflect.Type, s *Stream, args map[reflect.Type]reflect.Value) []reflect.Value {
	in := make([]reflect.Value, mt.NumIn()-1)
	for i := range in {
		pt := mt.In(i + 1)
		switch {
		case pt == reflect.TypeFor[*Stream]():
			in[i] = reflect.ValueOf(s)
		case isArgStruct(pt):
			if v, ok := args[pt]; ok {
				in[i] = v
			} else if args == nil {
				in[i] = reflect.New(pt.Elem())
			}
		}
	}
	return in
}

// isArgStruct reports whether t is a pointer to one of the ops' argument
// structs (DecodeArgs, VarlenArgs, ...).
func isArgStruct(t reflect.Type) bool {
	return t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct && strings.HasSuffix(t.Elem().Name(), "Args")
}

// TestOpEntryChecks calls every op of an open Runtime (every method that
// takes a *Stream or an argument struct) with a nil stream, a stream of
// another Runtime, a closed stream, and a nil argument struct: each is
// ErrInvalidArgument naming what was wrong, before any driver call.
func TestOpEntryChecks(t *testing.T) {
	r := &Runtime{streams: map[*Stream]struct{}{}}
	own := &Stream{r: r}
	other := &Stream{r: &Runtime{}}
	closed := &Stream{r: r}
	closed.closed.Store(true)
	typ := reflect.TypeFor[*Runtime]()
	ops := 0
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		takesStream, takesArgs := false, false
		for j := 1; j < m.Type.NumIn(); j++ {
			takesStream = takesStream || m.Type.In(j) == reflect.TypeFor[*Stream]()
			takesArgs = takesArgs || isArgStruct(m.Type.In(j))
		}
		if !takesStream && !takesArgs {
			continue
		}
		ops++
		cases := []struct {
			name string
			s    *Stream
			nil  bool // a nil argument struct
			want string
		}{
			{"nil stream", nil, false, "*Stream is nil"},
			{"foreign stream", other, false, "another Runtime"},
			{"closed stream", closed, false, "is closed"},
			{"nil args", own, true, "is nil"},
		}
		for _, c := range cases {
			if !takesStream && c.s != own {
				continue
			}
			if !takesArgs && c.nil {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", m.Name, c.name), func(t *testing.T) {
				var args map[reflect.Type]reflect.Value
				if c.nil {
					args = map[reflect.Type]reflect.Value{}
				}
				err, _, p := call(reflect.ValueOf(r), m, argsFor(m.Type, c.s, args)...)
				require.Nil(t, p, "panicked")
				require.ErrorIs(t, err, ErrInvalidArgument)
				assert.Contains(t, err.Error(), c.want)
			})
		}
	}
	assert.GreaterOrEqual(t, ops, 20, "the ops found by reflection")
}

// TestNilStreamFunctions covers the generic functions that take a stream.
func TestNilStreamFunctions(t *testing.T) {
	b := Buffer{Ptr: 256, Bytes: 64}
	host := make([]float32, 4)
	for name, f := range map[string]func() error{
		"Upload":        func() error { return Upload(nil, b, host) },
		"Download":      func() error { return Download(nil, host, b) },
		"UploadAsync":   func() error { return UploadAsync(nil, b, host) },
		"DownloadAsync": func() error { return DownloadAsync(nil, host, b) },
		"Upload empty":  func() error { return Upload[float32](nil, b, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, f(), ErrInvalidArgument)
		})
	}
}
