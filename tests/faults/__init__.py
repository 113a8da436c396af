"""Property-based tests of the input guards (hostile manifests, names, command lines, numbers)."""
