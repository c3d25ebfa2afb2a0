"""batchrun: long-document LLM leaderboard evaluations through the providers' batch APIs."""

__version__ = "0.1.0"
