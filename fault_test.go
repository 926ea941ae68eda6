package pagedkv

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFaultErrorText pins the text of every fault code with operands as the
// kernels record them (kernels_src/common.cuh): a decode's and a cache
// write's faults share a code, so each text must read right for both.
func TestFaultErrorText(t *testing.T) {
	tests := []struct {
		name  string
		fault FaultError
		want  string
	}{
		{
			name:  "slot beyond cache",
			fault: FaultError{Code: FaultSlotBeyondCache, A: 3, B: 4096, C: 4096},
			want:  "pagedkv: SlotMapping[3]=4096 is outside the cache of 4096 slots; that row was not touched",
		},
		{
			name:  "remap beyond table",
			fault: FaultError{Code: FaultRemapBeyondTable, A: 5, B: 70, C: 64},
			want:  "pagedkv: token 5 has slot 70, outside SlotRemap of 64 entries; that token was not written",
		},
		{
			// A decode: KVLens[2]=600 with 32 pages of 16 tokens.
			name:  "kv length beyond table",
			fault: FaultError{Code: FaultKVLenBeyondTable, A: 2, B: 600, C: 512},
			want:  "pagedkv: KVLens[2]=600 exceeds MaxBlocksPerSeq·BlockSize=512 (a decode's KV length, or for a cache write a token's position + 1); a decode clamped it, a cache write skipped the tokens beyond",
		},
		{
			// A QKV cache write: position 512 of sequence 0 needs length 513.
			name:  "kv length one beyond table",
			fault: FaultError{Code: FaultKVLenBeyondTable, A: 0, B: 513, C: 512},
			want:  "pagedkv: KVLens[0]=513 exceeds MaxBlocksPerSeq·BlockSize=512 (a decode's KV length, or for a cache write a token's position + 1); a decode clamped it, a cache write skipped the tokens beyond",
		},
		{
			name:  "negative kv length",
			fault: FaultError{Code: FaultKVLenBeyondTable, A: 1, B: -7, C: 512},
			want:  "pagedkv: KVLens[1]=-7 is negative; the decode used length 0",
		},
		{
			name:  "position beyond cos/sin",
			fault: FaultError{Code: FaultPositionBeyond, A: 9, B: 4096, C: 4096},
			want:  "pagedkv: position 4096 of token 9 is outside the cos/sin table of 4096 rows; that token was not written",
		},
		{
			name:  "block beyond pool",
			fault: FaultError{Code: FaultBlockBeyondPool, A: 1, B: 3, C: 1000},
			want:  "pagedkv: BlockTables[1][3]=1000 is outside the pool (block ids 0..NumBlocks-1 of that call); a decode read block 0 instead, a cache write skipped that page's rows",
		},
		{
			name:  "negative block id",
			fault: FaultError{Code: FaultBlockBeyondPool, A: 0, B: 0, C: -2},
			want:  "pagedkv: BlockTables[0][0]=-2 is negative, not a block id; a decode read block 0 instead, a cache write skipped that page's rows",
		},
		{
			name:  "unknown code",
			fault: FaultError{Code: 42, A: 1, B: 2, C: 3},
			want:  "pagedkv: unknown device fault code 42 (1, 2, 3)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error = &tt.fault
			assert.Equal(t, tt.want, err.Error())
		})
	}
}
