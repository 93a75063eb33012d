// Package redact masks secrets before they leave a process: the values of
// secret-looking flags and NAME=VALUE arguments in a command line, the
// credentials of HTTP Authorization values, and the credentials inside
// URLs. It is a leaf package (the standard library only), so any package
// of the module, pkg/ included, may use it.
package redact

import (
	"regexp"
	"slices"
	"strings"
)

// Mask replaces a secret.
const Mask = "***"

// DefaultFlagPattern matches the names (without leading dashes) of flags
// whose value is a secret: anything named like a token, key, secret or
// password, and llama.cpp's -hft (--hf-token).
const DefaultFlagPattern = `(?i)(token|key|secret|passw(or)?d|^hft$)`

// Redactor masks the values of the flags and NAME=VALUE arguments its
// pattern names, Authorization credentials, and URL credentials.
type Redactor struct {
	flag *regexp.Regexp
}

// New returns a Redactor for flags and NAME=VALUE arguments whose name
// matches pattern (a regular expression; empty masks no name, only
// Authorization and URL credentials).
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

// modelFlags are llama.cpp's flags whose value is NAME=VALUE over a
// model's metadata keys or tensor names (--override-kv
// tokenizer.ggml.add_bos_token=bool:false, -ot token_embd.weight=CPU):
// names such as "token_embd" are no secrets, and the values say what was
// measured.
var modelFlags = []string{"--override-kv", "-ot", "--override-tensor", "-otd", "--override-tensor-draft"}

// Args returns a copy of argv (argv[0] is the program) with the secrets
// masked: the value of every secret flag, in both forms, --name VALUE and
// --name=VALUE; the value of a NAME=VALUE argument whose name is secret
// (token=VALUE, also as a flag's value: --env=API_KEY=VALUE); the
// credential of an Authorization header or a lone Bearer or Basic value
// (-H 'Authorization: Bearer VALUE'); and the credentials of every URL
// (URL).
func (r *Redactor) Args(argv []string) []string {
	out := make([]string, len(argv))
	maskNext := false
	for i, a := range argv {
		switch {
		case maskNext:
			out[i], maskNext = Mask, false
		case i == 0:
			out[i] = URL(a)
		case r.isSecretFlag(a):
			if name, _, ok := strings.Cut(a, "="); ok {
				out[i] = name + "=" + Mask
			} else {
				out[i], maskNext = a, true
			}
		case isFlag(a):
			name, v, ok := strings.Cut(a, "=")
			if !ok {
				out[i] = URL(a)
				continue
			}
			out[i] = name + "=" + r.value(v, slices.Contains(modelFlags, name))
		default:
			out[i] = r.value(a, slices.Contains(modelFlags, argv[i-1]))
		}
	}
	return out
}

// value masks the secrets of an argument that is not a flag, or of a
// flag's value; model is set for the value of one of modelFlags, whose
// NAME=VALUE pairs are kept.
func (r *Redactor) value(v string, model bool) string {
	if m := authHeader.FindStringSubmatchIndex(v); m != nil {
		// "Authorization: Bearer X" keeps its scheme, "Authorization: X"
		// has none to keep.
		cred := v[m[2]:]
		if s := authScheme.FindStringSubmatch(cred); s != nil {
			return v[:m[2]] + s[1] + Mask
		}
		return v[:m[2]] + Mask
	}
	if s := loneScheme.FindStringSubmatch(v); s != nil {
		return s[1] + Mask
	}
	if m := namedHeader.FindStringSubmatch(v); m != nil && r.flag != nil && r.flag.MatchString(m[2]) {
		// A header named like a secret: X-Api-Key: VALUE.
		return m[1] + Mask
	}
	if name, _, ok := strings.Cut(v, "="); ok && !model && isName(name) && r.flag != nil && r.flag.MatchString(name) {
		return name + "=" + Mask
	}
	return URL(v)
}

// authHeader finds an Authorization (or Proxy-Authorization) header at the
// start of a value; its submatch starts the credential.
var authHeader = regexp.MustCompile(`^\s*(?i:proxy-)?(?i:authorization)\s*:\s*(\S)`)

// authScheme matches the scheme of an Authorization credential, which is
// kept with its space.
var authScheme = regexp.MustCompile(`^((?i:bearer|basic|token|digest)\s+)\S`)

// loneScheme matches a whole value that is a Bearer or Basic credential
// (one token68 of RFC 6750 after the scheme).
var loneScheme = regexp.MustCompile(`^((?i:bearer|basic)\s+)[A-Za-z0-9._~+/=-]+$`)

// namedHeader matches a header "Name: value"; its first submatch is what
// is kept, its second the name.
var namedHeader = regexp.MustCompile(`^(\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*:\s*)\S`)

// isName reports a name of an environment variable, a key or a header
// (letters, digits, '_', '.', '-', starting with a letter or '_').
func isName(s string) bool {
	if s == "" || !(s[0] == '_' || s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '.' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// isFlag reports an argument -name or --name[=value] (not "--", "-" or a
// negative number).
func isFlag(a string) bool {
	if len(a) < 2 || a[0] != '-' || a == "--" {
		return false
	}
	name := strings.TrimLeft(a, "-")
	return name != "" && !(name[0] >= '0' && name[0] <= '9')
}

// isSecretFlag reports a flag -name, --name or --name=value whose name the
// pattern matches.
func (r *Redactor) isSecretFlag(a string) bool {
	if r.flag == nil || !isFlag(a) {
		return false
	}
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
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

// URLList masks the credentials of a comma-separated list of URLs, as a
// NATS server list is given, like URL; an entry without a scheme
// (TOKEN@host:4222, user:password@host) is masked the same way.
func URLList(list string) string {
	if !strings.Contains(list, "@") {
		return list
	}
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if at := strings.LastIndexByte(p, '@'); at >= 0 && !strings.Contains(p[:at], "://") {
			parts[i] = URL("x://" + p)[len("x://"):]
			continue
		}
		parts[i] = URL(p)
	}
	return strings.Join(parts, ",")
}
