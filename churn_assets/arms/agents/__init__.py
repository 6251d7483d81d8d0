"""Agents answer one question through an arm's tools: the deterministic agent (default) and, later, an LLM agent."""
