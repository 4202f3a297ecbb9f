"""Session ownership across worker processes: leases, fenced writes and the client-side controls
(private)."""
