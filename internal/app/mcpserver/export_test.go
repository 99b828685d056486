package mcpserver

import "slices"

// KnownMethods returns the methods the server lists as served, for tests.
func KnownMethods() []string { return slices.Clone(knownMethods) }
