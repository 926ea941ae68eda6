package config

import (
	"fmt"
	"slices"
	"strings"
)

// nonKnobEnv is the one list of PAGEDKV_ environment variables that are not
// knobs but that Load accepts in the environment. Any other PAGEDKV_ variable
// that is not a knob's Env is an error, so a misspelled knob is never
// silently ignored; a new non-knob variable must be added here.
var nonKnobEnv = []string{
	EnvConfigFile, // the config file's path; read by Load itself
	EnvTestSeed,   // the seed of the GPU tests' random inputs (tests/, scripts/gpu.sh)
}

// NonKnobEnv returns the PAGEDKV_ environment variables that are not knobs and
// that Load accepts: EnvConfigFile and EnvTestSeed. Every other PAGEDKV_
// variable must be the Env of one of Keys, or Load fails. The slice is a copy.
func NonKnobEnv() []string { return slices.Clone(nonKnobEnv) }

// knownEnv returns every PAGEDKV_ variable Load accepts: the knobs in Keys
// order, then nonKnobEnv.
func knownEnv() []string {
	names := make([]string, 0, len(keys)+len(nonKnobEnv))
	for _, k := range keys {
		names = append(names, k.Env)
	}
	return append(names, nonKnobEnv...)
}

// checkEnvNames returns an error naming every variable in environ (as
// os.Environ returns it) that starts with EnvPrefix but is not known, with
// the closest known name where one is close. Values play no part: an unknown
// variable set to "" is an error too.
func checkEnvNames(environ []string) error {
	known := knownEnv()
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	unknown = slices.Compact(unknown)
	for i, name := range unknown {
		if s, ok := closestEnv(name, known); ok {
			unknown[i] = fmt.Sprintf("%s (did you mean %s?)", name, s)
		}
	}
	noun := "variable"
	if len(unknown) > 1 {
		noun = "variables"
	}
	return errorf("unknown environment %s %s; known variables: %s",
		noun, strings.Join(unknown, ", "), strings.Join(known, ", "))
}

// closestEnv returns the known name nearest to name by edit distance of the
// part after EnvPrefix, ignoring case, if it is close: at most 2 edits, or a
// third of the known part's length for longer names. Ties go to the earlier
// name in known.
func closestEnv(name string, known []string) (string, bool) {
	part := strings.ToUpper(strings.TrimPrefix(name, EnvPrefix))
	best, bestDist := "", -1
	for _, k := range known {
		kpart := strings.TrimPrefix(k, EnvPrefix)
		d := editDistance(part, kpart)
		if d > max(2, len(kpart)/3) {
			continue
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	return best, bestDist >= 0
}

// editDistance is the Levenshtein distance between a and b in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
