"""The HTTP server: health, /metrics, authn/authz for it, the /debug endpoints (decisions, cache, memory)."""
