package config

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

// KeyInfo describes one configuration key.
type KeyInfo struct {
	// Key is the dotted path, e.g. "nats.connect_timeout".
	Key string
	// Type is one of string, secret, bool, int, float, duration.
	Type string
	// Default is the key's value in the config given to [Keys] (its default
	// when that is DefaultCollector() or DefaultAggregator()), written as an
	// environment variable or flag would take it: "100ms", "true", "256".
	// A secret that is set shows as "[redacted]".
	Default string
	// Env is the environment variable that sets the key.
	Env string
	// EnvAliases are further environment variables that set the key when
	// Env is not set, in order of preference.
	EnvAliases []string
	// Flag is the command-line flag name without dashes, or "".
	Flag string
	// Secret is true for keys whose value is never printed.
	Secret bool
	// Description is the one-line description of the key.
	Description string
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	secretType   = reflect.TypeFor[conf.Secret]()
)

// leaf is one key of a config struct with its field and value.
type leaf struct {
	KeyInfo
	field reflect.StructField
	value reflect.Value
}

// leaves walks a config struct (or a pointer to one) in field order and
// returns every leaf key. Nested structs are sections; every other field is
// a leaf; a field tagged mapstructure:"-" is none.
//
// The field of a section may name keys of it that this binary does not
// have (omit:"max_in_flight,ack_timeout") and give keys of it the words
// of this binary (desc.url:"..."): a shared section leaves what an empty
// URL means to each binary.
func leaves(cfg any) []leaf {
	v := reflect.ValueOf(cfg)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	var out []leaf
	walk(v, "", nil, &out)
	return out
}

// section is an enclosing section of a key: its path and the tag of the
// field that holds it.
type section struct {
	path string
	tag  reflect.StructTag
}

