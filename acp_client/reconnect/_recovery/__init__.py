"""Per-session recovery after a reconnect: the recoverer, its jobs, rounds and slots, the concurrency limits
and the session/list absence check (private)."""
