"""The job model."""
