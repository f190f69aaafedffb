"""Moved to :mod:`evogan.individual` (below :mod:`evogan.api`); re-exported for existing imports."""

from evogan.individual import Individual, LossFitness, OptimizerFactory

__all__ = ["Individual", "LossFitness", "OptimizerFactory"]
