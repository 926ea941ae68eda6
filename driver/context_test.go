package driver

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeThreadContext replaces cuCtxGetCurrent and cuCtxSetCurrent with a
// fake per-thread current context for the test's duration. Do locks the OS
// thread, so one variable stands for the thread's slot.
func fakeThreadContext(t *testing.T, current Context, setResult Result) (cur *Context, sets *[]Context) {
	t.Helper()
	get, set := cuCtxGetCurrent, cuCtxSetCurrent
	t.Cleanup(func() { cuCtxGetCurrent, cuCtxSetCurrent = get, set })
	cur = &current
	sets = new([]Context)
	cuCtxGetCurrent = func(c *Context) Result { *c = *cur; return ResultSuccess }
	cuCtxSetCurrent = func(c Context) Result {
		*sets = append(*sets, c)
		if setResult != ResultSuccess {
			return setResult
		}
		*cur = c
		return ResultSuccess
	}
	return cur, sets
}

func TestContextDo(t *testing.T) {
	tests := []struct {
		name     string
		current  Context
		c        Context
		wantSets []Context
		after    Context // current after Do
	}{
		{"no current context: c stays", 0, 0x10, []Context{0x10}, 0x10},
		{"other context current: restored", 0x20, 0x10, []Context{0x10, 0x20}, 0x20},
		{"already current", 0x10, 0x10, nil, 0x10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur, sets := fakeThreadContext(t, tt.current, ResultSuccess)
			var inside Context
			err := tt.c.do(func() error { inside = *cur; return nil })
			require.NoError(t, err)
			assert.Equal(t, tt.c, inside, "c is current inside fn")
			assert.Equal(t, tt.after, *cur, "current context after Do")
			assert.Equal(t, tt.wantSets, *sets)
		})
	}
}

func TestContextDoErrors(t *testing.T) {
	t.Run("fn error is returned", func(t *testing.T) {
		cur, _ := fakeThreadContext(t, 0x20, ResultSuccess)
		boom := errors.New("boom")
		assert.ErrorIs(t, Context(0x10).do(func() error { return boom }), boom)
		assert.Equal(t, Context(0x20), *cur)
	})
	t.Run("set failure skips fn", func(t *testing.T) {
		fakeThreadContext(t, 0x20, ResultInvalidContext)
		ran := false
		err := Context(0x10).do(func() error { ran = true; return nil })
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, "cuCtxSetCurrent", e.Call)
		assert.False(t, ran)
	})
	t.Run("panic restores", func(t *testing.T) {
		cur, _ := fakeThreadContext(t, 0x20, ResultSuccess)
		assert.Panics(t, func() { _ = Context(0x10).do(func() error { panic("x") }) })
		assert.Equal(t, Context(0x20), *cur)
	})
	t.Run("nested", func(t *testing.T) {
		cur, _ := fakeThreadContext(t, 0x20, ResultSuccess)
		err := Context(0x10).do(func() error {
			return Context(0x30).do(func() error {
				assert.Equal(t, Context(0x30), *cur)
				return nil
			})
		})
		require.NoError(t, err)
		assert.Equal(t, Context(0x20), *cur)
	})
}

func TestContextDoAllocatesNothing(t *testing.T) {
	requireNoRace(t)
	fakeThreadContext(t, 0x20, ResultSuccess) // restores the table on cleanup
	// fakeThreadContext's setter records calls in a slice; use one that
	// does not allocate.
	cur := Context(0x20)
	cuCtxGetCurrent = func(c *Context) Result { *c = cur; return ResultSuccess }
	cuCtxSetCurrent = func(c Context) Result { cur = c; return ResultSuccess }
	n := 0
	fn := func() error { n++; return nil }
	allocs := testing.AllocsPerRun(1000, func() { _ = Context(0x10).do(fn) })
	assert.Zero(t, allocs)
	assert.Positive(t, n)
}
