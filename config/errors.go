package config

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (errors.Is) by every error Load returns: a value
// that does not parse or is out of range, whatever its source; an unknown
// PAGEDKV_ variable; a config file that cannot be read, has an extension
// other than .yaml, .yml or .toml, does not parse, or holds a key that is
// not a knob.
var ErrInvalid = errors.New("config: invalid value")

// invalidError is a configuration error: its text names the variable or file
// key, the value as written and what is allowed, and it matches ErrInvalid
// (and whatever err wraps, such as an fs.ErrNotExist from reading the file)
// without repeating ErrInvalid's text.
type invalidError struct{ err error }

func (e *invalidError) Error() string   { return e.err.Error() }
func (e *invalidError) Unwrap() []error { return []error{ErrInvalid, e.err} }

// errorf returns a configuration error whose text is "config: " and the
// formatted message; %w wraps as in fmt.Errorf.
func errorf(format string, a ...any) error {
	return &invalidError{fmt.Errorf("config: "+format, a...)}
}
