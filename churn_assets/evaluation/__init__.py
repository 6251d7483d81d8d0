"""Evaluation: verdicts, exposure and prediction, results files and reports."""
