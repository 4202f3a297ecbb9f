"""The connection loop of the reconnect manager: the supervisor, the planner of what follows each attempt,
the error classifier, re-authentication and the background helpers (private)."""
