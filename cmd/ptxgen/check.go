package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// compareDirs compares the committed output folder have with a fresh
// generation in want, and returns one line per difference, naming the
// module (and, for a cubin, the architecture) where there is one. Cubins
// are compared by their decompressed content.
func compareDirs(have, want string) ([]string, error) {
	var diffs []string

	haveMods, err := ptxNames(have)
	if err != nil {
		return nil, err
	}
	wantMods, err := ptxNames(want)
	if err != nil {
		return nil, err
	}
	for _, name := range union(haveMods, wantMods) {
		h, hok := haveMods[name]
		w, wok := wantMods[name]
		switch {
		case !hok:
			diffs = append(diffs, fmt.Sprintf("module %s: %s.ptx is missing", name, name))
		case !wok:
			diffs = append(diffs, fmt.Sprintf("module %s: %s.ptx is extra (no %s/%s.cu)", name, name, kernelsDir, name))
		case !bytes.Equal(h, w):
			diffs = append(diffs, fmt.Sprintf("module %s: %s.ptx differs", name, name))
		}
	}

	haveSASS, err := sassDigests(have)
	if err != nil {
		return nil, err
	}
	wantSASS, err := sassDigests(want)
	if err != nil {
		return nil, err
	}
	for _, file := range union(haveSASS, wantSASS) {
		h, hok := haveSASS[file]
		w, wok := wantSASS[file]
		where := file
		if mod, arch, ok := splitSASSFile(file); ok {
			where = fmt.Sprintf("module %s, %s: %s", mod, arch, file)
		}
		switch {
		case wok && w.err != nil:
			return nil, fmt.Errorf("%s: %w", filepath.Join(want, file), w.err)
		case !hok:
			diffs = append(diffs, where+" is missing")
		case !wok:
			diffs = append(diffs, where+" is extra (ptxgen does not build it)")
		case h.err != nil:
			diffs = append(diffs, fmt.Sprintf("%s is unreadable: %v", where, h.err))
		case h.sum != w.sum:
			diffs = append(diffs, where+" differs")
		}
	}

	md, err := compareManifests(filepath.Join(have, ptxfile.ManifestFile), filepath.Join(want, ptxfile.ManifestFile))
	if err != nil {
		return nil, err
	}
	diffs = append(diffs, md...)

	hn, herr := os.ReadFile(filepath.Join(have, namesFile))
	wn, err := os.ReadFile(filepath.Join(want, namesFile))
	if err != nil {
		return nil, err
	}
	switch {
	case errors.Is(herr, fs.ErrNotExist):
		diffs = append(diffs, namesFile+" is missing")
	case herr != nil:
		return nil, herr
	case !bytes.Equal(hn, wn):
		diffs = append(diffs, namesFile+" differs")
	}
	return diffs, nil
}

// ptxNames reads every *.ptx in dir, keyed by module name.
func ptxNames(dir string) (map[string][]byte, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.ptx"))
	if err != nil {
		return nil, err
	}
	mods := make(map[string][]byte, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		mods[strings.TrimSuffix(filepath.Base(p), ".ptx")] = data
	}
	return mods, nil
}

// sassDigest is the content of one .cubin.gz: the hex SHA-256 of the
// decompressed cubin, or why it could not be decompressed.
type sassDigest struct {
	sum string
	err error
}

