"""Data sources: synthetic group-sparse problems (and, later, MNIST) with their group structures."""
