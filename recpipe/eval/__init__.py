"""Evaluation: metrics, reports and the promotion gate."""
