"""MIGRES: missing-information guided retrieve - extract - solve."""

from gaprag.graphs.migres.context import Context
from gaprag.graphs.migres.deps import MigresDeps
from gaprag.graphs.migres.graph import build
from gaprag.graphs.migres.state import OutputState, State

__all__ = ["Context", "MigresDeps", "OutputState", "State", "build"]
