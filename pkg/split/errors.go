package split

import "errors"

// ErrParse marks input that could not be parsed (a samples file that is not
// one, for example). Callers test it with errors.Is.
var ErrParse = errors.New("split: parse error")
