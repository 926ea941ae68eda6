package driver

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLaunchConfigLayout checks the Go mirrors against CUlaunchConfig and
// CUlaunchAttribute as cuda.h (CUDA 11.8) lays them out on 64-bit Linux.
func TestLaunchConfigLayout(t *testing.T) {
	var c launchConfig
	offsets := []struct {
		field     string
		got, want uintptr
	}{
		{"gridDimX", unsafe.Offsetof(c.gridDimX), 0},
		{"gridDimY", unsafe.Offsetof(c.gridDimY), 4},
		{"gridDimZ", unsafe.Offsetof(c.gridDimZ), 8},
		{"blockDimX", unsafe.Offsetof(c.blockDimX), 12},
		{"blockDimY", unsafe.Offsetof(c.blockDimY), 16},
		{"blockDimZ", unsafe.Offsetof(c.blockDimZ), 20},
		{"sharedMemBytes", unsafe.Offsetof(c.sharedMemBytes), 24},
		{"hStream", unsafe.Offsetof(c.stream), 32},
		{"attrs", unsafe.Offsetof(c.attrs), 40},
		{"numAttrs", unsafe.Offsetof(c.numAttrs), 48},
	}
	for _, o := range offsets {
		assert.Equal(t, o.want, o.got, "CUlaunchConfig.%s offset", o.field)
	}
	assert.Equal(t, uintptr(56), unsafe.Sizeof(c), "sizeof(CUlaunchConfig)")
	assert.Equal(t, uintptr(8), unsafe.Alignof(c), "alignof(CUlaunchConfig)")

	var a launchAttribute
	assert.Equal(t, uintptr(0), unsafe.Offsetof(a.id), "CUlaunchAttribute.id offset")
	assert.Equal(t, uintptr(8), unsafe.Offsetof(a.value), "CUlaunchAttribute.value offset")
	assert.Equal(t, uintptr(72), unsafe.Sizeof(a), "sizeof(CUlaunchAttribute)")
	assert.Equal(t, uintptr(8), unsafe.Alignof(a), "alignof(CUlaunchAttribute)")
	assert.Equal(t, uintptr(64), unsafe.Sizeof(a.value), "sizeof(CUlaunchAttributeValue)")
	assert.Equal(t, uintptr(0), unsafe.Offsetof(a.value.clusterDim), "clusterDim offset in the union")
	assert.Equal(t, uintptr(12), unsafe.Sizeof(a.value.clusterDim), "sizeof(clusterDim)")

	var fr frame
	assert.Zero(t, unsafe.Offsetof(fr.config)%8, "frame.config is 8-aligned")
	assert.Zero(t, unsafe.Offsetof(fr.attr)%8, "frame.attr is 8-aligned")
}

