package driver

import (
	"runtime"
	"unsafe"
)

// launchAttributeClusterDimension is CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
// (ABI; from cuda.h).
const launchAttributeClusterDimension uint32 = 4

// launchConfig mirrors CUlaunchConfig (cuda.h, CUDA 11.8 and later), the
// first argument of cuLaunchKernelEx. Go lays it out as C does: 4 bytes of
// padding before stream, and 4 after numAttrs, for 56 bytes in all.
type launchConfig struct {
	gridDimX, gridDimY, gridDimZ    uint32
	blockDimX, blockDimY, blockDimZ uint32
	sharedMemBytes                  uint32
	stream                          Stream
	attrs                           *launchAttribute
	numAttrs                        uint32
}

// launchAttribute mirrors CUlaunchAttribute: an id, 4 bytes of padding and
// the 64-byte CUlaunchAttributeValue union, 72 bytes in all.
type launchAttribute struct {
	id    uint32
	_     [4]byte
	value launchAttributeValue
}

// launchAttributeValue mirrors the CUlaunchAttributeValue union through the
// one member pagedkv sets, clusterDim (x, y, z at its start).
type launchAttributeValue struct {
	_          [0]uint64 // 8-byte aligned like the C union, which holds pointers
	clusterDim Dim3
	_          [64 - unsafe.Sizeof(Dim3{})]byte
}

// LaunchCluster is Launch for kernels whose blocks form thread-block
// clusters (compute capability 9.0 and later): it enqueues kernel f on
// stream s through cuLaunchKernelEx with the launch attribute
// CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION set to cluster, so each group of
// cluster.X × cluster.Y × cluster.Z blocks is co-scheduled on one GPU
// processing cluster and can use distributed shared memory and
// barrier.cluster. Call it inside Context.Do.
//
// Every cluster dimension must be at least 1 and divide the grid dimension,
// which LaunchCluster checks before calling the driver; the driver checks the
// rest (a cluster of more than 8 blocks needs
// FuncAttrNonPortableClusterSizeAllowed, and a kernel compiled with
// __cluster_dims__ takes its cluster shape from the binary: launch those with
// Launch). T and *args follow the rules of Launch.
//
// # Memory
//
// As for Launch: *args is copied into a pooled argument frame, which here also
// holds the CUlaunchConfig and its cluster attribute, all pinned with a
// runtime.Pinner for the call; the driver copies what it needs before
// cuLaunchKernelEx returns, so a steady-state launch allocates nothing and
// *args may be reused as soon as LaunchCluster returns.
//
// See https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html
func LaunchCluster[T any](f Function, grid, block, cluster Dim3, sharedBytes uint32, s Stream, args *T) error {
	l := layoutOf[T]()
	if l.err != nil {
		return l.err
	}
	if args == nil {
		return argError("LaunchCluster: nil parameter struct")
	}
	if err := checkCluster(grid, cluster); err != nil {
		return err
	}
	if err := Init(); err != nil {
		return err
	}
	return launchClusterWith(cuLaunchKernelEx, f, grid, block, cluster, sharedBytes, s, unsafe.Pointer(args), l)
}

// checkCluster checks that every cluster dimension is at least 1 and divides
// the grid dimension.
func checkCluster(grid, cluster Dim3) error {
	dims := [3]struct {
		name          string
		grid, cluster uint32
	}{{"X", grid.X, cluster.X}, {"Y", grid.Y, cluster.Y}, {"Z", grid.Z, cluster.Z}}
	for _, d := range dims {
		if d.cluster == 0 {
			return argError("LaunchCluster: cluster.%s=0; want >= 1 (1 for an unused dimension)", d.name)
		}
		if d.grid%d.cluster != 0 {
			return argError("LaunchCluster: grid.%s=%d is not a multiple of cluster.%s=%d",
				d.name, d.grid, d.name, d.cluster)
		}
	}
	return nil
}

// launchClusterWith packs the parameters, the launch config and its cluster
// attribute into a pooled frame and launches through call
// (cuLaunchKernelEx, or a fake in tests).
func launchClusterWith(call launchExFunc, f Function, grid, block, cluster Dim3, sharedBytes uint32, s Stream,
	args unsafe.Pointer, l *paramLayout) error {
	fr := frames.Get().(*frame)
	fr.pack(args, l)
	fr.attr = launchAttribute{id: launchAttributeClusterDimension}
	fr.attr.value.clusterDim = cluster
	fr.config = launchConfig{
		gridDimX: grid.X, gridDimY: grid.Y, gridDimZ: grid.Z,
		blockDimX: block.X, blockDimY: block.Y, blockDimZ: block.Z,
		sharedMemBytes: sharedBytes,
		stream:         s,
		attrs:          &fr.attr,
		numAttrs:       1,
	}
	fr.pin.Pin(fr)
	r := call(&fr.config, f, &fr.ptrs[0], nil)
	fr.pin.Unpin()
	frames.Put(fr)
	return check("cuLaunchKernelEx", r)
}

// MaxActiveClusters returns how many clusters of the given shape can be
// resident on the device at once when f runs with blocks of block threads
// and sharedBytes of dynamic shared memory
// (cuOccupancyMaxActiveClusters): the clusters of one wave. Call it inside
// Context.Do. Compute capability 9.0 and later only.
func (f Function) MaxActiveClusters(block, cluster Dim3, sharedBytes uint32) (int, error) {
	if err := checkCluster(cluster, cluster); err != nil {
		return 0, err
	}
	if err := Init(); err != nil {
		return 0, err
	}
	// The grid only has to be a multiple of the cluster; its size does not
	// change the answer.
	cfg := &launchConfig{
		gridDimX: cluster.X, gridDimY: cluster.Y, gridDimZ: cluster.Z,
		blockDimX: block.X, blockDimY: block.Y, blockDimZ: block.Z,
		sharedMemBytes: sharedBytes,
		attrs:          &launchAttribute{id: launchAttributeClusterDimension},
		numAttrs:       1,
	}
	cfg.attrs.value.clusterDim = cluster
	var pin runtime.Pinner
	pin.Pin(cfg)
	pin.Pin(cfg.attrs)
	defer pin.Unpin()
	var n int32
	if err := check("cuOccupancyMaxActiveClusters", cuOccupancyMaxActiveClusters(&n, f, cfg)); err != nil {
		return 0, err
	}
	return int(n), nil
}
