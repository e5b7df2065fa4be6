"""Operators of the back office: who they are, their roles, how they log in, their sessions."""
