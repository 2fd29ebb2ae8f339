"""The build side of dglu: compiles kernel variants ahead of time.

kernel_specs/*.yaml --(specs)--> variants --(kernels)--> cubins
--(build)--> an artifact directory with manifest.json (docs/manifest.md).
``dglu-build`` (dglu_build.cli) drives it. This is the only code that imports
CuTe DSL (``cutlass``), and only its compiling modules do.
"""
