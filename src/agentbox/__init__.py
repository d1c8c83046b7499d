"""agentbox: the durable bookkeeping around an always-on AI agent."""

__version__ = "0.1.0"
