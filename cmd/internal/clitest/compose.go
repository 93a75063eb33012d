package clitest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// Compose is the part of a Compose file (docker-compose.yml) the tests
// check.
type Compose struct {
	Services map[string]Service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

// Service is one service of a Compose file.
type Service struct {
	Image       string       `yaml:"image"`
	Build       *Build       `yaml:"build"`
	Command     Command      `yaml:"command"`
	DependsOn   DependsOn    `yaml:"depends_on"`
	Ports       []string     `yaml:"ports"`
	Volumes     []string     `yaml:"volumes"`
	Healthcheck *Healthcheck `yaml:"healthcheck"`
	// Environment is the mapping form of environment: (values as
	// written, ${VAR:-default} included).
	Environment map[string]string `yaml:"environment"`
}

// Build is a service's build section, in its short (a context path) or
// long form.
type Build struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

// UnmarshalYAML accepts "build: ." as well as a mapping.
func (b *Build) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		b.Context = n.Value
		return nil
	}
	type plain Build
	return n.Decode((*plain)(b))
}

// Command is a service's command, in exec (list) or string form.
type Command []string

// UnmarshalYAML accepts a list or a string split at blanks.
func (c *Command) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*c = strings.Fields(n.Value)
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*c = l
	return nil
}

// DependsOn maps each service depended on to its condition ("" in the
// short list form).
type DependsOn map[string]string

// UnmarshalYAML accepts a list of names or a mapping with conditions.
func (d *DependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = DependsOn{}
	if n.Kind == yaml.SequenceNode {
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, s := range l {
			(*d)[s] = ""
		}
		return nil
	}
	var m map[string]struct {
		Condition string `yaml:"condition"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	for k, v := range m {
		(*d)[k] = v.Condition
	}
	return nil
}

// Healthcheck is a service's health check.
type Healthcheck struct {
	Test Command `yaml:"test"`
}

// LoadCompose reads and decodes a Compose file; unknown top-level or
// service keys are allowed (the tests check only what they name).
func LoadCompose(path string) (Compose, error) {
	var c Compose
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if len(c.Services) == 0 {
		return c, fmt.Errorf("%s: no services", path)
	}
	return c, nil
}

// ParseCommand parses argv (without the program name) with root as the
// binary would: it finds the subcommand, parses its flags (an unknown flag
// or a bad value is an error) and checks its positional arguments. It
// returns the subcommand, whose Flags() then hold the parsed values, and
// the positional arguments.
func ParseCommand(root *cobra.Command, argv []string) (*cobra.Command, []string, error) {
	cmd, rest, err := root.Find(argv)
	if err != nil {
		return nil, nil, err
	}
	if cmd == root {
		return nil, nil, errors.New("no subcommand")
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	args := cmd.Flags().Args()
	if err := cmd.ValidateArgs(args); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return cmd, args, nil
}

// DockerIgnored reports whether path (slash-separated, relative to the
// build context) or one of its parent directories matches a pattern of
// the .dockerignore at ignoreFile. Negated patterns (!) are not supported
// and reported as an error.
func DockerIgnored(ignoreFile, path string) (bool, error) {
	b, err := os.ReadFile(ignoreFile)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		pat := strings.TrimSpace(line)
		if pat == "" || strings.HasPrefix(pat, "#") {
			continue
		}
		if strings.HasPrefix(pat, "!") {
			return false, fmt.Errorf("%s: negated pattern %q not supported by this check", ignoreFile, pat)
		}
		pat = strings.TrimSuffix(strings.TrimPrefix(pat, "/"), "/")
		for p := path; p != "." && p != "/" && p != ""; p = filepath.ToSlash(filepath.Dir(p)) {
			if ok, err := filepath.Match(pat, p); err != nil {
				return false, fmt.Errorf("%s: %w", ignoreFile, err)
			} else if ok {
				return true, nil
			}
		}
	}
	return false, nil
}
