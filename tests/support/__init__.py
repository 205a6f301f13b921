"""Helpers shared by more than one test tier (built programs, parsers of their output)."""
