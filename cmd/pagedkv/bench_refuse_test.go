package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pagedkv/pagedkv"
)

// TestBenchRefuse: a row the library refuses (ErrInvalidArgument) is
// recorded and the run goes on; any other error stops it unrecorded.
func TestBenchRefuse(t *testing.T) {
	var said []string
	b := &bencher{status: func(msg string) { said = append(said, msg) }}
	refused := fmt.Errorf("wrapped: %w", pagedkv.ErrInvalidArgument)
	assert.True(t, b.refuse("decode e4m3 seqs=32 kv=8192 hd=80", refused))
	assert.False(t, b.refuse("decode f16 seqs=1 kv=512", errors.New("CUDA_ERROR_ILLEGAL_ADDRESS")))
	assert.Equal(t, []string{"decode e4m3 seqs=32 kv=8192 hd=80: " + refused.Error()}, b.refused)
	assert.Len(t, said, 1)
	assert.Contains(t, said[0], "decode e4m3 seqs=32 kv=8192 hd=80 refused")
}
