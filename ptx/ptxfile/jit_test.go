package ptxfile

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJITRecordMarshal(t *testing.T) {
	empty, err := JITRecord{}.Marshal()
	require.NoError(t, err)
	assert.Equal(t, "{\n  \"images\": []\n}\n", string(empty))

	r := JITRecord{Images: []JITImage{
		{Module: "varlen_f16", Arch: "sm_90", DriverVersion: 13000, PTXSHA256: "p2", SHA256: "c2", Size: 2},
		{Module: "decode_f16_e4m3", Arch: "sm_100", DriverVersion: 13000, PTXSHA256: "p1", SHA256: "c1", Size: 1},
		{Module: "decode_f16_e4m3", Arch: "sm_90", Device: "NVIDIA H200", DriverVersion: 12080, PTXSHA256: "p0", SHA256: "c0", Size: 3},
	}}
	data, err := r.Marshal()
	require.NoError(t, err)
	assert.Equal(t, "varlen_f16", r.Images[0].Module, "Marshal leaves r as it was")
	got, err := ParseJITRecord(data)
	require.NoError(t, err)
	require.Len(t, got.Images, 3)
	assert.Equal(t, []string{"sm_90", "sm_100", "sm_90"}, []string{got.Images[0].Arch, got.Images[1].Arch, got.Images[2].Arch},
		"sorted by module, then architecture")
	assert.Equal(t, r.Images[2], got.Images[0])
	again, err := got.Marshal()
	require.NoError(t, err)
	assert.Equal(t, data, again)

	img, ok := got.Image("decode_f16_e4m3", "sm_100")
	assert.True(t, ok)
	assert.Equal(t, "c1", img.SHA256)
	_, ok = got.Image("decode_f16_e4m3", "sm_89")
	assert.False(t, ok)
}

func TestParseJITRecordErrors(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"unknown field", `{"images": [], "extra": 1}`, `unknown field "extra"`},
		{"trailing data", `{"images": []} {}`, "data after the record object"},
		{"duplicate", `{"images": [{"module": "m", "arch": "sm_90"}, {"module": "m", "arch": "sm_90"}]}`, "lists module m, sm_90 twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJITRecord([]byte(tt.data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), JITFile)
		})
	}
}

func TestJITCubinFile(t *testing.T) {
	assert.Equal(t, "varlen_bf16.sm_90.jit.cubin.gz", JITCubinFile("varlen_bf16", "sm_90"))
	assert.True(t, IsJITCubinFile(JITCubinFile("varlen_bf16", "sm_90")))
	assert.False(t, IsJITCubinFile(SASSFile("varlen_bf16", "sm_90")))
}
