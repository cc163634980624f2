"""What the test modules share: helpers, hand-built records, JAX's own figures.

A test module (``tests/test_*.py``) imports from here, never from another test
module (tests/test_suite_layout.py checks it): a helper that two test modules
need lives in a module of its own, named for what it helps with.
"""
