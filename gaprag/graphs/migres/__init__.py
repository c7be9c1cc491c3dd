"""MIGRES: missing-information guided retrieve - extract - solve."""
