package logtail

import (
	"fmt"
	"github.com/gttsplit/gttsplit/internal/plugin"

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
	c, err := plugin.Config[Config](typeName, cfg)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: invalid config: %w", typeName, err)
	}
	return newFollower(c, set), nil
}
