"""Runtimes: one process, or worker processes under torch elastic."""

AGENT_THREAD = "evogan-elastic-agent"  # the thread that runs torch's elastic agent in the launcher
