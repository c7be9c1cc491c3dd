"""Graphs composed of the method graphs: a layer above the method packages, below the entry
points (the import contract in ``pyproject.toml``). Each composes the registered methods as
they are, built by the registry with their own model profile."""