// sassDigests decompresses every *.cubin.gz in dir that ptxgen makes,
// keyed by file name. The recorded JIT cubins (*.jit.cubin.gz) and
// jit.json come from a GPU, not from ptxgen, so they are not compared; the
// ptx tests check them against the PTX.
func sassDigests(dir string) (map[string]sassDigest, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.cubin.gz"))
	if err != nil {
		return nil, err
	}
	digests := make(map[string]sassDigest, len(paths))
	for _, p := range paths {
		if ptxfile.IsJITCubinFile(filepath.Base(p)) {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var d sassDigest
		d.sum, _, d.err = cubinDigest(data)
		digests[filepath.Base(p)] = d
	}
	return digests, nil
}

func compareManifests(havePath, wantPath string) ([]string, error) {
	wantData, err := os.ReadFile(wantPath)
	if err != nil {
		return nil, err
	}
	want, err := ptxfile.ParseManifest(wantData)
	if err != nil {
		return nil, err
	}
	haveData, err := os.ReadFile(havePath)
	if errors.Is(err, fs.ErrNotExist) {
		return []string{ptxfile.ManifestFile + " is missing"}, nil
	} else if err != nil {
		return nil, err
	}
	if bytes.Equal(haveData, wantData) {
		return nil, nil
	}
	have, err := ptxfile.ParseManifest(haveData)
	if err != nil {
		return []string{fmt.Sprintf("%s is unreadable: %v", ptxfile.ManifestFile, err)}, nil
	}
	// Which nvcc and ptxas built the output (the sm_90a ptxas, recorded per
	// module, included) is not itself content: when these reproduce every
	// file byte for byte (and every cubin hash), the output is current. The
	// caller names the versions separately.
	want.NVCC, want.PTXAS = have.NVCC, have.PTXAS
	for i, w := range want.Modules {
		if h, ok := have.Module(w.Name); ok {
			want.Modules[i].PTXAS = h.PTXAS
		}
	}
	if wantData, err = want.Marshal(); err != nil {
		return nil, err
	}
	if bytes.Equal(haveData, wantData) {
		return nil, nil
	}

	var diffs []string
	if !slices.Equal(have.Flags, want.Flags) {
		diffs = append(diffs, fmt.Sprintf("%s: flags are %q, ptxgen uses %q", ptxfile.ManifestFile, have.Flags, want.Flags))
	}
	if !slices.Equal(have.PTXASFlags, want.PTXASFlags) {
		diffs = append(diffs, fmt.Sprintf("%s: ptxas flags are %q, ptxgen uses %q", ptxfile.ManifestFile, have.PTXASFlags, want.PTXASFlags))
	}
	haveMods := map[string]ptxfile.ModuleInfo{}
	for _, m := range have.Modules {
		haveMods[m.Name] = m
	}
	wantMods := map[string]ptxfile.ModuleInfo{}
	for _, m := range want.Modules {
		wantMods[m.Name] = m
	}
	for _, name := range union(haveMods, wantMods) {
		h, hok := haveMods[name]
		w, wok := wantMods[name]
		switch {
		case !hok:
			diffs = append(diffs, fmt.Sprintf("module %s: missing from %s", name, ptxfile.ManifestFile))
		case !wok:
			diffs = append(diffs, fmt.Sprintf("module %s: extra in %s", name, ptxfile.ManifestFile))
		case !reflect.DeepEqual(h, w):
			diffs = append(diffs, fmt.Sprintf("module %s: %s record differs%s", name, ptxfile.ManifestFile, explain(h, w)))
		}
	}
	if len(diffs) == 0 {
		diffs = append(diffs, ptxfile.ManifestFile+" differs in formatting")
	}
	return diffs, nil
}

// explain names what changed between two records of one module.
func explain(have, want ptxfile.ModuleInfo) string {
	var why []string
	for _, p := range union(have.Sources, want.Sources) {
		h, hok := have.Sources[p]
		w, wok := want.Sources[p]
		switch {
		case !hok:
			why = append(why, p+" is a new dependency")
		case !wok:
			why = append(why, p+" is no longer a dependency")
		case h != w:
			why = append(why, p+" changed")
		}
	}
	if have.Source != want.Source {
		why = append(why, "source is now "+want.Source)
	}
	if have.Arch != want.Arch {
		why = append(why, fmt.Sprintf("arch is now %s, was %s", archOrDefault(want.Arch), archOrDefault(have.Arch)))
	}
	if !slices.Equal(have.Entries, want.Entries) {
		why = append(why, "entry points changed")
	}
	if have.PTXSHA256 != want.PTXSHA256 {
		why = append(why, "PTX hash changed")
	}
	haveSASS, wantSASS := sassByArch(have.SASS), sassByArch(want.SASS)
	for _, arch := range union(haveSASS, wantSASS) {
		h, hok := haveSASS[arch]
		w, wok := wantSASS[arch]
		switch {
		case !hok:
			why = append(why, arch+" SASS is new")
		case !wok:
			why = append(why, arch+" SASS is no longer built")
		case h != w:
			why = append(why, arch+" SASS changed")
		}
	}
	if len(why) == 0 {
		return ""
	}
	return " (" + strings.Join(why, "; ") + ")"
}

func sassByArch(images []ptxfile.SASSImage) map[string]ptxfile.SASSImage {
	m := make(map[string]ptxfile.SASSImage, len(images))
	for _, img := range images {
		m[img.Arch] = img
	}
	return m
}

func union[V any](a, b map[string]V) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func archOrDefault(arch string) string {
	if arch == "" {
		return ptxfile.DefaultArch
	}
	return arch
}
