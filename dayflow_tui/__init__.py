"""Dayflow: durable LLM agent runs that survive crashes and never pay twice."""

__version__ = "0.1.0"
