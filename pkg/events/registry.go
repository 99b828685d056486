package events

// AgentsBucket is the KV bucket of the agent registry (jetrun_agents): one
// key <agentType>.<worker> per worker and agent type it serves, with a TTL.
func (ns Namespace) AgentsBucket() string { return ns.Prefix() + "_agents" }
