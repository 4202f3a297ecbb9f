"""What the application's session calls go through: the gate that says when a call may go out and the
sessions' calls (private)."""
