"""Renderers: each takes a Report (or part of one) and a file, and computes nothing."""
