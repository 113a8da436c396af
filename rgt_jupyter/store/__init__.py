"""The project on disk."""
