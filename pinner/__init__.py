"""The in-container pinner. Standard library only: it must start fast and run alone."""
