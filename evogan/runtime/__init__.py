"""Runtimes: one process, or worker processes under torch elastic."""
