package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/internal/check"
)

func TestMLARopeQuantAndConcat(t *testing.T) {
	r := open(t, config.Options{})
	g := rng(t)
	shapes := []check.MLAShape{
		{Tokens: 64, QHeads: 16, KVHeads: 1, Lora: 512, Rope: 64, DType: pagedkv.BF16, NeoX: true},
		{Tokens: 3, QHeads: 2, KVHeads: 2, Lora: 128, Rope: 32, DType: pagedkv.F16, HalfRot: true, Pad: 8},
	}
	for range 6 {
		shapes = append(shapes, check.RandomMLAShape(g))
	}
	for _, c := range shapes {
		t.Run(c.String(), func(t *testing.T) {
			require.NoError(t, check.RunMLA(r, r.Stream(), g, c))
		})
	}
}
