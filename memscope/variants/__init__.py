"""Compiling alternatives of a recorded call: donation settings, checkpoint policies, batch sizes for fit.

One mechanism (lower the call JAX traced, or trace it again, then compile and read it),
scheduled by :mod:`memscope.capturing`, knowing nothing of it.
"""
