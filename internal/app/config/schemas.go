package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/pkg/worker"
)

// agentSchemas reads JETRUN_AGENT_SCHEMAS_DIR: one file <agentType>.json
// per described http or exec agent type, {"description", "inputSchema",
// "outputSchema"}. Every file must name a configured type and hold schemas
// that compile; every problem is reported at once.
func agentSchemas(dir string, conf agents.Configured) (map[string]worker.AgentInfo, error) {
	if dir == "" {
		return nil, nil
	}
	const setting = "JETRUN_AGENT_SCHEMAS_DIR"
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	out := map[string]worker.AgentInfo{}
	var errs []error
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if !slices.Contains(conf.Names(), name) {
			errs = append(errs, fmt.Errorf("%s: %s names no http or exec agent type (configured: %v)", setting, filepath.Base(f), conf.Names()))
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", setting, err))
			continue
		}
		var info worker.AgentInfo
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&info); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: want {\"description\", \"inputSchema\", \"outputSchema\"}: %w", setting, filepath.Base(f), err))
			continue
		}
		if err := info.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", setting, filepath.Base(f), err))
			continue
		}
		out[name] = info
	}
	return out, errors.Join(errs...)
}
