"""Conversations between a deal's seller and each buyer who holds an offer link."""
