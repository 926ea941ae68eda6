package ptx

import (
	"sync"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// defaultComputeCapability is what a module compiled for ptxfile.DefaultArch
// (compute_80) needs.
const defaultComputeCapability = 80

// ModuleComputeCapability returns the compute capability, as major*10+minor,
// that the named module's PTX needs: 90 (9.0) for the modules whose source is
// kernels_src/*_sm90.cu, compiled for compute_90 because they use sm_90
// features such as thread-block clusters, and for those whose source is
// kernels_src/*_sm90a.cu, compiled for compute_90a because they use
// Hopper-only instructions (wgmma, setmaxnreg); 80 (8.0) for every other
// module and for names that are not modules. The driver refuses to JIT a
// module on a device below this, and an arch-specific module anywhere but
// at it (ModuleArchSpecific), so callers check ModuleRunsOn before loading.
func ModuleComputeCapability(name string) int {
	if cc, ok := moduleComputeCapability[name]; ok {
		return cc
	}
	return defaultComputeCapability
}

// ModuleArchSpecific reports whether the named module is arch-specific: its
// manifest arch is compute_90a (kernels_src/*_sm90a.cu), so its PTX and SASS
// run only on compute capability ModuleComputeCapability exactly, not on a
// later minor or major version. It is false for names that are not modules.
func ModuleArchSpecific(name string) bool { return archSpecificModules()[name] }

// ModuleRunsOn reports whether the named module runs on a device of compute
// capability cc (major*10+minor): at ModuleComputeCapability or above, or,
// for an arch-specific module, at it exactly. When it does not, reason says
// why, e.g. "needs compute capability 9.0 exactly (sm_90a), device is 10.0"
// or "needs compute capability 9.0 or newer, device is 8.9". Names that are
// not modules are treated as compute_80 modules.
func ModuleRunsOn(name string, cc int) (ok bool, reason string) {
	return ptxfile.RunsOn(ModuleComputeCapability(name), ModuleArchSpecific(name), cc)
}

// archSpecificModules is the set of arch-specific modules, read once from
// the embedded manifest (the ptx tests keep it readable).
var archSpecificModules = sync.OnceValue(func() map[string]bool {
	m, err := ReadManifest()
	if err != nil {
		panic("ptx: embedded manifest.json is unreadable: " + err.Error())
	}
	set := map[string]bool{}
	for _, mod := range m.Modules {
		if mod.ArchSpecific() {
			set[mod.Name] = true
		}
	}
	return set
})
