package parent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetrun/jetrun/internal/engine/registry"
)

// checkInput refuses an input that does not match the input schema its
// agent type announces in the agent registry (registry.Cache: at most
// registry.CacheTTL old). The error wraps ErrBadRequest and
// registry.ErrSchemaMismatch.
func (c *Client) checkInput(ctx context.Context, agentType string, input json.RawMessage) error {
	in, _, err := c.schemas.Schemas(ctx, agentType)
	if err != nil {
		// The registry is advisory here: the worker checks again.
		c.fault(ctx, "read the agent registry", err, "agent_type", agentType)
		return nil
	}
	if err := in.Validate(input); err != nil {
		return fmt.Errorf("parent: %w: input of agent type %s %w", ErrBadRequest, agentType, err)
	}
	return nil
}

// Agents lists the live agent types of the agent registry: those some
// running worker announces, with their description, schemas and worker
// count, sorted by name. Empty when no worker ever announced one.
func (c *Client) Agents(ctx context.Context) ([]registry.Agent, error) {
	reg, ok, err := registry.Bind(ctx, c.js, c.ns)
	if err != nil || !ok {
		return []registry.Agent{}, err
	}
	return reg.Agents(ctx)
}
