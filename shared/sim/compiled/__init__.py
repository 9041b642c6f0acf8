"""The simulator's event loop compiled with numba: ``kernels`` (the loop), ``run`` (the dispatch
rule and the glue). ``Simulator.run`` uses it where it gives the Python loop's schedule; see
docs/simulator.md, "The compiled core"."""
