package ptx

// defaultComputeCapability is what a module compiled for ptxfile.DefaultArch
// (compute_80) needs.
const defaultComputeCapability = 80

// ModuleComputeCapability returns the compute capability, as major*10+minor,
// that the named module's PTX needs: 90 (9.0) for the modules whose source is
// kernels_src/*_sm90.cu, compiled for compute_90 because they use sm_90
// features such as thread-block clusters, and 80 (8.0) for every other module
// and for names that are not modules. The driver refuses to JIT a module on a
// device below this, so callers check it before loading.
func ModuleComputeCapability(name string) int {
	if cc, ok := moduleComputeCapability[name]; ok {
		return cc
	}
	return defaultComputeCapability
}
