"""What a machine is."""
