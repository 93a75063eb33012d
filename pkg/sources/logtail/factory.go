package logtail

import (
	"fmt"

	"github.com/gttsplit/gttsplit/pkg/sources"
)

const typeName = "logtail"

// NewFactory returns the factory of the "logtail" source. DefaultConfig
// returns a *Config; New accepts a *Config or a Config and validates it.
func NewFactory() sources.Factory {
	return sources.Factory{
		Type:          typeName,
		DefaultConfig: func() any { return defaultConfig() },
		New:           newSource,
	}
}

func newSource(cfg any, set sources.Settings) (sources.Source, error) {
	var c Config
	switch v := cfg.(type) {
	case *Config:
		if v == nil {
			return nil, fmt.Errorf("%s: nil config", typeName)
		}
		c = *v
	case Config:
		c = v
	default:
		return nil, fmt.Errorf("%s: config is %T, want *logtail.Config", typeName, cfg)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: invalid config: %w", typeName, err)
	}
	return newFollower(c, set), nil
}
