"""What a person or script reads: describe data and tables, the live view, the demo text. Pure."""
