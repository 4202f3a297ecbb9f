"""The sessions side of the reconnect manager: the keeper of the registry, the one writer of session links
and the store writer (private)."""
