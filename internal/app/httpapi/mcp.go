package httpapi

import "net/http"

// MCPPath is where Config.MCP, the MCP server's streamable HTTP transport,
// is served.
const MCPPath = "/mcp"

// mountMCP serves h at MCPPath, behind the same checks as the API. Every
// method there needs a write token: an MCP session calls tools, and a call
// dispatches a run.
func mountMCP(mux *http.ServeMux, h http.Handler) {
	if h == nil {
		return
	}
	// The methods of the streamable HTTP transport: a pattern without one
	// would conflict with the web UI's "GET /".
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		mux.Handle(method+" "+MCPPath, h)
	}
}
