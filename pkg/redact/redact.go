// Package redact masks secrets before they leave a process: the values of
// secret-looking flags in a command line, and the credentials inside URLs.
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces a secret.
const Mask = "***"

// DefaultFlagPattern matches the names (without leading dashes) of flags
// whose value is a secret: anything named like a token, key, secret or
// password, and llama.cpp's -hft (--hf-token).
const DefaultFlagPattern = `(?i)(token|key|secret|passw(or)?d|^hft$)`

// Redactor masks the values of the flags its pattern names, and URL
// credentials.
type Redactor struct {
	flag *regexp.Regexp
}

// New returns a Redactor for flags whose name matches pattern (a regular
// expression; empty masks no flag, only URL credentials).
func New(pattern string) (*Redactor, error) {
	r := &Redactor{}
	if pattern != "" {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return nil, err
		}
		r.flag = re
	}
	return r, nil
}

// Args returns a copy of argv (argv[0] is the program) with the value of
// every secret flag masked, in both forms, --name VALUE and --name=VALUE,
// and the credentials of every URL masked (URL).
func (r *Redactor) Args(argv []string) []string {
	out := make([]string, len(argv))
	maskNext := false
	for i, a := range argv {
		switch {
		case maskNext:
			out[i], maskNext = Mask, false
			continue
		case i > 0 && r.isSecretFlag(a):
			if name, _, ok := strings.Cut(a, "="); ok {
				out[i] = name + "=" + Mask
			} else {
				out[i], maskNext = a, true
			}
			continue
		}
		out[i] = URL(a)
	}
	return out
}

// isSecretFlag reports an argument -name, --name or --name=value whose
// name the pattern matches.
func (r *Redactor) isSecretFlag(a string) bool {
	if r.flag == nil || len(a) < 2 || a[0] != '-' || a == "--" {
		return false
	}
	name := strings.TrimLeft(a, "-")
	name, _, _ = strings.Cut(name, "=")
	if name == "" || (name[0] >= '0' && name[0] <= '9') {
		return false // a negative number
	}
	return r.flag.MatchString(name)
}

// userinfo finds scheme://userinfo@ in a text.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s]+)@`)

// URL masks the credentials of every URL in s: scheme://user:password@
// keeps the user and masks the password, scheme://secret@ (a token given
// as the user, as nats://TOKEN@host) masks all of it.
func URL(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return userinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := userinfo.FindStringSubmatch(m)
		scheme, info := sub[1], sub[2]
		if user, _, ok := strings.Cut(info, ":"); ok {
			return scheme + user + ":" + Mask + "@"
		}
		return scheme + Mask + "@"
	})
}
