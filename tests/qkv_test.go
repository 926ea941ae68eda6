package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/internal/check"
)

func TestQKVNormRopeMatchesReference(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	shapes := []check.QKVShape{
		{Seqs: 1, MaxLen: 100, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16, In: pagedkv.BF16, Cache: pagedkv.BF16, Norm: true, NeoX: true, HalfRot: true},
		{Seqs: 4, MaxLen: 40, QHeads: 8, KVHeads: 2, HeadDim: 64, BlockSize: 8, In: pagedkv.F16, Cache: pagedkv.E4M3, Varlen: true, PadToken: 8, QKVOffset: 32, QOutOffset: 16},
		{Seqs: 3, MaxLen: 20, QHeads: 4, KVHeads: 4, HeadDim: 256, BlockSize: 1, In: pagedkv.F16, Cache: pagedkv.F16, Norm: true, Varlen: true},
	}
	for range 8 {
		shapes = append(shapes, check.RandomQKVShape(g))
	}
	for _, c := range shapes {
		t.Run(c.String(), func(t *testing.T) {
			require.NoError(t, check.RunQKV(r, r.Stream(), g, c))
		})
	}
}
