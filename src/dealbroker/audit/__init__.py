"""The audit trail: every operator action, append-only."""