func walk(v reflect.Value, prefix string, outer []section, out *[]leaf) {
	t := v.Type()
fields:
	for i := range t.NumField() {
		f := t.Field(i)
		name, squash := tagName(f)
		if !f.IsExported() || (name == "" && !squash) || name == "-" {
			continue
		}
		if squash {
			// A section declared by another package, its keys this
			// section's own.
			walk(v.Field(i), prefix, outer, out)
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		desc := f.Tag.Get("desc")
		for _, s := range outer {
			rel := strings.TrimPrefix(key, s.path+".")
			if slices.Contains(strings.Split(s.tag.Get("omit"), ","), rel) {
				continue fields
			}
			if d, ok := s.tag.Lookup("desc." + rel); ok {
				desc = d
			}
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct {
			walk(fv, key, append(outer[:len(outer):len(outer)], section{key, f.Tag}), out)
			continue
		}
		info := KeyInfo{
			Key:         key,
			Type:        typeName(fv),
			Default:     plain(fv),
			Env:         envName(key),
			Flag:        f.Tag.Get("flag"),
			Secret:      fv.Type() == secretType,
			Description: desc,
		}
		if aliases := f.Tag.Get("env"); aliases != "" {
			info.EnvAliases = strings.Split(aliases, ",")
		}
		*out = append(*out, leaf{KeyInfo: info, field: f, value: fv})
	}
}

// tagName returns the key of a field's mapstructure tag, and whether the
// tag squashes the field (",squash": its keys are those of the struct
// holding it).
func tagName(f reflect.StructField) (name string, squash bool) {
	tag := f.Tag.Get("mapstructure")
	name, opts, _ := strings.Cut(tag, ",")
	return name, f.Type.Kind() == reflect.Struct && slices.Contains(strings.Split(opts, ","), "squash")
}

// envName returns the environment variable of key: GTTSPLIT_NATS_URL for
// nats.url.
func envName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

func typeName(v reflect.Value) string {
	switch v.Type() {
	case durationType:
		return "duration"
	case secretType:
		return "secret"
	}
	switch v.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "int"
	case reflect.Float32, reflect.Float64:
		return "float"
	default:
		return v.Kind().String()
	}
}

// plain renders a leaf value as text an environment variable or a flag
// would take.
func plain(v reflect.Value) string {
	switch v.Type() {
	case durationType:
		return formatDuration(time.Duration(v.Int()))
	case secretType:
		return conf.Secret(v.String()).String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	default:
		return fmt.Sprint(v.Interface())
	}
}

// formatDuration writes d without zero tails: "2m" rather than "2m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Keys lists every key of cfg (a [Collector] or an [Aggregator], or a
// pointer to one) in field order, with its value in cfg, its environment
// variable and its flag. It returns nil for anything else.
func Keys(cfg any) []KeyInfo {
	ls := leaves(cfg)
	if ls == nil {
		return nil
	}
	out := make([]KeyInfo, len(ls))
	for i, l := range ls {
		out[i] = l.KeyInfo
	}
	return out
}

// FlagKeys maps each flag name of cfg's keys (without dashes) to its key,
// e.g. "nats-url" to "nats.url". Load uses it to bind a flag set.
func FlagKeys(cfg any) map[string]string {
	m := map[string]string{}
	for _, l := range leaves(cfg) {
		if l.Flag != "" {
			m[l.Flag] = l.Key
		}
	}
	return m
}

// AddFlags declares on fs the flags of cfg's keys, each typed after its key
// (a duration flag takes "100ms"), with the key's value in cfg as default
// and its description and environment variable as usage. With names, only
// those flags are declared (a subcommand takes a subset); a name that is no
// flag of cfg, or a flag fs already has, is an error.
func AddFlags(fs *pflag.FlagSet, cfg any, names ...string) error {
	ls := leaves(cfg)
	byFlag := map[string]leaf{}
	var all []string
	for _, l := range ls {
		if l.Flag != "" {
			byFlag[l.Flag] = l
			all = append(all, l.Flag)
		}
	}
	if len(names) == 0 {
		names = all
	}
	for _, name := range names {
		l, ok := byFlag[name]
		if !ok {
			return fmt.Errorf("add flags: no key has flag --%s", name)
		}
		if fs.Lookup(name) != nil {
			return fmt.Errorf("add flags: flag --%s is already defined", name)
		}
		usage := fmt.Sprintf("%s (%s: %s)", l.Description, l.Key, l.Env)
		v := l.value
		switch {
		case v.Type() == durationType:
			fs.Duration(name, time.Duration(v.Int()), usage)
		case v.Kind() == reflect.String:
			fs.String(name, v.String(), usage)
		case v.Kind() == reflect.Bool:
			fs.Bool(name, v.Bool(), usage)
		case v.Kind() == reflect.Int:
			fs.Int(name, int(v.Int()), usage)
		case v.Kind() == reflect.Int64:
			fs.Int64(name, v.Int(), usage)
		case v.Kind() == reflect.Float64:
			fs.Float64(name, v.Float(), usage)
		default:
			return fmt.Errorf("add flags: --%s: unsupported type %s", name, v.Type())
		}
	}
	return nil
}

// SampleYAML renders cfg as a commented YAML config file: every key with
// its value and a comment line giving its description, flag and
// environment variable. configs/collector.yaml and configs/aggregator.yaml
// are SampleYAML of the defaults. Secrets that are set are redacted.
func SampleYAML(cfg any) []byte { return render(cfg, true) }

// render writes cfg as nested YAML in field order, with comments or not.
func render(cfg any, comments bool) []byte {
	var b bytes.Buffer
	if comments {
		name := "gttsplit"
		if t := reflect.TypeOf(cfg); t != nil {
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			name += " " + strings.ToLower(t.Name())
		}
		fmt.Fprintf(&b, "# %s configuration: every key with its default value.\n", name)
		b.WriteString("# Each key is also an environment variable GTTSPLIT_<KEY> (dots as underscores);\n")
		b.WriteString("# precedence: command-line flag > environment > this file > default.\n")
		b.WriteString("# Generated from internal/config; `go test ./internal/config -update` rewrites it.\n")
	}
	var prev []string
	for i, l := range leaves(cfg) {
		parts := strings.Split(l.Key, ".")
		sections := parts[:len(parts)-1]
		common := 0
		for common < len(sections) && common < len(prev) && sections[common] == prev[common] {
			common++
		}
		if common == 0 && (i > 0 || comments) {
			b.WriteByte('\n')
		}
		for d := common; d < len(sections); d++ {
			fmt.Fprintf(&b, "%s%s:\n", indent(d), sections[d])
		}
		depth := len(sections)
		if comments {
			fmt.Fprintf(&b, "%s# %s%s\n", indent(depth), l.Description, where(l.KeyInfo))
		}
		fmt.Fprintf(&b, "%s%s: %s\n", indent(depth), parts[len(parts)-1], yamlValue(l.value))
		prev = sections
	}
	return b.Bytes()
}

func indent(depth int) string { return strings.Repeat("  ", depth) }

// where is the " (flag --x, env Y)" tail of a key's comment.
func where(k KeyInfo) string {
	var s string
	if k.Flag != "" {
		s = "flag --" + k.Flag + ", "
	}
	return " (" + s + "env " + strings.Join(append([]string{k.Env}, k.EnvAliases...), " or ") + ")"
}

// yamlValue renders a leaf as a YAML scalar: strings single-quoted,
// durations as "100ms" (a plain YAML string), numbers and booleans plain.
func yamlValue(v reflect.Value) string {
	if v.Type() != durationType && v.Kind() == reflect.String {
		return "'" + strings.ReplaceAll(plain(v), "'", "''") + "'"
	}
	return plain(v)
}

// MarkdownTable renders [Keys] of cfg as a Markdown table with the columns
// key, default, environment variable, flag and description, for
// docs/configuration.md.
func MarkdownTable(cfg any) string {
	var b strings.Builder
	b.WriteString("| Key | Default | Environment | Flag | Description |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, k := range Keys(cfg) {
		def := "`" + cell(k.Default) + "`"
		if k.Default == "" {
			def = `""`
		}
		env := "`" + strings.Join(append([]string{k.Env}, k.EnvAliases...), "`, `") + "`"
		flag := ""
		if k.Flag != "" {
			flag = "`--" + k.Flag + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.Key, def, env, flag, cell(k.Description))
	}
	return b.String()
}
