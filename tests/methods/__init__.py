"""Scripted models, corpora and graph builders shared by the tests of one method each."""
