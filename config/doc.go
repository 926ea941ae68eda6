// Package config loads pagedkv's tuning knobs from explicit options, the
// environment (prefix PAGEDKV_), an optional YAML or TOML file and built-in
// defaults, in that order of precedence. Every knob has one name in three
// spellings: the environment variable (PAGEDKV_KV_CAPACITY), the file key
// (kv_capacity) and the Go field (KVCapacity). Values are validated wherever
// they come from, and an invalid value is an error naming the variable, the
// value and what is allowed; nothing is silently ignored. That includes
// names: a PAGEDKV_ variable that is neither a knob nor one of NonKnobEnv, or
// a file key that is not a knob, is an error.
//
// A knob's environment variable set to the empty string counts as unset,
// except PAGEDKV_PAGED_FLASH_SPLITS, where the empty string means "auto". An
// unknown PAGEDKV_ variable is an error whatever its value, "" included.
package config
