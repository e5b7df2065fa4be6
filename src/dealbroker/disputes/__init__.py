"""The operator's disputes: the queue, decisions, and the four eyes on large ones."""