func TestCheckCluster(t *testing.T) {
	tests := []struct {
		name          string
		grid, cluster Dim3
		want          string
	}{
		{"ok", Dim3{8, 4, 2}, Dim3{2, 1, 1}, ""},
		{"whole grid", Dim3{4, 2, 2}, Dim3{4, 2, 2}, ""},
		{"zero x", Dim3{8, 1, 1}, Dim3{0, 1, 1}, "cuda: LaunchCluster: cluster.X=0; want >= 1 (1 for an unused dimension)"},
		{"zero z", Dim3{8, 1, 1}, Dim3{2, 1, 0}, "cuda: LaunchCluster: cluster.Z=0; want >= 1 (1 for an unused dimension)"},
		{"x not a multiple", Dim3{10, 1, 1}, Dim3{4, 1, 1}, "cuda: LaunchCluster: grid.X=10 is not a multiple of cluster.X=4"},
		{"y not a multiple", Dim3{8, 3, 1}, Dim3{2, 2, 1}, "cuda: LaunchCluster: grid.Y=3 is not a multiple of cluster.Y=2"},
		{"zero grid", Dim3{0, 1, 1}, Dim3{2, 1, 1}, ""}, // 0 is a multiple; the driver refuses a zero grid
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkCluster(tt.grid, tt.cluster)
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

func TestLaunchClusterChecksBeforeDriver(t *testing.T) {
	args := sampleParams()
	err := LaunchCluster(0, Dim3{6, 1, 1}, Dim3{128, 1, 1}, Dim3{4, 1, 1}, 0, 0, &args)
	assert.EqualError(t, err, "cuda: LaunchCluster: grid.X=6 is not a multiple of cluster.X=4")
	err = LaunchCluster(0, Dim3{1, 1, 1}, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, 0, &struct{ On bool }{})
	assert.ErrorContains(t, err, "On has type bool")
	err = LaunchCluster[decodeParams](0, Dim3{1, 1, 1}, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, 0, nil)
	assert.EqualError(t, err, "cuda: LaunchCluster: nil parameter struct")
}

func TestLaunchClusterWith(t *testing.T) {
	l := layoutOf[decodeParams]()
	args := sampleParams()
	var got decodeParams
	var gotConfig launchConfig
	var gotAttr launchAttribute
	var gotFn Function
	var raw [56]byte
	fake := func(config *launchConfig, f Function, params, extra *unsafe.Pointer) Result {
		got = readParams(params, len(l.offsets))
		gotConfig, gotFn = *config, f
		raw = *(*[56]byte)(unsafe.Pointer(config))
		if config.numAttrs == 1 {
			gotAttr = *config.attrs
		}
		if extra != nil {
			return ResultInvalidValue
		}
		return ResultSuccess
	}
	err := launchClusterWith(fake, 9, Dim3{8, 4, 1}, Dim3{128, 1, 1}, Dim3{2, 2, 1}, 4096, 77, unsafe.Pointer(&args), l)
	require.NoError(t, err)
	assert.Equal(t, args, got)
	assert.Equal(t, Function(9), gotFn)
	assert.Equal(t, uint32(1), gotConfig.numAttrs)
	assert.Equal(t, launchAttributeClusterDimension, gotAttr.id)
	assert.Equal(t, Dim3{2, 2, 1}, gotAttr.value.clusterDim)

	// What C sees: the bytes at cuda.h's offsets.
	u32 := func(off int) uint32 { return *(*uint32)(unsafe.Pointer(&raw[off])) }
	assert.Equal(t, []uint32{8, 4, 1, 128, 1, 1, 4096}, []uint32{u32(0), u32(4), u32(8), u32(12), u32(16), u32(20), u32(24)})
	assert.Equal(t, uint64(77), *(*uint64)(unsafe.Pointer(&raw[32])), "hStream")
	assert.NotZero(t, *(*uintptr)(unsafe.Pointer(&raw[40])), "attrs")
	assert.Equal(t, uint32(1), u32(48), "numAttrs")
	attr := (*[72]byte)(unsafe.Pointer(&gotAttr))
	assert.Equal(t, uint32(4), *(*uint32)(unsafe.Pointer(&attr[0])), "id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION")
	assert.Equal(t, []uint32{2, 2, 1}, []uint32{
		*(*uint32)(unsafe.Pointer(&attr[8])), *(*uint32)(unsafe.Pointer(&attr[12])), *(*uint32)(unsafe.Pointer(&attr[16])),
	}, "value.clusterDim")
	for i := 20; i < 72; i++ {
		assert.Zero(t, attr[i], "union byte %d", i)
	}

	failing := func(*launchConfig, Function, *unsafe.Pointer, *unsafe.Pointer) Result {
		return ResultLaunchOutOfResources
	}
	err = launchClusterWith(failing, 1, Dim3{2, 1, 1}, Dim3{1, 1, 1}, Dim3{2, 1, 1}, 0, 0, unsafe.Pointer(&args), l)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "cuLaunchKernelEx", e.Call)
	assert.Equal(t, ResultLaunchOutOfResources, e.Code)

	// A frame reused by a plain Launch afterwards still launches its own way.
	err = launchWith(func(_ Function, gx, _, _, _, _, _, _ uint32, _ Stream, params, _ *unsafe.Pointer) Result {
		assert.Equal(t, uint32(3), gx)
		assert.Equal(t, args, readParams(params, len(l.offsets)))
		return ResultSuccess
	}, 1, Dim3{3, 1, 1}, Dim3{1, 1, 1}, 0, 0, unsafe.Pointer(&args), l)
	require.NoError(t, err)
}

func TestLaunchClusterWithAllocatesNothing(t *testing.T) {
	requireNoRace(t)
	l := layoutOf[decodeParams]()
	args := sampleParams()
	var sink uint32
	fake := func(config *launchConfig, f Function, params, extra *unsafe.Pointer) Result {
		sink += *(*uint32)(unsafe.Slice(params, 4)[3]) + config.attrs.value.clusterDim.X
		return ResultSuccess
	}
	var call launchExFunc = fake
	allocs := testing.AllocsPerRun(1000, func() {
		_ = launchClusterWith(call, 1, Dim3{8, 1, 1}, Dim3{32, 1, 1}, Dim3{2, 1, 1}, 0, 0, unsafe.Pointer(&args), l)
	})
	assert.Zero(t, allocs)
	assert.NotZero(t, sink)
}
